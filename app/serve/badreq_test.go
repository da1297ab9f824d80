package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestE2EBadRequests sends malformed and unsupported requests to the real server and checks each gets the
// right status, OpenAI's error shape and a message naming the problem.
func TestE2EBadRequests(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{apiKey: "k", ctxLen: 256, maxBody: 8 << 10})
	auth := map[string]string{"Authorization": "Bearer k"}
	const chat = "/v1/chat/completions"
	const cmpl = "/v1/completions"
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		hdr    map[string]string
		status int
		param  string
		msg    string // substring of the message
	}{
		{"malformed JSON", "POST", chat, `{"messages":`, auth, 400, "", "not valid JSON"},
		{"truncated object", "POST", chat, `{"messages":[{"role":"user","content":"hi"}]`, auth, 400, "", "JSON"},
		{"trailing garbage", "POST", chat, `{` + msgs + `} x`, auth, 400, "", "not valid JSON"},
		{"empty body", "POST", chat, ``, auth, 400, "", "empty"},
		{"array body", "POST", chat, `[1,2]`, auth, 400, "", "must be a JSON object"},
		{"max_tokens string", "POST", chat, `{` + msgs + `,"max_tokens":"ten"}`, auth, 400, "max_tokens", "max_tokens must be an integer"},
		{"max_tokens float", "POST", chat, `{` + msgs + `,"max_tokens":1.5}`, auth, 400, "max_tokens", "integer"},
		{"max_tokens negative", "POST", chat, `{` + msgs + `,"max_tokens":-5}`, auth, 400, "max_tokens", "at least 1"},
		{"max_tokens zero", "POST", chat, `{` + msgs + `,"max_tokens":0}`, auth, 400, "max_tokens", "at least 1"},
		{"max_tokens beyond context", "POST", chat, `{` + msgs + `,"max_tokens":100000}`, auth, 400, "max_tokens", "max tokens 100000 is too large: this model's maximum context length is 256"},
		{"max_completion_tokens negative", "POST", chat, `{` + msgs + `,"max_completion_tokens":-1}`, auth, 400, "max_completion_tokens", "max_completion_tokens must be at least 1"},
		{"max_tokens one past the room", "POST", cmpl, `{"prompt":"abcd","max_tokens":253}`, auth, 400, "max_tokens", "max tokens 253 is too large: this model's maximum context length is 256 tokens and the prompt has 4 tokens (at most 252 can be generated)"},
		{"prompt fills the context", "POST", cmpl, `{"prompt":"` + strings.Repeat("a", 300) + `"}`, auth, 400, "prompt", "maximum context length is 256 tokens, and the prompt has 300 tokens"},
		{"max_tokens overflows", "POST", chat, `{` + msgs + `,"max_tokens":1e30}`, auth, 400, "max_tokens", "integer"},
		{"max_completion_tokens disagrees", "POST", chat, `{` + msgs + `,"max_tokens":5,"max_completion_tokens":6}`, auth, 400, "max_completion_tokens", "disagree"},
		{"temperature too high", "POST", chat, `{` + msgs + `,"temperature":2.5}`, auth, 400, "temperature", "between 0 and 2"},
		{"temperature negative", "POST", chat, `{` + msgs + `,"temperature":-0.1}`, auth, 400, "temperature", "between 0 and 2"},
		{"temperature string", "POST", chat, `{` + msgs + `,"temperature":"hot"}`, auth, 400, "temperature", "must be a number"},
		{"top_p above 1", "POST", chat, `{` + msgs + `,"top_p":1.5}`, auth, 400, "top_p", "at most 1"},
		{"top_p zero", "POST", chat, `{` + msgs + `,"top_p":0}`, auth, 400, "top_p", "greater than 0"},
		{"top_k below -1", "POST", chat, `{` + msgs + `,"top_k":-2}`, auth, 400, "top_k", "top_k"},
		{"min_p above 1", "POST", chat, `{` + msgs + `,"min_p":3}`, auth, 400, "min_p", "between 0 and 1"},
		{"n=2", "POST", chat, `{` + msgs + `,"n":2}`, auth, 400, "n", "n must be 1"},
		{"unknown model", "POST", chat, `{"model":"gpt-9",` + msgs + `}`, auth, 404, "model", `"gpt-9" does not exist`},
		{"messages missing", "POST", chat, `{"model":"toy"}`, auth, 400, "messages", "messages is required"},
		{"messages empty", "POST", chat, `{"messages":[]}`, auth, 400, "messages", "must not be empty"},
		{"messages not array", "POST", chat, `{"messages":"hi"}`, auth, 400, "messages", "array"},
		{"bad role", "POST", chat, `{"messages":[{"role":"wizard","content":"hi"}]}`, auth, 400, "messages[0].role", `"wizard"`},
		{"missing role", "POST", chat, `{"messages":[{"content":"hi"}]}`, auth, 400, "messages[0].role", "required"},
		{"content number", "POST", chat, `{"messages":[{"role":"user","content":5}]}`, auth, 400, "messages[0].content", "string or an array"},
		{"image part", "POST", chat, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, auth, 400, "messages[0].content[0].type", "image_url"},
		{"user content null", "POST", chat, `{"messages":[{"role":"user","content":null}]}`, auth, 400, "messages[0].content", "required"},
		{"logprobs number on chat", "POST", chat, `{` + msgs + `,"logprobs":1}`, auth, 400, "logprobs", "logprobs must be a boolean"},
		{"top_logprobs without logprobs", "POST", chat, `{` + msgs + `,"top_logprobs":3}`, auth, 400, "top_logprobs", "needs logprobs"},
		{"top_logprobs above 20", "POST", chat, `{` + msgs + `,"logprobs":true,"top_logprobs":21}`, auth, 400, "top_logprobs", "between 0 and 20"},
		{"top_logprobs negative", "POST", chat, `{` + msgs + `,"logprobs":true,"top_logprobs":-1}`, auth, 400, "top_logprobs", "between 0 and 20"},
		{"top_logprobs fraction", "POST", chat, `{` + msgs + `,"logprobs":true,"top_logprobs":1.5}`, auth, 400, "top_logprobs", "integer"},
		{"tools not array", "POST", chat, `{` + msgs + `,"tools":{"type":"function"}}`, auth, 400, "tools", "array of tool objects"},
		{"tool not object", "POST", chat, `{` + msgs + `,"tools":[3]}`, auth, 400, "tools[0]", "must be an object"},
		{"tool type missing", "POST", chat, `{` + msgs + `,"tools":[{"function":{"name":"f"}}]}`, auth, 400, "tools[0].type", "required"},
		{"tool type not function", "POST", chat, `{` + msgs + `,"tools":[{"type":"web_search"}]}`, auth, 400, "tools[0].type", `"web_search"`},
		{"tool function missing", "POST", chat, `{` + msgs + `,"tools":[{"type":"function"}]}`, auth, 400, "tools[0].function", "required"},
		{"tool name missing", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"description":"d"}}]}`, auth, 400, "tools[0].function.name", "required"},
		{"tool name bad", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"get weather"}}]}`, auth, 400, "tools[0].function.name", "letters, digits"},
		{"tool name duplicate", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, auth, 400, "tools[1].function.name", "unique"},
		{"tool parameters not object", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`, auth, 400, "tools[0].function.parameters", "JSON Schema object"},
		{"tool description number", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","description":5}}]}`, auth, 400, "tools[0].function.description", "string"},
		{"tool strict outside the subset", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"not":{}}}}}}]}`, auth, 400, "tools", "not at #/properties/a"},
		{"tool_choice required without tools", "POST", chat, `{` + msgs + `,"tool_choice":"required"}`, auth, 400, "tool_choice", "needs tools"},
		{"strict tool schema outside the subset", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"string","pattern":"x"}}}}}],"tool_choice":"required"}`, auth, 400, "tool_choice", "pattern"},
		{"response_format schema outside the subset", "POST", chat, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","minProperties":1}}}}`, auth, 400, "response_format", "minProperties"},
		{"tool_choice named", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`, auth, 400, "tool_choice", "constrained decoding"},
		{"tool_choice unknown", "POST", chat, `{` + msgs + `,"tool_choice":"sometimes"}`, auth, 400, "tool_choice", `"sometimes"`},
		{"tool_choice object without function", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function"}}`, auth, 400, "tool_choice", "tool_choice.function.name is missing"},
		{"tool_choice object of another type", "POST", chat, `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"function":{"name":"f"}}}`, auth, 400, "tool_choice", `tool_choice.type must be "function"`},
		{"parallel_tool_calls string", "POST", chat, `{` + msgs + `,"parallel_tool_calls":"yes"}`, auth, 400, "parallel_tool_calls", "boolean"},
		{"tool_calls on user", "POST", chat, `{"messages":[{"role":"user","content":"q","tool_calls":[]}]}`, auth, 400, "messages[0].tool_calls", "only allowed on assistant"},
		{"tool_calls not array", "POST", chat, `{"messages":[{"role":"assistant","content":null,"tool_calls":{}},{"role":"user","content":"q"}]}`, auth, 400, "messages[0].tool_calls", "array"},
		{"tool_call without name", "POST", chat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"arguments":"{}"}}]},{"role":"user","content":"q"}]}`, auth, 400, "messages[0].tool_calls[0].function.name", "required"},
		{"tool_call arguments not JSON", "POST", chat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{oops"}}]},{"role":"user","content":"q"}]}`, auth, 400, "messages[0].tool_calls[0].function.arguments", "JSON object"},
		{"tool message without content", "POST", chat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c"}]}`, auth, 400, "messages[1].content", "required"},
		{"functions", "POST", chat, `{` + msgs + `,"functions":[{"name":"f"}]}`, auth, 400, "functions", "send tools"},
		{"completion tools", "POST", cmpl, `{"prompt":"a","tools":[{"type":"function","function":{"name":"f"}}]}`, auth, 400, "tools", "/v1/chat/completions"},
		{"response_format json_schema", "POST", chat, `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{}}}`, auth, 400, "response_format", "json_schema"},
		{"presence_penalty", "POST", chat, `{` + msgs + `,"presence_penalty":0.5}`, auth, 400, "presence_penalty", "only 0"},
		{"frequency_penalty", "POST", chat, `{` + msgs + `,"frequency_penalty":1}`, auth, 400, "frequency_penalty", "only 0"},
		{"logit_bias", "POST", chat, `{` + msgs + `,"logit_bias":{"5":10}}`, auth, 400, "logit_bias", "not applied"},
		{"stop too many", "POST", chat, `{` + msgs + `,"stop":["a","b","c","d","e"]}`, auth, 400, "stop", "at most 4"},
		{"stop empty string", "POST", chat, `{` + msgs + `,"stop":""}`, auth, 400, "stop", "empty"},
		{"stop number", "POST", chat, `{` + msgs + `,"stop":7}`, auth, 400, "stop", "string or an array"},
		{"stream_options without stream", "POST", chat, `{` + msgs + `,"stream_options":{"include_usage":true}}`, auth, 400, "stream_options", "only allowed when stream"},
		{"stream not bool", "POST", chat, `{` + msgs + `,"stream":"yes"}`, auth, 400, "stream", "boolean"},
		{"block_size zero", "POST", chat, `{` + msgs + `,"block_size":0}`, auth, 400, "block_size", "at least 1"},
		{"block_size beyond the context", "POST", chat, `{` + msgs + `,"block_size":99999}`, auth, 400, "block_size", "block_size 99999 exceeds this model's context length"},
		{"unknown template kwarg", "POST", chat, `{` + msgs + `,"chat_template_kwargs":{"tools_mode":1}}`, auth, 400, "chat_template_kwargs.tools_mode", "only enable_thinking"},
		{"enable_thinking string", "POST", chat, `{` + msgs + `,"chat_template_kwargs":{"enable_thinking":"yes"}}`, auth, 400, "chat_template_kwargs.enable_thinking", "boolean"},
		{"seed string", "POST", chat, `{` + msgs + `,"seed":"abc"}`, auth, 400, "seed", "integer"},
		{"prompt too long", "POST", cmpl, `{"prompt":"` + strings.Repeat("a", 300) + `"}`, auth, 400, "prompt", "this model's maximum context length is 256"},
		{"chat prompt too long", "POST", chat, `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 300) + `"}]}`, auth, 400, "messages", "this model's maximum context length is 256"},
		{"oversized body", "POST", chat, `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 9000) + `"}]}`, auth, 413, "", "larger than 8192 bytes"},
		{"no API key", "POST", chat, `{` + msgs + `}`, nil, 401, "", "API key"},
		{"wrong API key", "POST", chat, `{` + msgs + `}`, map[string]string{"Authorization": "Bearer nope"}, 401, "", "API key"},
		{"key without Bearer", "POST", chat, `{` + msgs + `}`, map[string]string{"Authorization": "k"}, 401, "", "API key"},
		{"GET on chat", "GET", chat, ``, auth, 405, "", "method GET is not allowed"},
		{"DELETE on models", "DELETE", "/v1/models", ``, auth, 405, "", "use GET"},
		{"unknown path", "POST", "/v1/audio/speech", `{}`, auth, 404, "", "no route"},
		{"unknown model id", "GET", "/v1/models/other", ``, auth, 404, "model", "does not exist"},
		{"completion prompt missing", "POST", cmpl, `{"max_tokens":3}`, auth, 400, "prompt", "prompt is required"},
		{"completion prompt empty", "POST", cmpl, `{"prompt":""}`, auth, 400, "prompt", "prompt must not be empty"},
		{"tool message without tool_call_id", "POST", chat, `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"x"}]}`, auth, 400, "messages[2].tool_call_id", "required"},
		{"tool message answering no call", "POST", chat, `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c2","content":"x"}]}`, auth, 400, "messages[2].tool_call_id", `"c2" matches no tool call`},
		{"tool message without any call", "POST", chat, `{"messages":[{"role":"user","content":"q"},{"role":"tool","tool_call_id":"c1","content":"x"}]}`, auth, 400, "messages[1].tool_call_id", "matches no tool call"},
		{"logprobs string", "POST", chat, `{` + msgs + `,"logprobs":"yes"}`, auth, 400, "logprobs", "logprobs must be a boolean"},
		{"top_logprobs string", "POST", chat, `{` + msgs + `,"top_logprobs":"3"}`, auth, 400, "top_logprobs", "top_logprobs must be an integer"},
		{"completion token ids", "POST", cmpl, `{"prompt":[1,2,3]}`, auth, 400, "prompt", "token-id prompts"},
		{"completion batch", "POST", cmpl, `{"prompt":["a","b"]}`, auth, 400, "prompt", "batched"},
		{"completion empty array", "POST", cmpl, `{"prompt":[]}`, auth, 400, "prompt", "empty array"},
		{"completion echo", "POST", cmpl, `{"prompt":"a","echo":true}`, auth, 400, "echo", "not supported"},
		{"completion suffix", "POST", cmpl, `{"prompt":"a","suffix":"z"}`, auth, 400, "suffix", "not supported"},
		{"completion best_of", "POST", cmpl, `{"prompt":"a","best_of":3}`, auth, 400, "best_of", "best_of 1"},
		{"completion logprobs above 5", "POST", cmpl, `{"prompt":"a","logprobs":6}`, auth, 400, "logprobs", "between 0 and 5"},
		{"completion logprobs true", "POST", cmpl, `{"prompt":"a","logprobs":true}`, auth, 400, "logprobs", "integer"},
		{"completion top_logprobs", "POST", cmpl, `{"prompt":"a","logprobs":2,"top_logprobs":2}`, auth, 400, "top_logprobs", "logprobs: N"},
	}
	require.GreaterOrEqual(t, len(cases), 30)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, hdr, body := h.do(c.method, c.path, c.body, c.hdr)
			assert.Equal(t, c.status, code, "body: %s", body)
			assert.Equal(t, "application/json", hdr.Get("Content-Type"))
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), "error body must be OpenAI's JSON shape: %s", body)
			assert.Contains(t, e.Error.Message, c.msg)
			assert.NotContains(t, e.Error.Message, "invalid request:", "messages are written for the client")
			if c.status == http.StatusUnauthorized {
				assert.Equal(t, `Bearer realm="higgs"`, hdr.Get("WWW-Authenticate"))
			}
			assert.NotEmpty(t, e.Error.Type)
			if c.param != "" {
				require.NotNil(t, e.Error.Param, "param must name the field: %s", body)
				assert.Equal(t, c.param, *e.Error.Param)
			}
		})
	}
	// Neutral values of unsupported fields, as SDKs send by default, are accepted.
	code, _, body := h.do("POST", chat, `{`+msgs+`,"max_tokens":3,"n":1,"logprobs":false,"presence_penalty":0,"frequency_penalty":0,`+
		`"tools":[],"response_format":{"type":"text"},"logit_bias":{},"user":"me","store":false,"metadata":{"a":"b"},`+
		`"stop":null,"seed":-3,"top_k":-1,"parallel_tool_calls":true,"service_tier":"auto"}`, auth)
	assert.Equal(t, http.StatusOK, code, string(body))
	// The Bearer scheme is case-insensitive (RFC 9110).
	code, _, body = h.do("POST", chat, `{`+msgs+`,"max_tokens":3}`, map[string]string{"Authorization": "bearer k"})
	assert.Equal(t, http.StatusOK, code, string(body))
	// A tool reply to the assistant's call is accepted.
	code, _, body = h.do("POST", chat, `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"}],"max_tokens":3}`, auth)
	assert.Equal(t, http.StatusOK, code, string(body))
	// Content parts and the developer role are accepted.
	code, _, body = h.do("POST", chat, `{"messages":[{"role":"developer","content":"be brief"},`+
		`{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],"max_tokens":3}`, auth)
	assert.Equal(t, http.StatusOK, code, string(body))
}

// TestE2EAnthropicBadRequests sends refused Messages requests to the real server: Anthropic's error shape,
// its status codes, and engine-level refusals naming their field.
func TestE2EAnthropicBadRequests(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{apiKey: "k", ctxLen: 256, maxBody: 8 << 10})
	auth := map[string]string{"x-api-key": "k"}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		typ    string
		msg    string
	}{
		{"max_tokens beyond context", `{"model":"toy","max_tokens":100000,` + msgs + `}`, auth, 400, "invalid_request_error", "max_tokens: context length exceeded: max tokens 100000 is too large: this model's maximum context length is 256"},
		{"prompt too long", `{"model":"toy","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("a", 300) + `"}]}`, auth, 400, "invalid_request_error", "messages: context length exceeded: this model's maximum context length is 256"},
		{"block_size beyond the context", `{"model":"toy","max_tokens":5,"block_size":99999,` + msgs + `}`, auth, 400, "invalid_request_error", "block_size: block_size 99999 exceeds this model's context length"},
		{"unknown model", `{"model":"claude-x","max_tokens":5,` + msgs + `}`, auth, 404, "not_found_error", `"claude-x" does not exist`},
		{"max_tokens missing", `{"model":"toy",` + msgs + `}`, auth, 400, "invalid_request_error", "max_tokens: field required"},
		{"extra field", `{"model":"toy","max_tokens":5,"frobnicate":"c",` + msgs + `}`, auth, 400, "invalid_request_error", "frobnicate: Extra inputs are not permitted"},
		{"container", `{"model":"toy","max_tokens":5,"container":"c",` + msgs + `}`, auth, 400, "invalid_request_error", "container: not supported by this server"},
		{"oversized body", `{"model":"toy","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("a", 9000) + `"}]}`, auth, 413, "request_too_large", "larger than 8192 bytes"},
		{"no key", `{"model":"toy","max_tokens":5,` + msgs + `}`, nil, 401, "authentication_error", "API key"},
		{"forced tool", `{"model":"toy","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},` + msgs + `}`, auth, 400, "invalid_request_error", "constrained decoding"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, hdr, body := h.do("POST", "/v1/messages", c.body, c.hdr)
			assert.Equal(t, c.status, code, "body: %s", body)
			assert.Equal(t, "application/json", hdr.Get("Content-Type"))
			assert.True(t, strings.HasPrefix(hdr.Get("request-id"), "req_"))
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), "error body must be Anthropic's shape: %s", body)
			assert.Equal(t, "error", e.Type)
			assert.Equal(t, c.typ, e.Error.Type)
			assert.Contains(t, e.Error.Message, c.msg)
			assert.NotContains(t, e.Error.Message, "invalid request:")
		})
	}
	code, _, body := h.do("POST", "/v1/messages", `{"model":"toy","max_tokens":3,`+msgs+`}`, map[string]string{"Authorization": "Bearer k"})
	assert.Equal(t, http.StatusOK, code, string(body))
	code, _, body = h.do("POST", "/v1/messages/count_tokens", `{"model":"toy",`+msgs+`}`, auth)
	assert.Equal(t, http.StatusOK, code, string(body))
	assert.Contains(t, string(body), `"input_tokens":`)
	// The Messages API feeds the same metrics as the OpenAI API.
	code, _, body = h.do("GET", "/metrics", ``, nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), `higgs_requests_total{endpoint="POST /v1/messages",status="200"} 1`)
	assert.Contains(t, string(body), `higgs_time_to_first_token_seconds_count{endpoint="POST /v1/messages"} 1`)
}
