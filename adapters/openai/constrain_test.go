package openai

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func TestParseConstraints(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"q"}]`
	const strictTool = `{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}`
	const plainTool = `{"type":"function","function":{"name":"g"}}`
	cases := []struct {
		name string
		body string
		want *ports.Constraint
	}{
		{"text", `{` + msgs + `,"response_format":{"type":"text"}}`, nil},
		{"json_object", `{` + msgs + `,"response_format":{"type":"json_object"}}`,
			&ports.Constraint{Kind: ports.ConstrainJSONObject, Param: "response_format"}},
		{"json_schema", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,"schema":{"type":"object"}}}}`,
			&ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format", Schema: []byte(`{"type":"object"}`)}},
		{"json_schema without schema", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"n"}}}`,
			&ports.Constraint{Kind: ports.ConstrainJSONObject, Param: "response_format"}},
		{"required", `{` + msgs + `,"tools":[` + strictTool + `,` + plainTool + `],"tool_choice":"required"}`,
			&ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Parallel: true, Tools: []ports.ConstraintTool{
				{Name: "f", Strict: true, Parameters: []byte(`{"type":"object","properties":{"a":{"type":"integer"}}}`)}, {Name: "g"}}}},
		{"named", `{` + msgs + `,"tools":[` + strictTool + `,` + plainTool + `],"tool_choice":{"type":"function","function":{"name":"g"}},"parallel_tool_calls":false}`,
			&ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Tools: []ports.ConstraintTool{{Name: "g"}}}},
		{"strict under auto", `{` + msgs + `,"tools":[` + strictTool + `]}`,
			&ports.Constraint{Kind: ports.ConstrainStrictTools, Param: "tools", Parallel: true, Tools: []ports.ConstraintTool{
				{Name: "f", Strict: true, Parameters: []byte(`{"type":"object","properties":{"a":{"type":"integer"}}}`)}}}},
		{"none", `{` + msgs + `,"tools":[` + strictTool + `],"tool_choice":"none"}`, nil},
		{"auto lenient", `{` + msgs + `,"tools":[` + plainTool + `]}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseChat([]byte(c.body))
			require.NoError(t, err)
			assert.Equal(t, c.want, r.Gen.Constraint)
		})
	}
	r, err := ParseCompletion([]byte(`{"prompt":"x","response_format":{"type":"json_object"}}`))
	require.NoError(t, err)
	assert.Equal(t, ports.ConstrainJSONObject, r.Gen.Constraint.Kind, "raw completions take response_format too")
}

func TestParseConstraintRefusals(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"q"}]`
	const tool = `{"type":"function","function":{"name":"f"}}`
	for body, param := range map[string]string{
		`{` + msgs + `,"response_format":{"type":"xml"}}`:                                                         "response_format",
		`{` + msgs + `,"response_format":{"type":"json_schema"}}`:                                                 "response_format",
		`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`:                     "response_format",
		`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":[1]}}}`:         "response_format",
		`{` + msgs + `,"tool_choice":"required"}`:                                                                 "tool_choice",
		`{` + msgs + `,"tools":[` + tool + `],"tool_choice":{"type":"function","function":{"name":"h"}}}`:         "tool_choice",
		`{` + msgs + `,"tools":[` + tool + `],"tool_choice":"required","response_format":{"type":"json_object"}}`: "response_format",
	} {
		_, err := ParseChat([]byte(body))
		var e *Error
		require.ErrorAs(t, err, &e, body)
		assert.Equal(t, 400, e.Status, body)
		assert.Equal(t, param, e.Param, body)
	}
}
