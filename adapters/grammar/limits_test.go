package grammar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nestedAnyOf is the schema of the review's repro: $defs L0…L(depth−1), each an anyOf of 64 objects whose
// "a" refers to the next level, so the alternatives of the levels multiply (64^depth stacks after
// `{"a":` × depth).
func nestedAnyOf(depth int) []byte {
	defs := map[string]any{}
	for d := range depth {
		var alts []any
		for i := range 64 {
			a := map[string]any{"type": "string"}
			if d+1 < depth {
				a = map[string]any{"$ref": fmt.Sprintf("#/$defs/L%d", d+1)}
			}
			alts = append(alts, map[string]any{
				"properties": map[string]any{"a": a, fmt.Sprintf("b%d", i): map[string]any{"type": "string"}},
				"required":   []any{"a"},
			})
		}
		defs[fmt.Sprintf("L%d", d)] = map[string]any{"anyOf": alts}
	}
	doc, _ := json.Marshal(map[string]any{"$defs": defs, "$ref": "#/$defs/L0"})
	return doc
}

func TestSchemaNestedAlternativesRefused(t *testing.T) {
	_, err := CompileSchema(context.Background(), nestedAnyOf(1))
	require.NoError(t, err, "one level of 64 alternatives is within the limit")
	for _, depth := range []int{2, 3, 4} {
		_, err := CompileSchema(context.Background(), nestedAnyOf(depth))
		var se *SchemaError
		require.ErrorAs(t, err, &se, "depth %d", depth)
		assert.Equal(t, "anyOf", se.Keyword)
		assert.True(t, strings.HasPrefix(se.Path, "/$defs/L"), se.Path)
	}
	// The same through tools: each tool's schema passes, their union does not.
	tool := Tool{Name: "f", Parameters: nestedAnyOf(1)}
	var many []Tool
	for i := range 20 {
		tool.Name = fmt.Sprintf("f%d", i)
		many = append(many, tool)
	}
	_, err = ToolCalls(context.Background(), many, Hermes, false)
	var se *SchemaError
	require.ErrorAs(t, err, &se)
}

// A recursive schema whose alternatives multiply only at run time: the state past the limit is dead with a
// *StackLimitError, and so is the mask of a state whose tokens would cross it.
func TestGrammarStackLimitAtRunTime(t *testing.T) {
	var alts []string
	for i := range 64 {
		alts = append(alts, fmt.Sprintf(`{"type":"object","properties":{"a":{"$ref":"#"},"b%d":{"type":"string"}}}`, i))
	}
	g := mustSchema(t, `{"anyOf":[`+strings.Join(alts, ",")+`]}`)
	one := g.Start().Advance([]byte(`{"a":`))
	require.False(t, one.Dead())
	require.NoError(t, one.Err())
	two := one.Advance([]byte(`{"a":`))
	assert.True(t, two.Dead())
	var sl *StackLimitError
	require.ErrorAs(t, two.Err(), &sl)
	assert.ErrorIs(t, two.Err(), ErrTooManyStacks)
	assert.Equal(t, two, two.Advance([]byte(`{`)), "a state dead for a reason stays so")

	v := NewVocab([][]byte{[]byte(`{"a":`), []byte(`{`), []byte(`}`)})
	m, err := NewMatcher(g, v, nil)
	require.NoError(t, err)
	_, err = m.Allowed(context.Background(), one)
	assert.ErrorIs(t, err, ErrTooManyStacks, "the token {\"a\": would open 64×64 stacks")
	_, err = m.Allowed(context.Background(), two)
	assert.ErrorIs(t, err, ErrTooManyStacks)
}

func TestGrammarAllowedStopsWithContext(t *testing.T) {
	toks := make([][]byte, 4096)
	for i := range toks {
		toks[i] = []byte(fmt.Sprintf(`"k%04d`, i))
	}
	m, err := NewMatcher(JSONObject(), NewVocab(toks), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st := m.Start().Advance([]byte(`{`))
	_, err = m.Allowed(ctx, st)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	_, err = m.Allowed(context.Background(), st)
	assert.NoError(t, err, "a cancelled walk caches nothing")
}

func TestSchemaUnsatisfiableRecursionRefused(t *testing.T) {
	for _, doc := range []string{
		`{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`,
		`{"type":"array","items":{"$ref":"#"},"minItems":1}`,
		`{"$defs":{"A":{"type":"object","properties":{"b":{"$ref":"#/$defs/B"}},"required":["b"]},"B":{"type":"array","items":{"$ref":"#/$defs/A"},"minItems":2}},"$ref":"#/$defs/A"}`,
		// Reachable through an optional property: the model could open it and never close it.
		`{"type":"object","properties":{"x":{"$ref":"#/$defs/L"}},"$defs":{"L":{"type":"object","properties":{"n":{"$ref":"#/$defs/L"}},"required":["n"]}}}`,
	} {
		_, err := CompileSchema(context.Background(), []byte(doc))
		var se *SchemaError
		require.ErrorAs(t, err, &se, doc)
		assert.Contains(t, se.Msg, "no finite JSON value", doc)
	}
	// Recursion with a way out is fine.
	for _, doc := range []string{
		`{"type":"object","properties":{"a":{"$ref":"#"}}}`,
		`{"type":"array","items":{"$ref":"#"}}`,
		`{"anyOf":[{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]},{"type":"null"}]}`,
	} {
		_, err := CompileSchema(context.Background(), []byte(doc))
		assert.NoError(t, err, doc)
	}
}

// BenchmarkCompileNestedAnyOf is the cost of refusing the review's repro (three levels of 64).
func BenchmarkCompileNestedAnyOf(b *testing.B) {
	doc := nestedAnyOf(3)
	for b.Loop() {
		if _, err := CompileSchema(context.Background(), doc); err == nil {
			b.Fatal("accepted")
		}
	}
}
