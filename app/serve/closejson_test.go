package serve

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// TestConstrainedClosesAtMaxTokens: under a strict schema of unbounded strings (which the demo model fills
// without end), an answer cut by max_tokens is still a closed document the independent validator accepts,
// its finish is "length", and speculation (blocks of 4 and 16) gives the same text as plain decoding at
// every budget.
func TestConstrainedClosesAtMaxTokens(t *testing.T) {
	m := loadDemo(t, 0)
	s := constrainedServe(t, m)
	schemas := map[string]string{
		"strings":    `{"type":"array","items":{"type":"string"}}`,
		"at least 3": `{"type":"array","items":{"type":"string"},"minItems":3}`,
		"object":     `{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"},"minItems":1},"n":{"type":"integer"}},"required":["name","tags","n"],"additionalProperties":false}`,
	}
	for name, doc := range schemas {
		check := validator(t, []byte(doc))
		for _, maxTokens := range []int{20, 40, 160} {
			t.Run(fmt.Sprintf("%s/%d", name, maxTokens), func(t *testing.T) {
				var outs []string
				for _, bs := range []int{1, 4, 16} {
					res, err := s.Generate(t.Context(), ports.GenerateRequest{
						Prompt: "// Usage is the help text.\nconst usage = `", MaxTokens: maxTokens, BlockSize: bs,
						Constraint: &ports.Constraint{Kind: ports.ConstrainJSONSchema, Schema: []byte(doc), Param: "response_format"},
					}, nil)
					require.NoError(t, err)
					if bs > 1 {
						assert.Positive(t, res.Spec.Rounds, "speculation ran")
					}
					assert.Equal(t, "length", res.FinishReason, "block %d: %q", bs, res.Content)
					assert.LessOrEqual(t, res.CompletionTokens, maxTokens)
					assert.True(t, json.Valid([]byte(res.Content)), "block %d: %q", bs, res.Content)
					assert.NoError(t, check(res.Content), "block %d: %q", bs, res.Content)
					outs = append(outs, res.Content)
				}
				assert.Equal(t, outs[0], outs[1], "block 4")
				assert.Equal(t, outs[0], outs[2], "block 16")
			})
		}
	}
}
