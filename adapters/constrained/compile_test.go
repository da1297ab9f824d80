package constrained

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/ports"
)

// byteTokenizer is a vocabulary of single bytes (id i spells byte i) with a special end token; only its
// TokenBytes ability is used here.
type byteTokenizer struct {
	ports.Tokenizer
	size int
}

func (b byteTokenizer) TokenBytes(id ports.Token) ([]byte, bool, bool) {
	switch {
	case id < 0 || int(id) >= b.size:
		return nil, false, false
	case int(id) == b.size-1:
		return []byte("<end>"), true, true
	}
	return []byte{byte(id)}, false, true
}

func schemaConstraint(i int) *ports.Constraint {
	return &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format",
		Schema: []byte(fmt.Sprintf(`{"type":"object","properties":{"p%d":{"type":"integer"}},"required":["p%d"]}`, i, i))}
}

// The matcher cache keeps the most recently used constraints, evicting the least recently used one first
// (not the whole cache), and the same constraint under another reasoning setting is another grammar.
func TestCompilerKeepsRecentMatchers(t *testing.T) {
	c, err := NewCompiler(byteTokenizer{size: 129}, 129, []ports.Token{128}, Options{ThinkOpen: "<think>", ThinkClose: "</think>", Matchers: 2})
	require.NoError(t, err)
	m0, err := c.Matcher(t.Context(), schemaConstraint(0), false, false)
	require.NoError(t, err)
	m1, err := c.Matcher(t.Context(), schemaConstraint(1), false, false)
	require.NoError(t, err)
	again, err := c.Matcher(t.Context(), schemaConstraint(0), false, false)
	require.NoError(t, err)
	assert.Same(t, m0, again, "a repeated constraint reuses its matcher (and its masks)")
	_, err = c.Matcher(t.Context(), schemaConstraint(2), false, false) // evicts 1, the least recently used
	require.NoError(t, err)
	again, err = c.Matcher(t.Context(), schemaConstraint(0), false, false)
	require.NoError(t, err)
	assert.Same(t, m0, again, "the recently used matcher survives the eviction")
	again, err = c.Matcher(t.Context(), schemaConstraint(1), false, false)
	require.NoError(t, err)
	assert.NotSame(t, m1, again, "the least recently used matcher was evicted")
	think, err := c.Matcher(t.Context(), schemaConstraint(0), true, false)
	require.NoError(t, err)
	assert.NotSame(t, m0, think)

	none, err := c.Matcher(t.Context(), nil, false, false)
	require.NoError(t, err)
	assert.Nil(t, none)
}

// The compiler's errors are request errors naming the constraint's parameter, with the cause in the chain.
func TestCompilerErrors(t *testing.T) {
	c, err := NewCompiler(byteTokenizer{size: 129}, 129, []ports.Token{128}, Options{})
	require.NoError(t, err)
	_, err = c.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format", Schema: []byte(`{"type":"object","patternProperties":{"a":{}}}`)}, false, false)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "response_format", re.Param)
	var se *grammar.SchemaError
	assert.ErrorAs(t, err, &se)

	noEOS, err := NewCompiler(byteTokenizer{size: 129}, 129, []ports.Token{500}, Options{})
	require.NoError(t, err)
	_, err = noEOS.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstrainJSONObject, Param: "response_format"}, false, false)
	require.ErrorAs(t, err, &re)
	assert.Contains(t, re.Message, "no end-of-sequence token")

	opaque, err := NewCompiler(struct{ ports.Tokenizer }{}, 129, []ports.Token{128}, Options{})
	require.NoError(t, err)
	_, err = opaque.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstrainJSONObject, Param: "response_format"}, false, false)
	require.ErrorAs(t, err, &re)
	assert.Contains(t, re.Message, "token bytes")

	_, err = NewCompiler(byteTokenizer{size: 129}, 129, nil, Options{Matchers: -1})
	assert.Error(t, err)

	_, err = c.Matcher(t.Context(), &ports.Constraint{Kind: ports.ConstraintKind(99)}, false, false)
	assert.True(t, errors.Is(err, ports.ErrInvalidRequest))
}

// BuildVocab leaves special tokens, unknown ids and the EOS ids without bytes.
func TestBuildVocabLeavesSpecialAndEOSOut(t *testing.T) {
	v := BuildVocab(byteTokenizer{size: 129}, 131, []ports.Token{'x'})
	m, err := grammar.NewMatcher(grammar.JSONObject(), v, []int32{'x'})
	require.NoError(t, err)
	st := m.Advance(m.Start(), '{')
	mk, err := m.Allowed(t.Context(), st)
	require.NoError(t, err)
	assert.True(t, mk.Has('"'))
	assert.False(t, mk.Has(128), "a special token spells nothing")
	assert.False(t, mk.Has(130), "an id the tokenizer does not know spells nothing")
}
