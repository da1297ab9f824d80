package mlx

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.Embedder = (*Target)(nil)

// LastHidden returns the final-normed hidden state of tokens' last position (see ports.Embedder). It runs
// on a session of its own, closed before it returns, in chunks of at most maxChunk positions as a prefill
// does; the LM head is never run. A model split across processes cannot: its last stage's rows never come
// back to rank 0 but as logits.
func (t *Target) LastHidden(ctx context.Context, tokens []ports.Token) ([]float32, error) {
	if t.ring != nil {
		return nil, fmt.Errorf("mlx last hidden: a model split across processes has no embeddings: %w", errors.ErrUnsupported)
	}
	s, err := t.newSession(nil)
	if err != nil {
		return nil, fmt.Errorf("mlx last hidden: %w", err)
	}
	defer s.Close()
	s.hidden = true
	a := &t.m.Arch
	if _, err := s.pos.CheckForward(tokens, ports.ForwardOptions{Rows: 1}, a.Vocab, a.ContextLength); err != nil {
		return nil, fmt.Errorf("mlx last hidden: %w", err)
	}
	var hidden []float32
	for lo := 0; lo < len(tokens); lo += maxChunk {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("mlx last hidden: %w", err)
		}
		hi := min(len(tokens), lo+maxChunk)
		last := hi == len(tokens)
		r, err := s.run(ctx, tokens[lo:hi], 1, false, false, last, nil)
		if err != nil {
			return nil, fmt.Errorf("mlx last hidden: %w", err)
		}
		if last {
			hidden = r.logits
		}
	}
	if len(hidden) != a.Hidden {
		return nil, fmt.Errorf("mlx last hidden: read %d values, want %d", len(hidden), a.Hidden)
	}
	return hidden, nil
}
