package model

import (
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// CheckTokens refuses ids outside a vocabulary of vocab tokens.
func CheckTokens(tokens []ports.Token, vocab int) error {
	for i, tok := range tokens {
		if tok < 0 || int(tok) >= vocab {
			return fmt.Errorf("token %d at index %d outside the vocabulary [0,%d)", tok, i, vocab)
		}
	}
	return nil
}

// Position is a session's bookkeeping that every backend shares: how many positions the attention caches
// hold (Len) and where the recurrent layers are (they lag behind between a rollback's TrimKV and its Restore
// or ReplayTape).
type Position struct {
	N, Rec    int
	Recurrent bool // the model has recurrent layers
}

// CheckForward validates a Forward of tokens with opts against the session's position, a vocabulary of
// vocab tokens and a context of contextLength positions, and returns the number of rows to return.
func (p Position) CheckForward(tokens []ports.Token, opts ports.ForwardOptions, vocab, contextLength int) (rows int, err error) {
	T := len(tokens)
	switch {
	case T == 0:
		return 0, errors.New("no tokens")
	case opts.Rows < 0:
		return 0, fmt.Errorf("rows %d is negative", opts.Rows)
	case p.N+T > contextLength:
		return 0, fmt.Errorf("%d held + %d new > %d: %w", p.N, T, contextLength, ports.ErrContextFull)
	case p.Recurrent && p.Rec != p.N:
		return 0, fmt.Errorf("recurrent state is at position %d but the KV caches at %d (finish the rollback with Restore or ReplayTape)", p.Rec, p.N)
	}
	if err := CheckTokens(tokens, vocab); err != nil {
		return 0, err
	}
	if opts.Sampling != nil {
		if err := opts.Sampling.Validate(); err != nil {
			return 0, err
		}
	}
	rows = T
	if opts.Rows > 0 && opts.Rows < T {
		rows = opts.Rows
	}
	return rows, nil
}

// Trim validates TrimKV(n) and applies it: Len becomes n, and so does the recurrent position of a model
// without recurrent layers.
func (p *Position) Trim(n int) error {
	if n < 0 || n > p.N {
		return fmt.Errorf("trim to %d outside [0,%d]", n, p.N)
	}
	p.N = n
	if !p.Recurrent {
		p.Rec = n
	}
	return nil
}

// CheckReplay validates ReplayTape(n) of a tape of t positions.
func CheckReplay(n, t int) error {
	if n < 0 || n > t {
		return fmt.Errorf("%d steps outside [0,%d]", n, t)
	}
	return nil
}

// ErrStaleTape is returned by ReplayTape for a tape that is not from the session's latest Forward.
var ErrStaleTape = errors.New("tape is not from the latest Forward of this session")
