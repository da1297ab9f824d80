package anthropic

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func TestParseMessagesConstraints(t *testing.T) {
	const head = `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}]`
	const tools = `,"tools":[{"name":"f","input_schema":{"type":"object"}},{"name":"g","strict":true,"input_schema":{"type":"object","properties":{"x":{"type":"boolean"}}}}]`
	f := ports.ConstraintTool{Name: "f", Parameters: []byte(`{"type":"object"}`)}
	g := ports.ConstraintTool{Name: "g", Strict: true, Parameters: []byte(`{"type":"object","properties":{"x":{"type":"boolean"}}}`)}
	cases := []struct {
		name string
		body string
		want *ports.Constraint
	}{
		{"auto with a strict tool", head + tools + `}`, &ports.Constraint{Kind: ports.ConstrainStrictTools, Param: "tools", Tools: []ports.ConstraintTool{f, g}}},
		{"any", head + tools + `,"tool_choice":{"type":"any"}}`, &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Parallel: true, Tools: []ports.ConstraintTool{f, g}}},
		{"tool", head + tools + `,"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true}}`,
			&ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Tools: []ports.ConstraintTool{f}}},
		{"none", head + tools + `,"tool_choice":{"type":"none"}}`, nil},
		{"output_config", head + `,"output_config":{"format":{"type":"json_schema","schema":{"type":"string"}}}}`,
			&ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "output_config.format", Schema: []byte(`{"type":"string"}`)}},
		{"output_format", head + `,"output_format":{"type":"json_schema","schema":{"type":"string"}}}`,
			&ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "output_format", Schema: []byte(`{"type":"string"}`)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseMessages([]byte(c.body))
			require.NoError(t, err)
			assert.Equal(t, c.want, r.Gen.Constraint)
		})
	}
}
