package model

import (
	"math/rand/v2"
	"testing"

	"github.com/higgs-go/higgs/ports"
)

func BenchmarkTopCandidates(b *testing.B) {
	const rows, vocab = 15, 4096
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	first := make([]ports.Token, rows)
	for i := range first {
		first[i] = ports.Token(i)
	}
	for b.Loop() {
		if _, err := TopCandidates(logits, vocab, first, 4); err != nil {
			b.Fatal(err)
		}
	}
}
