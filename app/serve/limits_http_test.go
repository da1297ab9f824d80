package serve

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// optionalPropertiesSchema is the CPU amplification: an object of n optional properties (n = 20,000
// is a 605 KB body that cost 148 s of CPU).
func optionalPropertiesSchema(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf(`"p%d":{"type":"string"}`, i)
	}
	return `{"type":"object","properties":{` + strings.Join(ps, ",") + `}}`
}

// The schemas, and tool schemas that are not JSON Schemas, are 400s naming the field and the limit on
// both APIs; the size limits are checked before anything is compiled (adapters/grammar's tests show it, and
// BenchmarkRefuseOversizedSchema times it).
func TestHTTPConstraintLimitsAndToolSchemas(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	badSchema := `{"type":"object","properties":{"a":{"type":"foo"}}}`
	oai := []struct{ name, body, param, msg string }{
		{"20,000 properties", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":` + optionalPropertiesSchema(20000) + `}}}`,
			"response_format", "schema bytes: 528922, over the limit of 262144"},
		{"5,000 properties", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":` + optionalPropertiesSchema(5000) + `}}}`,
			"response_format", "members of one schema object (properties, $defs…) at #/properties: 5000, over the limit of 256"},
		{"2,000 properties in a strict tool", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":` + optionalPropertiesSchema(2000) + `}}]}`,
			"tools", "over the limit of 256"},
		{"lenient tool with an invalid schema, forced", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":` + badSchema + `}}],"tool_choice":"required"}`,
			"tools", `tool "f": parameters: at #: invalid JSON Schema`},
		{"lenient tool with an invalid schema, auto", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":` + badSchema + `}}]}`,
			"tools", `tool "f": parameters: at #: invalid JSON Schema`},
	}
	for _, c := range oai {
		t.Run("openai "+c.name, func(t *testing.T) {
			code, _, body := h.do("POST", "/v1/chat/completions", c.body, nil)
			require.Equal(t, 400, code, string(body))
			var e struct {
				Error struct{ Message, Param string }
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			assert.Equal(t, c.param, e.Error.Param)
			assert.Contains(t, e.Error.Message, c.msg)
		})
	}
	anth := []struct{ name, body, msg string }{
		{"5,000 properties", `{"model":"toy","max_tokens":4,` + msgs + `,"output_config":{"format":{"type":"json_schema","schema":` + optionalPropertiesSchema(5000) + `}}}`,
			"over the limit of 256"},
		{"lenient tool with an invalid schema, forced", `{"model":"toy","max_tokens":4,` + msgs + `,"tools":[{"name":"f","input_schema":` + badSchema + `}],"tool_choice":{"type":"any"}}`,
			`tools: tool "f": parameters: at #: invalid JSON Schema`},
		{"lenient tool with an invalid schema, auto", `{"model":"toy","max_tokens":4,` + msgs + `,"tools":[{"name":"f","input_schema":` + badSchema + `}]}`,
			`tools: tool "f": parameters: at #: invalid JSON Schema`},
	}
	for _, c := range anth {
		t.Run("anthropic "+c.name, func(t *testing.T) {
			code, _, body := h.do("POST", "/v1/messages", c.body, nil)
			require.Equal(t, 400, code, string(body))
			var e struct {
				Error struct{ Type, Message string }
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			assert.Equal(t, "invalid_request_error", e.Error.Type)
			assert.Contains(t, e.Error.Message, c.msg)
		})
	}
	// A valid schema outside the subset, on a tool the model may call or not, is served as before.
	code, _, body := h.do("POST", "/v1/chat/completions", `{`+msgs+`,"max_tokens":2,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}}}]}`, nil)
	assert.Equal(t, 200, code, string(body))
}
