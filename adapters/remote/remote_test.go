package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// provider is a fake remote: it records the request and answers with status and body (an SSE stream for 200).
type provider struct {
	srv     *httptest.Server
	path    string
	headers http.Header
	body    map[string]any
}

func newProvider(t *testing.T, status int, answer string) *provider {
	t.Helper()
	p := &provider{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.path, p.headers = r.URL.Path, r.Header.Clone()
		b, _ := io.ReadAll(r.Body)
		p.body = nil
		_ = json.Unmarshal(b, &p.body)
		if status == http.StatusOK {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// sse writes events as a provider streams them.
func sse(events ...string) string { return strings.Join(events, "\n\n") + "\n\n" }

// collect runs gen and returns its events with the result.
func collect(t *testing.T, gen ports.Generator, req ports.GenerateRequest) ([]ports.GenerateEvent, ports.GenerateResult, error) {
	t.Helper()
	var evs []ports.GenerateEvent
	res, err := gen.Generate(t.Context(), req, func(ev ports.GenerateEvent) error {
		evs = append(evs, ev)
		return nil
	})
	return evs, res, err
}

// history is a conversation with a tool call and its answer, as the inbound adapters build it.
func history() []ports.ChatMessage {
	return []ports.ChatMessage{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", Content: "", Raw: []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]}`)},
		{Role: "tool", Content: "18C", Raw: []byte(`{"role":"tool","content":"18C","tool_call_id":"call_1"}`)},
		{Role: "user", Content: "And tomorrow?"},
	}
}

const weatherTools = `[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`

func TestOpenAIRequestTranslation(t *testing.T) {
	p := newProvider(t, http.StatusOK, sse(`data: {"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`, `data: [DONE]`))
	gen := NewOpenAI(Options{Name: "up", BaseURL: p.srv.URL + "/v1/", Key: "sk-test"})
	seed := uint64(7)
	_, _, err := collect(t, gen, ports.GenerateRequest{Model: "gpt-x", Messages: history(), MaxTokens: 50, Seed: &seed,
		Sampling: ports.SamplingParams{Temperature: 0.5, TopP: 0.9, TopK: 20}, Stop: []string{"END"},
		Chat:       ports.ChatOptions{Tools: []byte(weatherTools)},
		Constraint: &ports.Constraint{Kind: ports.ConstrainToolCall, Tools: []ports.ConstraintTool{{Name: "get_weather"}}}})
	require.NoError(t, err)
	assert.Equal(t, "/v1/chat/completions", p.path)
	assert.Equal(t, "Bearer sk-test", p.headers.Get("Authorization"))
	want := `{"model":"gpt-x","max_tokens":50,"temperature":0.5,"top_p":0.9,"top_k":20,"seed":7,"stop":["END"],
		"stream":true,"stream_options":{"include_usage":true},
		"tools":` + weatherTools + `,
		"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,
		"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","content":"18C","tool_call_id":"call_1"},{"role":"user","content":"And tomorrow?"}]}`
	got, _ := json.Marshal(p.body)
	assert.JSONEq(t, want, string(got))
}

func TestOpenAIStreamTranslation(t *testing.T) {
	p := newProvider(t, http.StatusOK, sse(
		`data: {"model":"gpt-x-1","choices":[{"delta":{"role":"assistant","content":""}}]}`,
		`data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}`,
		`data: {"choices":[{"delta":{"content":"Let me "}}]}`,
		`data: {"choices":[{"delta":{"content":"check."}}]}`,
		`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"get_weather","arguments":""}}]}}]}`,
		`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
		`data: {"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"get_time","arguments":""}}]}}]}`,
		`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
		`data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`,
		`data: {"choices":[],"usage":{"prompt_tokens":31,"completion_tokens":12,"prompt_tokens_details":{"cached_tokens":16}}}`,
		`data: [DONE]`))
	evs, res, err := collect(t, NewOpenAI(Options{Name: "up", BaseURL: p.srv.URL}), ports.GenerateRequest{Model: "gpt-x", Messages: history()[:2]})
	require.NoError(t, err)
	calls := []ports.ToolCall{{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "call_b", Name: "get_time", Arguments: "{}"}}
	assert.Equal(t, []ports.GenerateEvent{{Reasoning: "hmm"}, {Content: "Let me "}, {Content: "check."}, {ToolCalls: calls}}, evs)
	assert.Equal(t, ports.GenerateResult{Model: "gpt-x-1", PromptTokens: 31, CompletionTokens: 12, CachedTokens: 16,
		FinishReason: "stop", Content: "Let me check.", Reasoning: "hmm", ToolCalls: calls}, res)
}

func TestOpenAICompletionAndLength(t *testing.T) {
	p := newProvider(t, http.StatusOK, sse(`data: {"choices":[{"text":"abc"}]}`, `data: {"choices":[{"text":"","finish_reason":"length"}]}`, `data: [DONE]`))
	_, res, err := collect(t, NewOpenAI(Options{Name: "up", BaseURL: p.srv.URL}), ports.GenerateRequest{Model: "m", Prompt: "x", MaxTokens: 3})
	require.NoError(t, err)
	assert.Equal(t, "/v1/completions", p.path)
	assert.Equal(t, "x", p.body["prompt"])
	assert.Equal(t, "abc", res.Content)
	assert.Equal(t, "length", res.FinishReason)
}

func TestAnthropicRequestTranslation(t *testing.T) {
	p := newProvider(t, http.StatusOK, sse(`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`,
		`event: message_stop`+"\n"+`data: {"type":"message_stop"}`))
	gen := NewAnthropic(Options{Name: "claude", BaseURL: p.srv.URL, Key: "sk-ant"})
	think := true
	_, _, err := collect(t, gen, ports.GenerateRequest{Model: "claude-x", Messages: history(), MaxTokens: 2048,
		Sampling: ports.SamplingParams{Temperature: 0.5, TopP: 1, TopK: 5}, Stop: []string{"END"},
		Chat:       ports.ChatOptions{Tools: []byte(weatherTools), EnableThinking: &think},
		Constraint: &ports.Constraint{Kind: ports.ConstrainToolCall, Parallel: true, Tools: []ports.ConstraintTool{{Name: "a"}, {Name: "b"}}}})
	require.NoError(t, err)
	assert.Equal(t, "/v1/messages", p.path)
	assert.Equal(t, "sk-ant", p.headers.Get("x-api-key"))
	assert.Equal(t, anthropicVersion, p.headers.Get("anthropic-version"))
	want := `{"model":"claude-x","system":"Be brief.","max_tokens":2048,"temperature":0.5,"top_k":5,"stop_sequences":["END"],"stream":true,
		"tools":[{"name":"get_weather","description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
		"tool_choice":{"type":"any"},"thinking":{"type":"enabled","budget_tokens":1024},
		"messages":[{"role":"user","content":[{"type":"text","text":"Weather in Paris?"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"18C"},{"type":"text","text":"And tomorrow?"}]}]}`
	got, _ := json.Marshal(p.body)
	assert.JSONEq(t, want, string(got))
}

func TestAnthropicStreamTranslation(t *testing.T) {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data }
	p := newProvider(t, http.StatusOK, sse(
		ev("message_start", `{"type":"message_start","message":{"model":"claude-x-1","usage":{"input_tokens":20,"cache_read_input_tokens":8,"cache_creation_input_tokens":2,"output_tokens":1}}}`),
		ev("ping", `{"type":"ping"}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking."}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`),
		ev("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":2}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":15}}`),
		ev("message_stop", `{"type":"message_stop"}`)))
	evs, res, err := collect(t, NewAnthropic(Options{Name: "claude", BaseURL: p.srv.URL}), ports.GenerateRequest{Model: "claude-x", Messages: history()[:2]})
	require.NoError(t, err)
	call := ports.ToolCall{ID: "toolu_1", Name: "get_weather", Arguments: `{"city": "Paris"}`}
	assert.Equal(t, []ports.GenerateEvent{{Reasoning: "hmm"}, {Content: "Checking."}, {ToolCalls: []ports.ToolCall{call}}}, evs)
	assert.Equal(t, ports.GenerateResult{Model: "claude-x-1", PromptTokens: 30, CompletionTokens: 15, CachedTokens: 8, CacheWriteTokens: 2,
		FinishReason: "stop", Content: "Checking.", Reasoning: "hmm", ToolCalls: []ports.ToolCall{call}}, res)
	assert.Equal(t, float64(defaultMaxTokens), p.body["max_tokens"], "a request without max_tokens gets the default")
}

func TestAnthropicStopReasons(t *testing.T) {
	for _, tc := range []struct{ reason, seq, finish, stop string }{
		{"end_turn", "null", "stop", ""}, {"max_tokens", "null", "length", ""}, {"stop_sequence", `"END"`, "stop", "END"}, {"tool_use", "null", "stop", ""},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			p := newProvider(t, http.StatusOK, sse(`data: {"type":"message_delta","delta":{"stop_reason":"`+tc.reason+`","stop_sequence":`+tc.seq+`},"usage":{"output_tokens":3}}`,
				`data: {"type":"message_stop"}`))
			_, res, err := collect(t, NewAnthropic(Options{Name: "c", BaseURL: p.srv.URL}), ports.GenerateRequest{Model: "m", Messages: history()[1:2]})
			require.NoError(t, err)
			assert.Equal(t, tc.finish, res.FinishReason)
			assert.Equal(t, tc.stop, res.StopSequence)
		})
	}
}

// TestRefusals: what a format cannot express is a 400 naming the field, before anything is sent.
func TestRefusals(t *testing.T) {
	msgs := history()[1:2]
	for _, tc := range []struct {
		name  string
		gen   ports.Generator
		req   ports.GenerateRequest
		param string
	}{
		{"anthropic prompt", NewAnthropic(Options{}), ports.GenerateRequest{Prompt: "x"}, "prompt"},
		{"anthropic min_p", NewAnthropic(Options{}), ports.GenerateRequest{Messages: msgs, Sampling: ports.SamplingParams{MinP: 0.1}}, "min_p"},
		{"anthropic json", NewAnthropic(Options{}), ports.GenerateRequest{Messages: msgs, Constraint: &ports.Constraint{Kind: ports.ConstrainJSONObject, Param: "response_format"}}, "response_format"},
		{"anthropic thinking budget", NewAnthropic(Options{}), ports.GenerateRequest{Messages: msgs, MaxTokens: 100, Chat: ports.ChatOptions{EnableThinking: new(true)}}, "max_tokens"},
		{"openai logprobs", NewOpenAI(Options{}), ports.GenerateRequest{Messages: msgs, Logprobs: true}, "logprobs"},
		{"anthropic logprobs", NewAnthropic(Options{}), ports.GenerateRequest{Messages: msgs, Logprobs: true}, "logprobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.gen.Generate(t.Context(), tc.req, nil)
			var re *ports.RequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.param, re.Param)
		})
	}
}

// TestProviderErrors: a provider's 4xx is the same class of error with its message; a 5xx, a refused key,
// a broken stream or an unreachable provider is ErrProvider.
func TestProviderErrors(t *testing.T) {
	oaiErr := func(msg, param string) string {
		return `{"error":{"message":"` + msg + `","type":"invalid_request_error","param":"` + param + `","code":null}}`
	}
	antErr := func(typ, msg string) string {
		return `{"type":"error","error":{"type":"` + typ + `","message":"` + msg + `"}}`
	}
	for _, tc := range []struct {
		name      string
		anthropic bool
		status    int
		body      string
		is        error
		msg       string
	}{
		{"openai 400", false, 400, oaiErr("temperature too high", "temperature"), ports.ErrInvalidRequest, "temperature too high (provider up)"},
		{"openai 404", false, 404, oaiErr("no model gpt-q", "model"), ports.ErrUnknownModel, "no model gpt-q"},
		{"openai 429", false, 429, oaiErr("slow down", ""), ports.ErrBusy, "slow down"},
		{"openai 500", false, 500, oaiErr("boom", ""), ports.ErrProvider, "answered 500: boom"},
		{"openai 401", false, 401, oaiErr("bad key", ""), ports.ErrProvider, "refused the configured key"},
		{"plain text 502", false, 502, "upstream gone", ports.ErrProvider, "upstream gone"},
		{"openai stream error", false, 200, sse(`data: {"error":{"message":"died","type":"server_error"}}`), ports.ErrProvider, "died"},
		{"openai stream cut", false, 200, sse(`data: {"choices":[{"delta":{"content":"a"}}]}`), ports.ErrProvider, "ended its answer early"},
		{"openai stream garbage", false, 200, sse(`data: {nope`), ports.ErrProvider, "unreadable"},
		{"anthropic 400", true, 400, antErr("invalid_request_error", "max_tokens: field required"), ports.ErrInvalidRequest, "max_tokens: field required (provider up)"},
		{"anthropic 529", true, 529, antErr("overloaded_error", "Overloaded"), ports.ErrBusy, "Overloaded"},
		{"anthropic 500", true, 500, antErr("api_error", "internal"), ports.ErrProvider, "internal"},
		{"anthropic stream overloaded", true, 200, sse(`event: error` + "\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), ports.ErrBusy, "Overloaded"},
		{"anthropic stream without stop reason", true, 200, sse(`data: {"type":"message_stop"}`), ports.ErrProvider, "without a stop reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t, tc.status, tc.body)
			var gen ports.Generator = NewOpenAI(Options{Name: "up", BaseURL: p.srv.URL})
			if tc.anthropic {
				gen = NewAnthropic(Options{Name: "up", BaseURL: p.srv.URL})
			}
			_, err := gen.Generate(t.Context(), ports.GenerateRequest{Model: "m", Messages: history()[1:2]}, nil)
			require.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	t.Run("a refused key's message is not passed on", func(t *testing.T) {
		// OpenAI's 401 quotes the key's ends; the error reaches clients, who must not learn them.
		p := newProvider(t, 401, oaiErr("Incorrect API key provided: sk-proj-****wxyz.", ""))
		_, err := NewOpenAI(Options{Name: "up", BaseURL: p.srv.URL, Key: "sk-proj-abcdwxyz"}).Generate(t.Context(), ports.GenerateRequest{Messages: history()[1:2]}, nil)
		require.ErrorIs(t, err, ports.ErrProvider)
		assert.Contains(t, err.Error(), "provider up refused the configured key (status 401)")
		assert.NotContains(t, err.Error(), "wxyz")
		p = newProvider(t, 403, antErr("permission_error", "key sk-ant-****wxyz may not use this model"))
		_, err = NewAnthropic(Options{Name: "up", BaseURL: p.srv.URL, Key: "sk-ant-abcdwxyz"}).Generate(t.Context(), ports.GenerateRequest{Messages: history()[1:2]}, nil)
		require.ErrorIs(t, err, ports.ErrProvider)
		assert.Contains(t, err.Error(), "(status 403)")
		assert.NotContains(t, err.Error(), "wxyz")
	})
	t.Run("param named", func(t *testing.T) {
		p := newProvider(t, 400, oaiErr("temperature too high", "temperature"))
		_, err := NewOpenAI(Options{Name: "up", BaseURL: p.srv.URL}).Generate(t.Context(), ports.GenerateRequest{Messages: history()[1:2]}, nil)
		var re *ports.RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, "temperature", re.Param)
	})
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	for _, gen := range []ports.Generator{NewOpenAI(Options{Name: "gone", BaseURL: "http://" + addr, Key: "sk-secret"}),
		NewAnthropic(Options{Name: "gone", BaseURL: "http://" + addr, Key: "sk-secret"})} {
		_, err := gen.Generate(t.Context(), ports.GenerateRequest{Messages: history()[1:2]}, nil)
		require.ErrorIs(t, err, ports.ErrProvider)
		assert.Contains(t, err.Error(), "provider gone at http://"+addr+" could not be reached")
		assert.NotContains(t, err.Error(), "sk-secret")
	}
}

// TestCancelAbortsTheProvidersRequest: cancelling the context ends Generate with context.Canceled and the
// provider sees its request end, mid-stream as before the answer.
func TestCancelAbortsTheProvidersRequest(t *testing.T) {
	for _, midStream := range []bool{false, true} {
		gone := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // the server notices a closed connection once the body is read
			if midStream {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, sse(`data: {"choices":[{"delta":{"content":"a"}}]}`))
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done()
			close(gone)
		}))
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan struct{}, 1)
		go func() {
			if !midStream {
				time.Sleep(50 * time.Millisecond)
				cancel()
			}
		}()
		_, err := NewOpenAI(Options{Name: "up", BaseURL: srv.URL}).Generate(ctx, ports.GenerateRequest{Messages: history()[1:2]},
			func(ports.GenerateEvent) error {
				started <- struct{}{}
				cancel()
				return nil
			})
		require.ErrorIs(t, err, context.Canceled)
		select {
		case <-gone:
		case <-time.After(5 * time.Second):
			t.Fatal("the provider's request was not aborted")
		}
		srv.Close()
		assert.Equal(t, midStream, len(started) == 1)
	}
}

// TestEmitErrorStops: an error from emit ends Generate with it.
func TestEmitErrorStops(t *testing.T) {
	p := newProvider(t, http.StatusOK, sse(`data: {"choices":[{"delta":{"content":"a"}}]}`, `data: {"choices":[{"delta":{},"finish_reason":"stop"}]}`, `data: [DONE]`))
	stop := errors.New("client gone")
	_, err := NewOpenAI(Options{Name: "up", BaseURL: p.srv.URL}).Generate(t.Context(), ports.GenerateRequest{Messages: history()[1:2]},
		func(ports.GenerateEvent) error { return stop })
	assert.ErrorIs(t, err, stop)
}

// knownClass reports whether err is one of the errors a stream reader may return.
func knownClass(err error) bool {
	return err == nil || errors.Is(err, ports.ErrProvider) || errors.Is(err, ports.ErrInvalidRequest) ||
		errors.Is(err, ports.ErrBusy) || errors.Is(err, ports.ErrUnknownModel)
}

// FuzzOpenAIStream and FuzzAnthropicStream: any stream a provider sends is read without a panic into a
// result or one of the port's errors, and the result's text is the events' text.
func FuzzOpenAIStream(f *testing.F) {
	f.Add(sse(`data: {"choices":[{"delta":{"content":"a","tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}]}`, `data: [DONE]`))
	f.Add(sse(`data: {"error":{"message":"x","type":"invalid_request_error"}}`))
	f.Add(sse(`data: {"choices":[],"usage":{"prompt_tokens":1}}`))
	f.Fuzz(func(t *testing.T, s string) {
		var text string
		res, err := NewOpenAI(Options{Name: "f"}).read(t.Context(), newSSEReader(strings.NewReader(s)), ports.GenerateResult{},
			func(ev ports.GenerateEvent) error { text += ev.Content; return nil })
		require.True(t, knownClass(err), "%v", err)
		assert.Equal(t, text, res.Content)
	})
}

func FuzzAnthropicStream(f *testing.F) {
	f.Add(sse(`data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f"}}`,
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`,
		`data: {"type":"content_block_stop","index":0}`, `data: {"type":"message_delta","delta":{"stop_reason":"tool_use"}}`, `data: {"type":"message_stop"}`))
	f.Add(sse(`data: {"type":"error","error":{"type":"overloaded_error","message":"x"}}`))
	f.Add(sse(`data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}`))
	f.Fuzz(func(t *testing.T, s string) {
		var text string
		res, err := NewAnthropic(Options{Name: "f"}).read(t.Context(), newSSEReader(strings.NewReader(s)), ports.GenerateResult{},
			func(ev ports.GenerateEvent) error {
				text += ev.Content
				for _, c := range ev.ToolCalls {
					require.True(t, json.Valid([]byte(c.Arguments)), c.Arguments)
				}
				return nil
			})
		require.True(t, knownClass(err), "%v", err)
		assert.Equal(t, text, res.Content)
	})
}

// TestCacheBreakpoints: an Anthropic-format provider gets cache_control on the last block of each marked
// message (the system prompt then as blocks); a request that opted out of caching sends none, and to an
// OpenAI-format provider cache_prompt false.
func TestCacheBreakpoints(t *testing.T) {
	done := sse(`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`, `data: {"type":"message_stop"}`)
	p := newProvider(t, http.StatusOK, done)
	gen := NewAnthropic(Options{Name: "c", BaseURL: p.srv.URL})
	_, _, err := collect(t, gen, ports.GenerateRequest{Model: "m", Messages: history(), MaxTokens: 10, CacheBreakpoints: []int{0, 3}})
	require.NoError(t, err)
	got, _ := json.Marshal(map[string]any{"system": p.body["system"], "messages": p.body["messages"]})
	assert.JSONEq(t, `{"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Weather in Paris?"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"18C","cache_control":{"type":"ephemeral"}},
		{"type":"text","text":"And tomorrow?"}]}]}`, string(got))

	_, _, err = collect(t, gen, ports.GenerateRequest{Model: "m", Messages: history(), MaxTokens: 10, CacheBreakpoints: []int{0, 3}, NoCache: true})
	require.NoError(t, err)
	assert.Equal(t, "Be brief.", p.body["system"])
	assert.NotContains(t, fmt.Sprint(p.body["messages"]), "cache_control")

	o := newProvider(t, http.StatusOK, sse(`data: {"choices":[{"delta":{},"finish_reason":"stop"}]}`, `data: [DONE]`))
	_, _, err = collect(t, NewOpenAI(Options{Name: "o", BaseURL: o.srv.URL}), ports.GenerateRequest{Model: "m", Messages: history(), NoCache: true})
	require.NoError(t, err)
	assert.Equal(t, false, o.body["cache_prompt"])
}

// TestAnswerBound: a provider that streams more than Options.MaxAnswerBytes (text, reasoning or a tool
// call's arguments) is cut with a 502-class error naming the bound, in both formats; an answer within the
// bound is read whole.
func TestAnswerBound(t *testing.T) {
	repeat := func(n int, ev string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = ev
		}
		return out
	}
	chunk := strings.Repeat("x", 100)
	oaiEnd := []string{`data: {"choices":[{"delta":{},"finish_reason":"stop"}]}`, `data: [DONE]`}
	antStart := `data: {"type":"message_start","message":{"model":"m","usage":{"input_tokens":1,"output_tokens":0}}}`
	antEnd := []string{`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`, `data: {"type":"message_stop"}`}
	for _, tc := range []struct {
		name      string
		anthropic bool
		events    []string
		cut       bool
	}{
		{"openai text within", false, append(repeat(9, `data: {"choices":[{"delta":{"content":"`+chunk+`"}}]}`), oaiEnd...), false},
		{"openai text over", false, append(repeat(11, `data: {"choices":[{"delta":{"content":"`+chunk+`"}}]}`), oaiEnd...), true},
		{"openai reasoning over", false, append(repeat(11, `data: {"choices":[{"delta":{"reasoning_content":"`+chunk+`"}}]}`), oaiEnd...), true},
		{"openai tool arguments over", false, append(repeat(11, `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"`+chunk+`"}}]}}]}`), oaiEnd...), true},
		{"openai empty calls at new indices over", false, append(func() []string {
			out := make([]string, 20)
			for i := range out {
				out[i] = fmt.Sprintf(`data: {"choices":[{"delta":{"tool_calls":[{"index":%d}]}}]}`, i)
			}
			return out
		}(), oaiEnd...), true},
		{"anthropic text within", true, append(append([]string{antStart, `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			repeat(9, `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+chunk+`"}}`)...), antEnd...), false},
		{"anthropic text over", true, append(append([]string{antStart, `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			repeat(11, `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+chunk+`"}}`)...), antEnd...), true},
		{"anthropic tool input over", true, append(append([]string{antStart, `data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f"}}`},
			repeat(11, `data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"`+chunk+`"}}`)...), antEnd...), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t, http.StatusOK, sse(tc.events...))
			opts := Options{Name: "up", BaseURL: p.srv.URL, MaxAnswerBytes: 1000}
			var gen ports.Generator = NewOpenAI(opts)
			if tc.anthropic {
				gen = NewAnthropic(opts)
			}
			evs, res, err := collect(t, gen, ports.GenerateRequest{Model: "m", Messages: history()[1:2], MaxTokens: 10})
			if tc.cut {
				require.ErrorIs(t, err, ports.ErrProvider)
				assert.Contains(t, err.Error(), "provider up sent an answer of more than 1000 bytes")
				assert.LessOrEqual(t, len(res.Content)+len(res.Reasoning), 1000)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, strings.Repeat(chunk, 9), res.Content)
			var streamed strings.Builder
			for _, ev := range evs {
				streamed.WriteString(ev.Content)
			}
			assert.Equal(t, res.Content, streamed.String())
		})
	}
}

// TestArgsObject: a call's arguments reach the other format as a JSON object, whatever the model or client sent.
func TestArgsObject(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1}`:         `{"a":1}`,
		`"{\"a\":1}"`:     `{"a":1}`,
		` {"a": [1, 2]} `: `{"a": [1, 2]}`,
		``:                `{}`,
		`null`:            `{}`,
		`5`:               `{}`,
		`[1,2]`:           `{}`,
		`"5"`:             `{}`,
		`{"a":`:           `{}`,
		`"not json"`:      `{}`,
	} {
		assert.JSONEq(t, want, string(argsObject(json.RawMessage(in))), "%q", in)
	}
}
