package serve

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/ports"
)

// nestedAnyOfSchema is the review's repro: anyOf levels of 64 alternatives chained through $ref, whose
// alternatives multiply (64³ open stacks after three `{"a":`); compiling it must refuse it, not hang.
func nestedAnyOfSchema(depth int) []byte {
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

func TestConstraintNestedAnyOfIsARequestError(t *testing.T) {
	m := loadDemo(t, 0)
	s := constrainedServe(t, m)
	_, err := s.Generate(t.Context(), ports.GenerateRequest{Prompt: "x", MaxTokens: 4,
		Constraint: &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format", Schema: nestedAnyOfSchema(3)}}, nil)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "response_format", re.Param)
	assert.Contains(t, re.Message, "anyOf")
	var se *grammar.SchemaError
	require.ErrorAs(t, err, &se, "the cause stays in the chain")
	assert.Equal(t, "anyOf", se.Keyword)
}
