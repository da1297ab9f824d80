package constrained

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/ports"
)

// rowSession is a session that returns one row of zero logits per token, or fail.
type rowSession struct {
	n, vocab int
	fail     error
}

func (s *rowSession) Len() int { return s.n }
func (s *rowSession) Forward(_ context.Context, tokens []ports.Token, _ ports.ForwardOptions) (ports.ForwardResult, error) {
	if s.fail != nil {
		return ports.ForwardResult{}, s.fail
	}
	s.n += len(tokens)
	return ports.ForwardResult{Greedy: make([]ports.Token, len(tokens)), Logits: make([]float32, len(tokens)*s.vocab)}, nil
}
func (s *rowSession) TrimKV(n int) error                         { s.n = n; return nil }
func (s *rowSession) Snapshot() (ports.RecurrentSnapshot, error) { return nil, errors.New("none") }
func (s *rowSession) Restore(ports.RecurrentSnapshot) error      { return errors.New("none") }
func (s *rowSession) Close() error                               { return nil }

// limitMatcher is a recursive schema of 64 alternatives: each `{"a":` multiplies the open ones by 64, so the
// second one passes the grammar's stack limit (the compile-time check cannot see through recursion).
func limitMatcher(t *testing.T) (*grammar.Matcher, int) {
	t.Helper()
	var alts []string
	for i := range 64 {
		alts = append(alts, fmt.Sprintf(`{"type":"object","properties":{"a":{"$ref":"#"},"b%d":{"type":"string"}}}`, i))
	}
	g, err := grammar.CompileSchema(context.Background(), []byte(`{"anyOf":[`+strings.Join(alts, ",")+`]}`))
	require.NoError(t, err)
	toks := [][]byte{[]byte(`{"a":`), []byte(`{`), []byte(`}`), nil}
	m, err := grammar.NewMatcher(g, grammar.NewVocab(toks), []int32{3})
	require.NoError(t, err)
	return m, len(toks)
}

func TestConstrainedStackLimitEndsTheGeneration(t *testing.T) {
	m, vocab := limitMatcher(t)
	inner := &rowSession{n: 1, vocab: vocab}
	sess, c := Wrap(inner, m, 1, vocab, wallClock{})
	// The start state's mask is fine; after one `{"a":` the mask's walk would open 64×64 stacks.
	_, err := sess.Forward(t.Context(), []ports.Token{0}, ports.ForwardOptions{})
	assert.ErrorIs(t, err, grammar.ErrTooManyStacks)
	assert.ErrorIs(t, err, ports.ErrInvalidRequest, "the schema is at fault: a request error")
	// A block that itself crosses the limit is refused before the model runs, and the states stay in step.
	require.NoError(t, sess.TrimKV(1))
	_, err = sess.Forward(t.Context(), []ports.Token{0, 0}, ports.ForwardOptions{})
	assert.ErrorIs(t, err, grammar.ErrTooManyStacks)
	assert.Equal(t, 1, inner.Len())
	assert.Len(t, c.states, inner.Len()-c.start+1)
}

func TestConstrainedForwardErrorKeepsStates(t *testing.T) {
	m, vocab := limitMatcher(t)
	boom := errors.New("backend gone")
	inner := &rowSession{n: 1, vocab: vocab, fail: boom}
	sess, c := Wrap(inner, m, 1, vocab, wallClock{})
	_, err := sess.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	require.ErrorIs(t, err, boom)
	assert.Len(t, c.states, inner.Len()-c.start+1, "one state per held position")
	inner.fail = nil
	_, err = sess.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	assert.NoError(t, err, "the session goes on from where it was")
}
