package openai

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func ptr[T any](v T) *T { return &v }

func TestParseChatTranslates(t *testing.T) {
	cases := []struct {
		name string
		body string
		want Request
	}{
		{"defaults", `{"messages":[{"role":"user","content":"hi"}]}`, Request{ParallelToolCalls: true, Gen: ports.GenerateRequest{
			Messages: []ports.ChatMessage{{Role: "user", Content: "hi", Raw: []byte(`{"role":"user","content":"hi"}`)}},
			Sampling: ports.SamplingParams{Temperature: 1, TopP: 1}}}},
		{"everything", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],
			"max_completion_tokens":7,"temperature":0,"top_p":0.9,"top_k":20,"min_p":0.05,"seed":-1,"stop":["x","yz"],
			"n":1,"stream":true,"stream_options":{"include_usage":true},"block_size":3,
			"chat_template_kwargs":{"enable_thinking":false}}`,
			Request{Stream: true, IncludeUsage: true, ParallelToolCalls: true, Gen: ports.GenerateRequest{Model: "m",
				Messages: []ports.ChatMessage{{Role: "system", Content: "s", Raw: []byte(`{"role":"system","content":"s"}`)},
					{Role: "user", Content: "u", Raw: []byte(`{"role":"user","content":"u"}`)}},
				Chat: ports.ChatOptions{EnableThinking: ptr(false)}, MaxTokens: 7,
				Sampling:    ports.SamplingParams{Temperature: 0, TopP: 0.9, TopK: 20, MinP: 0.05},
				SamplingSet: ports.SamplingKnobs{Temperature: true, TopP: true, TopK: true, MinP: true},
				Seed:        ptr(uint64(1<<64 - 1)), Stop: []string{"x", "yz"}, BlockSize: 3}}},
		{"stop string, top_k -1, developer and parts", `{"messages":[{"role":"developer","content":"d","name":"n"},
			{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"stop":"END","top_k":-1,"max_tokens":2}`,
			Request{ParallelToolCalls: true, Gen: ports.GenerateRequest{
				Messages: []ports.ChatMessage{{Role: "system", Content: "d", Raw: []byte(`{"role":"system","content":"d","name":"n"}`)},
					{Role: "user", Content: "ab", Raw: []byte(`{"role":"user","content":"ab"}`)}},
				MaxTokens: 2, Sampling: ports.SamplingParams{Temperature: 1, TopP: 1}, SamplingSet: ports.SamplingKnobs{TopK: true}, Stop: []string{"END"}}}},
		{"assistant with null content", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[]},{"role":"user","content":"r"}]}`,
			Request{ParallelToolCalls: true, Gen: ports.GenerateRequest{
				Messages: []ports.ChatMessage{{Role: "user", Content: "q", Raw: []byte(`{"role":"user","content":"q"}`)},
					{Role: "assistant", Raw: []byte(`{"role":"assistant","content":null,"tool_calls":[]}`)},
					{Role: "user", Content: "r", Raw: []byte(`{"role":"user","content":"r"}`)}},
				Sampling: ports.SamplingParams{Temperature: 1, TopP: 1}}}},
		// The tools array reaches the template as the client wrote it; the history's tool_calls reach it with
		// their arguments as objects (as vLLM passes them), tool replies unchanged.
		{"tools, auto by default, tool round trip", `{"messages":[{"role":"user","content":"q"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"42"}],` +
			`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}},"description":"d"}}]}`,
			Request{ParseTools: true, ParallelToolCalls: true, Gen: ports.GenerateRequest{
				Messages: []ports.ChatMessage{{Role: "user", Content: "q", Raw: []byte(`{"role":"user","content":"q"}`)},
					{Role: "assistant", Raw: []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":{"a":1}}}]}`)},
					{Role: "tool", Content: "42", Raw: []byte(`{"role":"tool","tool_call_id":"call_1","content":"42"}`)}},
				Chat:     ports.ChatOptions{Tools: []byte(`[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}},"description":"d"}}]`)},
				Sampling: ports.SamplingParams{Temperature: 1, TopP: 1}}}},
		{"tool_choice auto, parallel_tool_calls false", `{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f"}}],` +
			`"tool_choice":"auto","parallel_tool_calls":false}`,
			Request{ParseTools: true, Gen: ports.GenerateRequest{
				Messages: []ports.ChatMessage{{Role: "user", Content: "q", Raw: []byte(`{"role":"user","content":"q"}`)}},
				Chat:     ports.ChatOptions{Tools: []byte(`[{"type":"function","function":{"name":"f"}}]`)},
				Sampling: ports.SamplingParams{Temperature: 1, TopP: 1}}}},
		// As in vLLM, "none" neither offers the tools nor parses the answer.
		{"tool_choice none", `{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}`,
			Request{ParallelToolCalls: true, Gen: ports.GenerateRequest{
				Messages: []ports.ChatMessage{{Role: "user", Content: "q", Raw: []byte(`{"role":"user","content":"q"}`)}},
				Sampling: ports.SamplingParams{Temperature: 1, TopP: 1}}}},
		{"empty tools", `{"messages":[{"role":"user","content":"q"}],"tools":[],"tool_choice":"auto"}`,
			Request{ParallelToolCalls: true, Gen: ports.GenerateRequest{
				Messages: []ports.ChatMessage{{Role: "user", Content: "q", Raw: []byte(`{"role":"user","content":"q"}`)}},
				Sampling: ports.SamplingParams{Temperature: 1, TopP: 1}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseChat([]byte(c.body))
			require.NoError(t, err)
			for i := range got.Gen.Messages {
				// Compare Raw as JSON text without the request's whitespace.
				var v any
				require.NoError(t, json.Unmarshal(got.Gen.Messages[i].Raw, &v))
				got.Gen.Messages[i].Raw = compact(t, got.Gen.Messages[i].Raw)
			}
			assert.Equal(t, c.want, got)
		})
	}
}

func compact(t *testing.T, b []byte) []byte {
	t.Helper()
	var out []byte
	in := false
	esc := false
	for _, c := range b {
		switch {
		case esc:
			esc = false
		case c == '\\' && in:
			esc = true
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\n' || c == '\t' || c == '\r'):
			continue
		}
		out = append(out, c)
	}
	return out
}

func TestParseCompletionTranslates(t *testing.T) {
	got, err := ParseCompletion([]byte(`{"model":"m","prompt":["once"],"max_tokens":4,"temperature":0.5,"logprobs":null,"echo":false,"suffix":null,"best_of":1}`))
	require.NoError(t, err)
	assert.Equal(t, Request{Gen: ports.GenerateRequest{Model: "m", Prompt: "once", MaxTokens: 4,
		Sampling: ports.SamplingParams{Temperature: 0.5, TopP: 1}, SamplingSet: ports.SamplingKnobs{Temperature: true}}}, got)
}

func TestSetKeyKeepsOrder(t *testing.T) {
	got, err := setKey([]byte(`{"z":1,"content":[{"type":"text"}],"a":{"b":2}}`), "content", "hi\n")
	require.NoError(t, err)
	assert.Equal(t, `{"z":1,"content":"hi\n","a":{"b":2}}`, string(got))
	got, err = setKey([]byte(`{}`), "role", "system")
	require.NoError(t, err)
	assert.Equal(t, `{"role":"system"}`, string(got))
	_, err = setKey([]byte(`[1]`), "x", "y")
	assert.Error(t, err)
}

func TestErrorFor(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{badRequest("x", "bad"), 400, ""},
		{errors.Join(errors.New("ctx"), ports.ErrInvalidRequest), 400, ""},
		{ports.ErrUnknownModel, 404, "model_not_found"},
		{ports.ErrBusy, 429, "server_busy"},
		{ports.ErrNotReady, 503, "model_loading"},
		{errors.New("boom"), 500, "internal_error"},
	}
	for _, c := range cases {
		e := ErrorFor(c.err)
		assert.Equal(t, c.status, e.Status, "%v", c.err)
		assert.Equal(t, c.code, e.Code, "%v", c.err)
	}
	assert.Equal(t, 1, ErrorFor(ports.ErrBusy).RetryAfter)
	assert.Equal(t, "internal server error", ErrorFor(errors.New("secret detail")).Message, "internal errors must not leak")
}

// FuzzParseRequests checks that no body makes the decoders panic and that every refusal is a 4xx API error.
func FuzzParseRequests(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":["a"],"n":1}`,
		`{"prompt":["x"],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":[[1,2]]}`, `{"messages":[{"role":"developer","content":"x"}]}`, `[]`, `{`, `null`, `""`,
		`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":true}}`,
		`{"response_format":{"type":"json_object"}}`, `{"max_tokens":-1}`, `{"temperature":1e999}`,
		`{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"auto","parallel_tool_calls":false}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"x","tool_call_id":"c"}]}`,
		`{"messages":[{"role":"user","content":"q"}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,"schema":{"type":"object"}}}}`,
		`{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{}}}],"tool_choice":"required","parallel_tool_calls":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte) (Request, error){ParseChat, ParseCompletion} {
			r, err := parse(body)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Status < 400 || e.Status > 499 || e.Message == "" {
					t.Fatalf("refusal is not a 4xx API error: %#v", err)
				}
				continue
			}
			if r.Gen.MaxTokens < 0 || len(r.Gen.Stop) > maxStop || r.Gen.BlockSize < 0 {
				t.Fatalf("accepted out-of-range request: %+v", r)
			}
			if err := r.Gen.Sampling.Validate(); err != nil {
				t.Fatalf("accepted invalid sampling: %v", err)
			}
			for _, m := range r.Gen.Messages {
				if !json.Valid(m.Raw) {
					t.Fatalf("message Raw is not JSON: %q", m.Raw)
				}
			}
			if r.ParseTools != (r.Gen.Chat.Tools != nil) || (r.Gen.Chat.Tools != nil && !json.Valid(r.Gen.Chat.Tools)) {
				t.Fatalf("tools rendered %q but parsed %v", r.Gen.Chat.Tools, r.ParseTools)
			}
		}
	})
}
