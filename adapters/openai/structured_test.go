package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// TestStructuredToolCalls: a generator's structured calls (a remote provider's) are answered as tool_calls
// with the provider's ids (a fresh one where it gave none), whole and streamed, ending with finish_reason
// tool_calls; parallel_tool_calls false keeps the first; a "length" finish stays "length".
func TestStructuredToolCalls(t *testing.T) {
	calls := []ports.ToolCall{{ID: "call_remote", Name: "lookup", Arguments: `{"q":"go"}`}, {Name: "lookup", Arguments: "{}"}}
	events := []ports.GenerateEvent{{Content: "Checking."}, {ToolCalls: calls[:1]}, {ToolCalls: calls[1:]}}
	tools := `"tools":[{"type":"function","function":{"name":"lookup"}}]`
	for _, tc := range []struct {
		name, extra, finish string
		resFinish           string
		want                []string
	}{
		{"parallel", "," + tools, "tool_calls", "stop", []string{"call_remote", "call_test"}},
		{"no tools offered", "", "tool_calls", "stop", []string{"call_remote", "call_test"}},
		{"parallel_tool_calls false", "," + tools + `,"parallel_tool_calls":false`, "tool_calls", "stop", []string{"call_remote"}},
		{"cut by length", "," + tools, "length", "length", []string{"call_remote", "call_test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gen := &scripted{events: events, res: ports.GenerateResult{Model: "gpt-x", FinishReason: tc.resFinish, Content: "Checking.", ToolCalls: calls}}
			srv := httptest.NewServer(newTestServer(gen))
			defer srv.Close()
			body := `{"model":"gpt-x","messages":[{"role":"user","content":"q"}]` + tc.extra
			post := func(stream bool) []byte {
				s := body
				if stream {
					s += `,"stream":true`
				}
				resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(s+"}"))
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
				return b
			}
			var whole ChatCompletion
			require.NoError(t, json.Unmarshal(post(false), &whole))
			ch := whole.Choices[0]
			assert.Equal(t, tc.finish, ch.FinishReason)
			assert.Equal(t, "Checking.", *ch.Message.Content)
			var ids []string
			for i, c := range ch.Message.ToolCalls {
				ids = append(ids, c.ID)
				assert.Nil(t, c.Index)
				assert.Equal(t, calls[i].Arguments, c.Function.Arguments)
			}
			assert.Equal(t, tc.want, ids)

			ids, finish := nil, ""
			for _, d := range parseSSE(t, post(true)) {
				if d == "[DONE]" {
					continue
				}
				var c ChatChunk
				require.NoError(t, json.Unmarshal([]byte(d), &c))
				for _, call := range c.Choices[0].Delta.ToolCalls {
					require.NotNil(t, call.Index)
					assert.Equal(t, len(ids), *call.Index)
					ids = append(ids, call.ID)
				}
				if f := c.Choices[0].FinishReason; f != nil {
					finish = *f
				}
			}
			assert.Equal(t, tc.want, ids)
			assert.Equal(t, tc.finish, finish)
		})
	}
}
