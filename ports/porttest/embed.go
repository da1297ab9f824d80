package porttest

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// EmbedSuite configures the Embedder conformance suite: what the embeddings endpoint relies on, checked
// through the port only.
type EmbedSuite struct {
	// Target is the model under test; it must implement ports.Embedder. Required.
	Target ports.Target
	// Tolerance is the largest absolute difference allowed between values that must be equal (the same
	// sequence embedded twice, alone or concurrently); 0 means bit-exact.
	Tolerance float64
	// CheckContext makes the suite embed ContextLength+1 tokens and expect ErrContextFull; leave it off
	// for a model whose context is too long to fill in a test.
	CheckContext bool
}

// Run runs every check as a subtest.
func (s EmbedSuite) Run(t *testing.T) {
	require.NotNil(t, s.Target, "EmbedSuite.Target")
	e, ok := s.Target.(ports.Embedder)
	require.True(t, ok, "%T does not implement ports.Embedder", s.Target)
	info := s.Target.Info()
	require.GreaterOrEqual(t, info.VocabSize, 2)
	seq := func(n, salt int) []ports.Token {
		b := make([]ports.Token, n)
		for i := range b {
			b[i] = ports.Token((i*5 + salt*3 + 1) % info.VocabSize)
		}
		return b
	}
	base := seq(6, 0)
	t.Run("WidthAndFinite", func(t *testing.T) {
		for _, n := range []int{1, 2, len(base)} {
			h, err := e.LastHidden(t.Context(), base[:n])
			require.NoError(t, err)
			require.Len(t, h, info.HiddenSize, "one row of HiddenSize values")
			for i, v := range h {
				require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "value %d of %d tokens is %v", i, n, v)
			}
		}
	})
	t.Run("NoStateBetweenCalls", func(t *testing.T) {
		a1, err := e.LastHidden(t.Context(), base)
		require.NoError(t, err)
		_, err = e.LastHidden(t.Context(), seq(9, 2))
		require.NoError(t, err)
		a2, err := e.LastHidden(t.Context(), base)
		require.NoError(t, err)
		s.near(t, a1, a2, "the same sequence embedded again after another")
	})
	t.Run("Concurrent", func(t *testing.T) {
		want := make([][]float32, 3)
		for i := range want {
			h, err := e.LastHidden(t.Context(), seq(4+i, i))
			require.NoError(t, err)
			want[i] = h
		}
		got := make([][]float32, len(want))
		errs := make([]error, len(want))
		var wg sync.WaitGroup
		for i := range want {
			wg.Go(func() { got[i], errs[i] = e.LastHidden(t.Context(), seq(4+i, i)) })
		}
		wg.Wait()
		for i := range want {
			require.NoError(t, errs[i])
			s.near(t, want[i], got[i], "a concurrent call")
		}
	})
	t.Run("WholeSequenceCounts", func(t *testing.T) {
		// The last position's state depends on the last token and, through attention or the recurrence,
		// on the one before it: neither an embedding row lookup nor a pass without context passes.
		for _, n := range []int{2, len(base)} {
			ref, err := e.LastHidden(t.Context(), base[:n])
			require.NoError(t, err)
			for name, at := range map[string]int{"last token": n - 1, "token before it": n - 2} {
				other := append([]ports.Token(nil), base[:n]...)
				other[at] = (other[at] + 1) % ports.Token(info.VocabSize)
				h, err := e.LastHidden(t.Context(), other)
				require.NoError(t, err)
				assert.NotEqual(t, ref, h, "changing the %s of %d must change the hidden state", name, n)
			}
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		_, err := e.LastHidden(t.Context(), nil)
		assert.Error(t, err, "no tokens")
		_, err = e.LastHidden(t.Context(), []ports.Token{1, ports.Token(info.VocabSize)})
		assert.Error(t, err, "an id outside the vocabulary")
		_, err = e.LastHidden(t.Context(), []ports.Token{-1})
		assert.Error(t, err, "a negative id")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err = e.LastHidden(ctx, base)
		assert.ErrorIs(t, err, context.Canceled)
		if s.CheckContext {
			_, err = e.LastHidden(t.Context(), seq(info.ContextLength+1, 1))
			assert.True(t, errors.Is(err, ports.ErrContextFull), "a sequence past the context: %v", err)
			h, err := e.LastHidden(t.Context(), seq(info.ContextLength, 1))
			require.NoError(t, err, "a sequence that fills the context exactly")
			assert.Len(t, h, info.HiddenSize)
		}
	})
}

func (s EmbedSuite) near(t *testing.T, want, got []float32, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		if s.Tolerance == 0 {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%s: value %d: %v vs %v", what, i, want[i], got[i])
			continue
		}
		require.InDelta(t, want[i], got[i], s.Tolerance, "%s: value %d", what, i)
	}
}
