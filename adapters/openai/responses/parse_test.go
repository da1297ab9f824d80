package responses

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/ports"
)

// A Responses conversation becomes the chat messages it means: instructions a system message, a
// function_call an assistant turn with tool_calls (merged with the message before it), its output a tool
// message; reasoning items are dropped, built-in tools are not offered.
func TestParseResponsesTranslatesItems(t *testing.T) {
	body := `{"model":"m","instructions":"sys","input":[
		{"type":"message","role":"developer","content":[{"type":"input_text","text":"dev"}]},
		{"role":"user","content":"hi"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"checking"}]},
		{"type":"reasoning","id":"rs_1","summary":[]},
		{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},
		{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"one"},
		{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}],
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search"},{"type":"local_shell"}],
		"tool_choice":"auto","parallel_tool_calls":false,"max_output_tokens":9,"reasoning":{"effort":"low"},
		"store":false,"include":["reasoning.encrypted_content"],"stream":true}`
	req, p, err := Parse([]byte(body))
	require.NoError(t, err)
	assert.True(t, req.Stream)
	assert.True(t, req.IncludeUsage)
	assert.True(t, req.ParseTools)
	assert.False(t, req.ParallelToolCalls)
	assert.Equal(t, 9, req.Gen.MaxTokens)
	assert.Equal(t, "m", req.Gen.Model)
	var got []map[string]any
	roles := []string{}
	for _, m := range req.Gen.Messages {
		var raw map[string]any
		require.NoError(t, json.Unmarshal(m.Raw, &raw))
		got = append(got, raw)
		roles = append(roles, m.Role)
	}
	assert.Equal(t, []string{"system", "system", "user", "assistant", "tool", "tool"}, roles)
	assert.Len(t, got[3]["tool_calls"], 2, "both calls join the assistant's message")
	var tools []map[string]any
	require.NoError(t, json.Unmarshal(req.Gen.Chat.Tools, &tools))
	require.Len(t, tools, 1, "built-in tools are not offered")
	assert.Equal(t, "f", tools[0]["function"].(map[string]any)["name"])
	assert.Len(t, p.Tools, 3, "the response echoes every tool sent")
	assert.Equal(t, "sys", *p.Instructions)
}

func TestParseResponsesRefusals(t *testing.T) {
	for _, c := range []struct{ body, param string }{
		{`{"input":"x","store":true}`, "store"},
		{`{"input":"x","previous_response_id":"resp_1"}`, "previous_response_id"},
		{`{"input":"x","conversation":"conv_1"}`, "conversation"},
		{`{"input":"x","background":true}`, "background"},
		{`{}`, "input"},
		{`{"input":[{"type":"image_generation_call"}]}`, "input[0].type"},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, "input[0].content[0].type"},
		{`{"input":"x","tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"}}`, "tool_choice"},
		{`{"input":"x","text":{"format":{"type":"xml"}}}`, "text.format.type"},
		{`{"input":"x","max_output_tokens":0}`, "max_output_tokens"},
		{`{"input":"x","max_tokens":5}`, "max_tokens"}, // a chat completions name: unknown here, as OpenAI says
	} {
		_, _, err := Parse([]byte(c.body))
		var e *openai.Error
		require.ErrorAs(t, err, &e, c.body)
		assert.Equal(t, 400, e.Status, c.body)
		assert.Equal(t, c.param, e.Param, c.body)
	}
	// store false and absent both work, and so does the body Codex sends.
	codex := `{"model":"m","instructions":"be brief","input":"x","tools":[],"tool_choice":"auto","parallel_tool_calls":false,` +
		`"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,"include":["reasoning.encrypted_content"],` +
		`"prompt_cache_key":"k","text":{"verbosity":"medium"},"service_tier":"auto","client_metadata":{"a":"b"}}`
	for _, body := range []string{`{"input":"x","store":false}`, `{"input":"x"}`, codex} {
		_, _, err := Parse([]byte(body))
		assert.NoError(t, err, body)
	}
}

func TestParseResponsesFormatAndLogprobs(t *testing.T) {
	req, _, err := Parse([]byte(`{"input":"x","text":{"format":{"type":"json_schema","name":"w","strict":true,
		"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}}},
		"include":["message.output_text.logprobs"],"top_logprobs":3}`))
	require.NoError(t, err)
	require.NotNil(t, req.Gen.Constraint)
	assert.Equal(t, ports.ConstrainJSONSchema, req.Gen.Constraint.Kind)
	assert.True(t, req.Gen.Logprobs)
	assert.Equal(t, 3, req.Gen.TopLogprobs)
}

func FuzzParseResponses(f *testing.F) {
	for _, s := range []string{
		`{"input":"hi"}`, `{"input":[]}`, `{"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}]}`,
		`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"input":"x","tools":[{"type":"function","name":"f","parameters":{}},{"type":"web_search"}],"tool_choice":{"type":"function","name":"f"}}`,
		`{"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"},"strict":true}}}`,
		`{"input":"x","store":true}`, `{"input":"x","top_logprobs":2,"include":["message.output_text.logprobs"]}`, `[]`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _, err := Parse(body)
		if err != nil {
			var e *openai.Error
			if !errors.As(err, &e) || e.Status < 400 || e.Status > 499 || e.Message == "" {
				t.Fatalf("refusal is not a 4xx API error: %#v", err)
			}
			return
		}
		if len(r.Gen.Messages) == 0 {
			t.Fatalf("accepted a request without messages: %q", body)
		}
		for _, m := range r.Gen.Messages {
			if !json.Valid(m.Raw) {
				t.Fatalf("message Raw is not JSON: %q", m.Raw)
			}
		}
	})
}
