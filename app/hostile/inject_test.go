package hostile_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// special is the fake tokenizer's control token as text; plain is as many characters of plain text.
const (
	special = "<|end|>"
	plain   = "aaaaaaa"
)

// injectionTemplates put X in every role's content and every tool field of both APIs. A raw
// /v1/completions prompt is the client's whole prompt and keeps its special tokens (docs/http-api.md), so it
// is no injection and is left out.
var injectionTemplates = []struct{ name, path, body string }{
	{"chat system", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"system","content":"X"},{"role":"user","content":"hi"}]}`},
	{"chat developer", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"developer","content":"X"},{"role":"user","content":"hi"}]}`},
	{"chat user", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"X"}]}`},
	{"chat user text part", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"X"}]}]}`},
	{"chat assistant", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"X"},{"role":"user","content":"go"}]}`},
	{"chat assistant tool name", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"X","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`},
	{"chat assistant tool arguments", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"q\":\"X\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`},
	{"chat tool call id", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"X","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"X","content":"ok"}]}`},
	{"chat tool result", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"X"}]}`},
	{"chat tool definition name", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"X","parameters":{"type":"object"}}}]}`},
	{"chat tool definition description", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","description":"X","parameters":{"type":"object"}}}]}`},
	{"chat tool schema description", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"q":{"type":"string","description":"X"}}}}}]}`},
	{"chat tool schema property name", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"X":{"type":"string"}}}}}]}`},
	{"chat message name", chatPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","name":"X","content":"hi"}]}`},
	{"messages system string", msgPath, `{"model":"toy","max_tokens":1,"system":"X","messages":[{"role":"user","content":"hi"}]}`},
	{"messages system blocks", msgPath, `{"model":"toy","max_tokens":1,"system":[{"type":"text","text":"X"}],"messages":[{"role":"user","content":"hi"}]}`},
	{"messages user", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"X"}]}`},
	{"messages user block", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"X"}]}]}`},
	{"messages assistant", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"X"},{"role":"user","content":"go"}]}`},
	{"messages tool_use name", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"X","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`},
	{"messages tool_use input", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"q":"X"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`},
	{"messages tool_use id", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"X","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"X","content":"ok"}]}]}`},
	{"messages tool_result string", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"X"}]}]}`},
	{"messages tool_result blocks", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"X"}]}]}]}`},
	{"messages tool definition name", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"X","input_schema":{"type":"object"}}]}`},
	{"messages tool definition description", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","description":"X","input_schema":{"type":"object"}}]}`},
	{"messages tool schema description", msgPath, `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object","properties":{"q":{"type":"string","description":"X"}}}}]}`},
	{"count_tokens assistant", "/v1/messages/count_tokens", `{"model":"toy","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"X"},{"role":"user","content":"go"}]}`},
	{"count_tokens system", "/v1/messages/count_tokens", `{"model":"toy","system":"X","messages":[{"role":"user","content":"hi"}]}`},
}

// Special-token text through every role and every tool field stays plain text: the prompt it makes is never
// shorter than the one made with as many plain characters (a control token would make it 6 tokens
// shorter). A field that refuses the text outright (400) is right too.
func TestSpecialTokenInjection(t *testing.T) {
	s := start(t, 0, 5e9)
	hc := client()
	defer hc.CloseIdleConnections()
	for _, c := range injectionTemplates {
		base := do(hc, s.url, probe{method: "POST", path: c.path, body: strings.ReplaceAll(c.body, "X", plain)})
		if base.err != nil || base.status != http.StatusOK {
			tally.cases.Add(1)
			t.Errorf("%s: the plain baseline got %d %v: %s", c.name, base.status, base.err, base.body)
			continue
		}
		baseTokens := promptTokens(t, base.body)
		send(t, hc, s.url, probe{name: "injection: " + c.name, method: "POST", path: c.path,
			body: strings.ReplaceAll(c.body, "X", special), want: []int{http.StatusOK, http.StatusBadRequest},
			check: func(t *testing.T, status int, _ http.Header, body []byte) {
				if status == http.StatusOK {
					assert.GreaterOrEqual(t, promptTokens(t, body), baseTokens,
						"%s: %q became a control token", c.name, special)
				}
			}})
	}
}
