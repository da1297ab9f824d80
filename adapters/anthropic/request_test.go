package anthropic

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func msg(role, raw string) ports.ChatMessage {
	var m struct {
		Content *string `json:"content"`
	}
	_ = json.Unmarshal([]byte(raw), &m)
	c := ""
	if m.Content != nil {
		c = *m.Content
	}
	return ports.ChatMessage{Role: role, Content: c, Raw: []byte(raw)}
}

func TestParseMessages(t *testing.T) {
	on, off := true, false
	seed := uint64(9)
	base := ports.SamplingParams{Temperature: 1, TopP: 1}
	cases := []struct {
		name string
		body string
		want Request
	}{
		{"minimal", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
			Request{Parallel: true, Gen: ports.GenerateRequest{Model: "m", MaxTokens: 5, Sampling: base,
				Messages: []ports.ChatMessage{msg("user", `{"role":"user","content":"hi"}`)}}}},
		{"system blocks, sampling, stop, stream, extensions, metadata", `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}],` +
			`"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}],"temperature":0,"top_p":0.5,"top_k":3,` +
			`"stop_sequences":["END"],"stream":true,"metadata":{"user_id":"u"},"block_size":1,"seed":9,"service_tier":"auto"}`,
			Request{Stream: true, Parallel: true, Gen: ports.GenerateRequest{Model: "m", MaxTokens: 5,
				Sampling:    ports.SamplingParams{Temperature: 0, TopP: 0.5, TopK: 3},
				SamplingSet: ports.SamplingKnobs{Temperature: true, TopP: true, TopK: true}, Stop: []string{"END"}, BlockSize: 1, Seed: &seed,
				Messages:         []ports.ChatMessage{msg("system", `{"role":"system","content":"a\nb"}`), msg("user", `{"role":"user","content":"x\ny"}`)},
				CacheBreakpoints: []int{0}}}},
		// A tool round trip reaches the template as the OpenAI-shaped history the OpenAI adapter builds:
		// tool_use as tool_calls with an object of arguments, tool_result as a tool message, text after it.
		{"tool round trip", `{"model":"m","max_tokens":5,"tools":[{"name":"f","description":"d","input_schema":{"type":"object","properties":{"a":{"type":"integer"}}}}],` +
			`"messages":[{"role":"user","content":"q"},` +
			`{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"let me"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"42"}]},{"type":"text","text":"so?"}]}]}`,
			Request{ParseTools: true, Parallel: true, Gen: ports.GenerateRequest{Model: "m", MaxTokens: 5, Sampling: base,
				Chat: ports.ChatOptions{Tools: []byte(`[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}]`)},
				Messages: []ports.ChatMessage{msg("user", `{"role":"user","content":"q"}`),
					msg("assistant", `{"role":"assistant","content":"let me","reasoning_content":"hm","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":{"a":1}}}]}`),
					msg("tool", `{"role":"tool","content":"42","tool_call_id":"t1"}`),
					msg("user", `{"role":"user","content":"so?"}`)}}}},
		{"tool error result, no text after it", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"boom","is_error":true}]}]}`,
			Request{Parallel: true, Gen: ports.GenerateRequest{Model: "m", MaxTokens: 5, Sampling: base,
				Messages: []ports.ChatMessage{msg("user", `{"role":"user","content":"q"}`),
					msg("assistant", `{"role":"assistant","content":"","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":{}}}]}`),
					msg("tool", `{"role":"tool","content":"Error: boom","tool_call_id":"t1"}`)}}}},
		{"tool_choice none hides the tools; thinking disabled", `{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"none"},` +
			`"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"q"}]}`,
			Request{Parallel: true, Gen: ports.GenerateRequest{Model: "m", MaxTokens: 5, Sampling: base, Chat: ports.ChatOptions{EnableThinking: &off},
				Messages: []ports.ChatMessage{msg("user", `{"role":"user","content":"q"}`)}}}},
		{"auto without parallel calls; thinking enabled", `{"model":"m","max_tokens":2000,"tools":[{"name":"f","input_schema":{"type":"object"},"type":"custom"}],` +
			`"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"q"}]}`,
			Request{ParseTools: true, Gen: ports.GenerateRequest{Model: "m", MaxTokens: 2000, Sampling: base,
				Chat:     ports.ChatOptions{EnableThinking: &on, Tools: []byte(`[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`)},
				Messages: []ports.ChatMessage{msg("user", `{"role":"user","content":"q"}`)}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseMessages([]byte(c.body))
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestParseMessagesRefusals(t *testing.T) {
	m := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct{ name, body, msg string }{
		{"empty", ``, "empty"},
		{"not JSON", `{"model":`, "JSON"},
		{"not an object", `[1]`, "must be a JSON object"},
		{"model missing", `{"max_tokens":1,` + m + `}`, "model: field required"},
		{"max_tokens missing", `{"model":"m",` + m + `}`, "max_tokens: field required"},
		{"max_tokens zero", `{"model":"m","max_tokens":0,` + m + `}`, "max_tokens: must be at least 1"},
		{"max_tokens string", `{"model":"m","max_tokens":"5",` + m + `}`, "max_tokens: must be an integer"},
		{"unknown field", `{"model":"m","max_tokens":1,` + m + `,"mcp":[]}`, "mcp: Extra inputs are not permitted"},
		{"header param in the body", `{"model":"m","max_tokens":1,` + m + `,"betas":["x"]}`, "betas: Extra inputs are not permitted"},
		{"thread", `{"model":"m","max_tokens":1,` + m + `,"thread":{"type":"create"}}`, "thread: not supported by this server"},
		{"thread continue", `{"model":"m","max_tokens":1,` + m + `,"thread":{"type":"continue","previous_message_id":"msg_1"}}`, "thread: not supported"},
		{"container", `{"model":"m","max_tokens":1,` + m + `,"container":"c"}`, "container: not supported"},
		{"mcp_servers", `{"model":"m","max_tokens":1,` + m + `,"mcp_servers":[{"type":"url","url":"https://x","name":"x"}]}`, "mcp_servers: not supported"},
		{"context_management", `{"model":"m","max_tokens":1,` + m + `,"context_management":{"edits":[]}}`, "context_management: not supported"},
		{"compaction", `{"model":"m","max_tokens":1,` + m + `,"compaction":{}}`, "compaction: not supported"},
		{"speed", `{"model":"m","max_tokens":1,` + m + `,"speed":"warp"}`, "speed"},
		{"output_config task_budget", `{"model":"m","max_tokens":1,` + m + `,"output_config":{"task_budget":{"type":"tokens","total":5}}}`, "output_config.task_budget: not supported"},
		{"temperature above 1", `{"model":"m","max_tokens":1,` + m + `,"temperature":1.5}`, "temperature: must be between 0 and 1"},
		{"top_p zero", `{"model":"m","max_tokens":1,` + m + `,"top_p":0}`, "top_p"},
		{"top_k negative", `{"model":"m","max_tokens":1,` + m + `,"top_k":-1}`, "top_k"},
		{"empty stop sequence", `{"model":"m","max_tokens":1,` + m + `,"stop_sequences":["a",""]}`, "stop_sequences.1: must not be empty"},
		{"stop sequences not strings", `{"model":"m","max_tokens":1,` + m + `,"stop_sequences":[1]}`, "stop_sequences"},
		{"too many stop sequences", `{"model":"m","max_tokens":1,` + m + `,"stop_sequences":[` + strings.Repeat(`"a",`, 64) + `"b"]}`, "at most 64"},
		{"block_size zero", `{"model":"m","max_tokens":1,` + m + `,"block_size":0}`, "block_size"},
		{"service tier", `{"model":"m","max_tokens":1,` + m + `,"service_tier":"priority"}`, "service_tier"},
		{"messages missing", `{"model":"m","max_tokens":1}`, "messages: field required"},
		{"messages empty", `{"model":"m","max_tokens":1,"messages":[]}`, "at least one message"},
		{"system role in messages", `{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "top-level system"},
		{"role missing", `{"model":"m","max_tokens":1,"messages":[{"content":"x"}]}`, "messages.0.role: field required"},
		{"content missing", `{"model":"m","max_tokens":1,"messages":[{"role":"user"}]}`, "messages.0.content: field required"},
		{"block type missing", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages.0.content.0.type: field required"},
		{"image", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "text only"},
		{"system not text", `{"model":"m","max_tokens":1,"system":[{"type":"image"}],` + m + `}`, "system.0.type"},
		{"system number", `{"model":"m","max_tokens":1,"system":5,` + m + `}`, "system: must be a string or an array of text blocks"},
		{"prefill", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}`, "prefilling"},
		{"tool_result answers nothing", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9","content":"x"}]}]}`, `"t9" matches no tool_use`},
		{"tool_use unanswered", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":"r"}]}`, "without tool_result blocks immediately after: t1"},
		{"tool_result after text", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"text","text":"r"},{"type":"tool_result","tool_use_id":"t1"}]}]}`, "must come before any text"},
		{"tool_use input not object", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":[1]}]},{"role":"user","content":"r"}]}`, "input: must be an object"},
		{"tool_use duplicate id", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":"r"}]}`, "used by another"},
		{"tool_use bad name", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a b","input":{}}]},{"role":"user","content":"r"}]}`, "name"},
		{"assistant tool_result", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t1"}]},{"role":"user","content":"r"}]}`, "not a block type of an assistant message"},
		{"tools not array", `{"model":"m","max_tokens":1,` + m + `,"tools":{}}`, "tools: must be an array"},
		{"tool without schema", `{"model":"m","max_tokens":1,` + m + `,"tools":[{"name":"f"}]}`, "tools.0.input_schema: field required"},
		{"tool schema not object", `{"model":"m","max_tokens":1,` + m + `,"tools":[{"name":"f","input_schema":[1]}]}`, "JSON Schema object"},
		{"server tool", `{"model":"m","max_tokens":1,` + m + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, "server tools"},
		{"duplicate tool", `{"model":"m","max_tokens":1,` + m + `,"tools":[{"name":"f","input_schema":{}},{"name":"f","input_schema":{}}]}`, "unique"},
		{"tool_choice any", `{"model":"m","max_tokens":1,` + m + `,"tool_choice":{"type":"any"}}`, "needs tools"},
		{"tool_choice tool unknown", `{"model":"m","max_tokens":1,` + m + `,"tools":[{"name":"g","input_schema":{}}],"tool_choice":{"type":"tool","name":"f"}}`, `tool_choice.name: "f" is not the name of any of the tools`},
		{"output_config effort", `{"model":"m","max_tokens":1,` + m + `,"output_config":{"effort":"low"}}`, "output_config.effort: not supported"},
		{"output_config unknown", `{"model":"m","max_tokens":1,` + m + `,"output_config":{"mode":"x"}}`, "output_config.mode: Extra inputs"},
		{"output format type", `{"model":"m","max_tokens":1,` + m + `,"output_config":{"format":{"type":"text"}}}`, `output_config.format.type: must be "json_schema"`},
		{"output format without schema", `{"model":"m","max_tokens":1,` + m + `,"output_format":{"type":"json_schema"}}`, "output_format.schema: field required"},
		{"output format and forced tool", `{"model":"m","max_tokens":1,` + m + `,"tools":[{"name":"g","input_schema":{}}],"tool_choice":{"type":"any"},"output_format":{"type":"json_schema","schema":{}}}`, "one of them"},
		{"tool_choice tool without name", `{"model":"m","max_tokens":1,` + m + `,"tool_choice":{"type":"tool"}}`, "tool_choice.name: field required"},
		{"tool_choice string", `{"model":"m","max_tokens":1,` + m + `,"tool_choice":"auto"}`, "tool_choice: must be an object"},
		{"tool_choice unknown", `{"model":"m","max_tokens":1,` + m + `,"tool_choice":{"type":"some"}}`, `"some"`},
		{"thinking without budget", `{"model":"m","max_tokens":2000,` + m + `,"thinking":{"type":"enabled"}}`, "budget_tokens: field required"},
		{"thinking budget small", `{"model":"m","max_tokens":2000,` + m + `,"thinking":{"type":"enabled","budget_tokens":100}}`, "at least 1024"},
		{"thinking budget over max_tokens", `{"model":"m","max_tokens":1024,` + m + `,"thinking":{"type":"enabled","budget_tokens":1024}}`, "less than max_tokens"},
		{"thinking type", `{"model":"m","max_tokens":1,` + m + `,"thinking":{"type":"sometimes"}}`, "thinking.type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMessages([]byte(c.body))
			var e *Error
			require.True(t, errors.As(err, &e), "want an API error, got %v", err)
			assert.Equal(t, 400, e.Status)
			assert.Equal(t, "invalid_request_error", e.Type)
			assert.Contains(t, e.Message, c.msg)
		})
	}
}

// TestParseMessagesAcceptedFields: the fields Anthropic's API takes that cannot change the answer here are
// accepted and ignored, and the refused ones are accepted at their neutral values.
func TestParseMessagesAcceptedFields(t *testing.T) {
	const base = `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]`
	want, err := ParseMessages([]byte(base + `}`))
	require.NoError(t, err)
	for _, extra := range []string{
		`"metadata":{"user_id":"u"}`, `"service_tier":"standard_only"`, `"speed":"fast"`, `"speed":null`,
		`"inference_geo":"us"`, `"diagnostics":{"previous_message_id":"msg_1"}`,
		`"billing_policy":{"type":"billing_policy","bill_to":"self"}`, `"fallback_credit_token":"t"`,
		`"fallbacks":"default"`, `"thread":null`, `"container":null`, `"mcp_servers":[]`, `"context_management":null`,
		`"compaction":null`, `"output_config":{"effort":"high","task_budget":null}`,
	} {
		got, err := ParseMessages([]byte(base + `,` + extra + `}`))
		if assert.NoError(t, err, extra) {
			assert.Equal(t, want, got, extra)
		}
	}
}

// TestThreadRefusal: a thread is refused with the details Anthropic's SDKs read as "this server cannot
// thread the request", so that their tool runner goes on without one.
func TestThreadRefusal(t *testing.T) {
	_, err := ParseMessages([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"thread":{"type":"create"}}`))
	e := ErrorFor(err)
	require.Equal(t, 400, e.Status)
	b, merr := json.Marshal(e.body("req_1"))
	require.NoError(t, merr)
	assert.JSONEq(t, `{"type":"error","request_id":"req_1","error":{"type":"invalid_request_error","message":`+
		`"thread: not supported by this server: it holds no conversation state between requests; send the full history in messages without a thread",`+
		`"details":{"error_code":"thread_unsupported_request","unsupported":["thread"]}}}`, string(b))
}

func TestParseCountTokens(t *testing.T) {
	r, err := ParseCountTokens([]byte(`{"model":"m","system":"s","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	assert.Equal(t, []ports.ChatMessage{msg("system", `{"role":"system","content":"s"}`), msg("user", `{"role":"user","content":"hi"}`)}, r.Gen.Messages)
	_, err = ParseCountTokens([]byte(`{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	assert.ErrorContains(t, err, "max_tokens: Extra inputs are not permitted")
	// count_tokens takes compaction and ignores it, as Anthropic documents.
	_, err = ParseCountTokens([]byte(`{"model":"m","compaction":{},"speed":"fast","cache_control":{"type":"ephemeral"},"messages":[{"role":"user","content":"hi"}]}`))
	assert.NoError(t, err)
	_, err = ParseCountTokens([]byte(`{"model":"m","thread":{"type":"create"},"messages":[{"role":"user","content":"hi"}]}`))
	assert.ErrorContains(t, err, "thread: Extra inputs are not permitted")
}

// FuzzParseMessages checks that no body makes the decoder panic, that every refusal is a 400 in this
// API's shape, and that what is accepted is well formed for the template.
func FuzzParseMessages(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"a"}],"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"stop_sequences":["a"]}`,
		`{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"}]}]}`,
		`{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","max_tokens":5,"tool_choice":{"type":"any"},"messages":[]}`, `[]`, `{`, `null`,
		`{"model":"m","max_tokens":5,"tools":[{"name":"f","strict":true,"input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","max_tokens":5,"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}},"messages":[{"role":"user","content":"q"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte) (Request, error){ParseMessages, ParseCountTokens} {
			r, err := parse(body)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Status != 400 || e.Message == "" || e.Type != "invalid_request_error" {
					t.Fatalf("refusal is not a 400 API error: %#v", err)
				}
				continue
			}
			if r.Gen.MaxTokens < 0 || r.Gen.BlockSize < 0 || len(r.Gen.Messages) == 0 {
				t.Fatalf("accepted an out-of-range request: %+v", r)
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
