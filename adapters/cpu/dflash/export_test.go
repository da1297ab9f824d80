package dflash

import "github.com/higgs-go/higgs/ports"

// LastLogits exposes a session's last draft logits (rows 1..bs−1 × V) to the external tests.
func LastLogits(s ports.DraftSession) []float32 { return s.(*Session).logits }
