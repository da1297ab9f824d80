package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// ErrNoRawLogits is wrapped when a backend's Forward returns no raw logits though ForwardOptions.Logits asked
// for them. It wraps
// errors.ErrUnsupported.
var ErrNoRawLogits = fmt.Errorf("this backend's sessions do not expose raw logits: %w", errors.ErrUnsupported)

// LogitsResult is the JSON object `higgs-verify logits --json` prints.
type LogitsResult struct {
	Model   string        `json:"model"`
	Backend string        `json:"backend"`
	Tokens  []ports.Token `json:"tokens"`
	// Logits holds one row per input position: the full next-token logits after that position.
	Logits [][]float32 `json:"logits"`
}

// forwardLogits runs one fresh forward pass over tokens and returns every position's logits, plus the taps
// of tapLayers when non-empty.
func forwardLogits(ctx context.Context, t ports.Target, tokens []ports.Token, tapLayers []int) ([][]float32, ports.Taps, error) {
	if err := checkTokens(t, tokens); err != nil {
		return nil, nil, err
	}
	sess, err := t.NewSession(ctx, tapLayers)
	if err != nil {
		return nil, nil, fmt.Errorf("open session: %w", err)
	}
	defer sess.Close()
	fr, err := sess.Forward(ctx, tokens, ports.ForwardOptions{Taps: len(tapLayers) > 0, Logits: true})
	if err != nil {
		return nil, nil, fmt.Errorf("forward: %w", err)
	}
	flat := fr.Logits
	if flat == nil {
		return nil, nil, fmt.Errorf("session %T: %w", sess, ErrNoRawLogits)
	}
	V := t.Info().VocabSize
	if len(flat) != len(tokens)*V {
		return nil, nil, fmt.Errorf("forward returned %d logits for %d positions of %d", len(flat), len(tokens), V)
	}
	rows := make([][]float32, len(tokens))
	for i := range rows {
		rows[i] = slices.Clone(flat[i*V : (i+1)*V])
	}
	// Taps handles may die with the session (MLX arrays): copy them out while it is open.
	var taps ports.Taps
	if ht, ok := fr.Taps.(ports.HostTaps); ok {
		data, r, w, err := ht.Host()
		if err != nil {
			return nil, nil, fmt.Errorf("read taps: %w", err)
		}
		taps = &floatTaps{data: slices.Clone(data[:r*w]), rows: r, width: w}
	}
	return rows, taps, nil
}

func checkTokens(t ports.Target, tokens []ports.Token) error {
	if len(tokens) == 0 {
		return fmt.Errorf("%w: empty prompt", ErrBadInput)
	}
	v := t.Info().VocabSize
	for i, tok := range tokens {
		if tok < 0 || int(tok) >= v {
			return fmt.Errorf("%w: token %d (position %d) outside the vocabulary of %d", ErrBadInput, tok, i, v)
		}
	}
	if n := t.Info().ContextLength; n > 0 && len(tokens) > n {
		return fmt.Errorf("%w: %d tokens exceed the context length %d", ErrBadInput, len(tokens), n)
	}
	return nil
}

// Logits runs `higgs-verify logits`: one fresh forward pass over the whole prompt.
func Logits(ctx context.Context, m *models.Models, tokens []ports.Token) (LogitsResult, error) {
	rows, _, err := forwardLogits(ctx, m.Target, tokens, nil)
	if err != nil {
		return LogitsResult{}, err
	}
	return LogitsResult{Model: m.Name, Backend: m.Backend, Tokens: slices.Clone(tokens), Logits: rows}, nil
}

// floatTaps is a plain float32 tap matrix (rows × width).
type floatTaps struct {
	data        []float32
	rows, width int
}

func (t *floatTaps) Rows() int { return t.rows }

func (t *floatTaps) Slice(n int) ports.Taps {
	n = min(max(n, 0), t.rows)
	return &floatTaps{data: t.data[:n*t.width], rows: n, width: t.width}
}

func (t *floatTaps) Detach() ports.Taps {
	return &floatTaps{data: append([]float32(nil), t.data...), rows: t.rows, width: t.width}
}

// Host exposes the matrix (read only; see ports.HostTaps).
func (t *floatTaps) Host() ([]float32, int, int, error) { return t.data, t.rows, t.width, nil }
