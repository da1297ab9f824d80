package cpu

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.Embedder = (*Target)(nil)

// LastHidden returns the final-normed hidden state of tokens' last position (see ports.Embedder). It runs
// on a session of its own, closed before it returns, so the caches it builds live only for the call; the LM
// head is never run.
func (t *Target) LastHidden(ctx context.Context, tokens []ports.Token) ([]float32, error) {
	s, err := newSession(t, nil)
	if err != nil {
		return nil, fmt.Errorf("cpu last hidden: %w", err)
	}
	defer s.Close()
	if _, err := s.admit(tokens, ports.ForwardOptions{Rows: 1}); err != nil {
		return nil, fmt.Errorf("cpu last hidden: %w", err)
	}
	be := ops{pool: t.pool, mem: &s.mem, layers: scoped(len(tokens))} // no tape: a long input's layers give their buffers back
	st := s.begin(len(tokens), ports.ForwardOptions{})
	x, err := model.LastHidden(ctx, t.m, be, st, tokens)
	if err != nil {
		return nil, fmt.Errorf("cpu last hidden: %w", err)
	}
	// The row lives in the session's arena, which Close drops: the caller gets a copy.
	return append([]float32(nil), x.v...), nil
}
