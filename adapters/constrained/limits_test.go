package constrained

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
	sess, c := Wrap(inner, m, 1, 0, vocab, wallClock{})
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
	sess, c := Wrap(inner, m, 1, 0, vocab, wallClock{})
	_, err := sess.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	require.ErrorIs(t, err, boom)
	assert.Len(t, c.states, inner.Len()-c.start+1, "one state per held position")
	inner.fail = nil
	_, err = sess.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	assert.NoError(t, err, "the session goes on from where it was")
}

// optionalProperties is an object schema of n optional string properties (the amplification).
func optionalProperties(n int) []byte {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf(`"p%d":{"type":"string"}`, i)
	}
	return []byte(`{"type":"object","properties":{` + strings.Join(ps, ",") + `}}`)
}

// A schema over a size limit is a request error naming the parameter and the limit, found before any
// compile: even a compile whose context is done answers with the limit.
func TestCompilerRefusesOversizedConstraints(t *testing.T) {
	c, err := NewCompiler(byteTokenizer{size: 129}, 129, []ports.Token{128}, Options{})
	require.NoError(t, err)
	done, cancel := context.WithCancel(t.Context())
	cancel()
	for _, ctx := range []context.Context{t.Context(), done} {
		_, err = c.Matcher(ctx, &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format", Schema: optionalProperties(20000)}, false, false)
		var re *ports.RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, "response_format", re.Param)
		assert.Contains(t, re.Message, "over the limit of 262144")
		assert.ErrorIs(t, err, grammar.ErrTooLarge)

		_, err = c.Matcher(ctx, &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format", Schema: optionalProperties(5000)}, false, false)
		require.ErrorAs(t, err, &re)
		assert.Contains(t, re.Message, "members of one schema object (properties, $defs…) at #/properties: 5000, over the limit of 256")
	}
	// A tool set: too many tools, strict or not.
	var tools []ports.ConstraintTool
	for i := range grammar.MaxTools + 1 {
		tools = append(tools, ports.ConstraintTool{Name: fmt.Sprintf("f%d", i)})
	}
	_, err = c.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Tools: tools}, false, false)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "tool_choice", re.Param)
	assert.ErrorIs(t, err, grammar.ErrTooLarge)
	// A lenient tool's oversized schema is refused too, not relaxed to any object.
	_, err = c.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice",
		Tools: []ports.ConstraintTool{{Name: "f", Parameters: optionalProperties(5000)}}}, false, false)
	assert.ErrorIs(t, err, grammar.ErrTooLarge)
}

// A client that leaves stops the compile: the error is its context's, not a request error (no 400 for a
// request nobody reads), and nothing is cached. A compile that outlasts the compile timeout is a request
// error naming the limit.
func TestCompilerCompileStopsWithContext(t *testing.T) {
	c, err := NewCompiler(byteTokenizer{size: 129}, 129, []ports.Token{128}, Options{})
	require.NoError(t, err)
	k := &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format", Schema: optionalProperties(grammar.MaxProperties)}
	done, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.Matcher(done, k, false, false)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ports.ErrInvalidRequest)
	m, err := c.Matcher(t.Context(), k, false, false)
	require.NoError(t, err, "the cancelled compile cached nothing")
	require.NotNil(t, m)

	slow, err := NewCompiler(byteTokenizer{size: 129}, 129, []ports.Token{128}, Options{CompileTimeout: time.Nanosecond})
	require.NoError(t, err)
	_, err = slow.Matcher(t.Context(), k, false, false)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Contains(t, re.Message, "longer than the limit of 1ns")
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = NewCompiler(byteTokenizer{size: 129}, 129, nil, Options{CompileTimeout: -time.Second})
	assert.Error(t, err)
}

// A lenient (non-strict) tool's schema is checked as a strict one's is: one that is not a JSON Schema is a
// request error even when the call is forced (it used to become "any object"); one the subset cannot
// express is still relaxed to any object.
func TestCompilerLenientToolSchemaValidated(t *testing.T) {
	c, err := NewCompiler(byteTokenizer{size: 129}, 129, []ports.Token{128}, Options{})
	require.NoError(t, err)
	for _, strict := range []bool{false, true} {
		_, err = c.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice",
			Tools: []ports.ConstraintTool{{Name: "f", Strict: strict, Parameters: []byte(`{"type":"object","properties":{"a":{"type":"foo"}}}`)}}}, false, false)
		var re *ports.RequestError
		require.ErrorAs(t, err, &re, "strict %t", strict)
		assert.Equal(t, "tool_choice", re.Param)
		assert.Contains(t, re.Message, `tool "f"`)
		_, err = c.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice",
			Tools: []ports.ConstraintTool{{Name: "g", Strict: strict, Parameters: []byte(`{"type":"object","properties":{"a":{"type":"integer","minimum":"x"}}}`)}}}, false, false)
		assert.ErrorAs(t, err, &re, "strict %t", strict)
	}
	m, err := c.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice",
		Tools: []ports.ConstraintTool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"a":{"type":"string","pattern":"^a"}}}`)}}}, false, false)
	require.NoError(t, err, "a valid schema outside the subset is relaxed for a lenient tool")
	require.NotNil(t, m)
}

// A mask walk stops when the client leaves: the constrained forward returns the context's error, not a
// request error.
func TestConstrainedMaskStopsWithContext(t *testing.T) {
	g, err := grammar.CompileSchema(t.Context(), optionalProperties(grammar.MaxProperties))
	require.NoError(t, err)
	toks := make([][]byte, 1<<14)
	for i := range toks {
		toks[i] = []byte(fmt.Sprintf(`{"p%d":`, i))
	}
	m, err := grammar.NewMatcher(g, grammar.NewVocab(toks), nil)
	require.NoError(t, err)
	// The token fed is the prompt's last: its row predicts the first generated position, whose mask walks
	// the whole trie of keys.
	inner := &rowSession{n: 1, vocab: len(toks)}
	sess, _ := Wrap(inner, m, 2, 0, len(toks), wallClock{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = sess.Forward(ctx, []ports.Token{0}, ports.ForwardOptions{})
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ports.ErrInvalidRequest)
}

// CheckToolSchemas refuses a tool schema that is not a JSON Schema, naming the tool, and remembers the valid
// ones.
func TestCheckToolSchemas(t *testing.T) {
	c, err := NewCompiler(byteTokenizer{size: 129}, 129, []ports.Token{128}, Options{})
	require.NoError(t, err)
	good := `{"type":"function","function":{"name":"g","parameters":{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}}}`
	require.NoError(t, c.CheckToolSchemas([]byte(`[`+good+`,{"type":"function","function":{"name":"n"}}]`)))
	assert.Equal(t, 1, c.valid.Len(), "the valid schema is remembered")
	err = c.CheckToolSchemas([]byte(`[` + good + `,{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"foo"}}}}}]`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `tool "f": parameters: at #: invalid JSON Schema`)
	err = c.CheckToolSchemas([]byte(`[{"type":"function","function":{"name":"big","parameters":` + string(optionalProperties(300)) + `}}]`))
	assert.ErrorIs(t, err, grammar.ErrTooLarge)
	assert.NoError(t, c.CheckToolSchemas(nil))
}
