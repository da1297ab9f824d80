package serve

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/higgs-go/higgs/adapters/anthropic"
	"github.com/higgs-go/higgs/adapters/httpapi"
	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	oairesp "github.com/higgs-go/higgs/adapters/openai/responses"
	"github.com/higgs-go/higgs/ports"
)

type harnessOpts struct {
	// apiKey is the SDK client's key and a tenant key; keys more tenant keys, adminKey the operator's.
	apiKey      string
	keys        []string
	adminKey    string
	cacheBytes  int64
	sharedCache bool
	queue       int
	concurrency int
	blockSize   int
	delay       time.Duration
	ctxLen      int
	timeout     time.Duration
	maxBody     int64
	notReady    bool
	panicOn     int64
	noEOS       bool
	adaptive    bool
}

type harness struct {
	t      testing.TB
	srv    *httptest.Server
	serve  *Serve
	engine Engine
	target *srvTarget
	hc     *http.Client
	client openai.Client
}

// newHarness starts the real HTTP adapter over the real Serve use case and the fake engine on a loopback
// listener, with an official OpenAI SDK client pointed at it.
func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.concurrency == 0 {
		o.concurrency = 1
	}
	if o.queue == 0 {
		o.queue = 16
	}
	if o.ctxLen == 0 {
		o.ctxLen = 4096
	}
	serve, err := NewServe(ServeConfig{BlockSize: o.blockSize, Adaptive: o.adaptive, MaxConcurrency: o.concurrency, QueueSize: o.queue,
		PrefixCacheBytes: o.cacheBytes, PrefixCacheEvery: 4, PrefixCacheShared: o.sharedCache}, zerolog.Nop())
	require.NoError(t, err)
	eng, target := srvEngine(o.ctxLen, o.delay, o.noEOS)
	target.PanicOn = o.panicOn
	if !o.notReady {
		require.NoError(t, serve.SetEngine(eng))
	}
	host := httpapi.New(serve, httpapi.Options{Log: zerolog.Nop()})
	var named []httpapi.NamedKey
	for _, k := range append([]string{o.apiKey}, o.keys...) {
		if k != "" {
			named = append(named, httpapi.NamedKey{Key: k, From: "test"})
		}
	}
	keys, err := httpapi.NewKeys(named, o.adminKey)
	require.NoError(t, err)
	oairesp.New(oaiapi.New(serve, oaiapi.Options{Host: host, Keys: keys, MaxBodyBytes: o.maxBody, RequestTimeout: o.timeout,
		Log: zerolog.Nop(), Events: serve.Events(), System: serve}))
	anthropic.New(serve, anthropic.Options{Host: host, Keys: keys, MaxBodyBytes: o.maxBody, RequestTimeout: o.timeout,
		Log: zerolog.Nop()})
	srv := httptest.NewServer(host)
	hc := &http.Client{Transport: &http.Transport{}}
	key := o.apiKey
	if key == "" {
		key = "unused"
	}
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
	h := &harness{t: t, srv: srv, serve: serve, engine: eng, target: target, hc: hc, client: client}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
	})
	return h
}

// do sends a raw request and returns the status, headers and body.
func (h *harness) do(method, path, body string, hdr map[string]string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.srv.URL+path, strings.NewReader(body))
	require.NoError(h.t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.hc.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return resp.StatusCode, resp.Header, b
}

func leakCheck(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// specOf reads higgs' usage.speculative extension from a usage object's raw JSON.
func specOf(t testing.TB, rawUsage string) ports.SpecUsage {
	t.Helper()
	var u struct {
		Speculative *ports.SpecUsage `json:"speculative"`
	}
	require.NoError(t, json.Unmarshal([]byte(rawUsage), &u), rawUsage)
	require.NotNil(t, u.Speculative, "usage has no speculative extension: %s", rawUsage)
	return *u.Speculative
}

// expectedGreedy is the toy model's greedy continuation of a chat prompt, as text, and whether it ended
// with EOS within max tokens.
func (h *harness) expectedGreedy(msgs []ports.ChatMessage, maxTokens int) (string, string) {
	h.t.Helper()
	text, err := srvTemplate{}.Render(msgs, ports.ChatOptions{AddGenerationPrompt: true})
	require.NoError(h.t, err)
	return h.expectedGreedyText(text, maxTokens)
}

func (h *harness) expectedGreedyText(prompt string, maxTokens int) (string, string) {
	h.t.Helper()
	ids := srvTokens(prompt)
	out, err := h.target.GreedyContinuation(ids, maxTokens)
	require.NoError(h.t, err)
	for i, id := range out {
		if id == srvEOS {
			s, err := srvTokenizer{}.Decode(out[:i], true)
			require.NoError(h.t, err)
			return s, "stop"
		}
	}
	s, err := srvTokenizer{}.Decode(out, true)
	require.NoError(h.t, err)
	return s, "length"
}

func userMsg(s string) []openai.ChatCompletionMessageParamUnion {
	return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(s)}
}

func TestE2EChatGreedyMatchesModel(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	ctx := t.Context()
	for _, prompt := range []string{"hello there", "tell me a story", "x"} {
		resp, err := h.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "toy", Messages: userMsg(prompt), MaxTokens: openai.Int(40), Temperature: openai.Float(0)})
		require.NoError(t, err)
		want, finish := h.expectedGreedy([]ports.ChatMessage{{Role: "user", Content: prompt}}, 40)
		require.Len(t, resp.Choices, 1)
		assert.Equal(t, want, resp.Choices[0].Message.Content, "speculative output must equal the target's greedy output")
		assert.Equal(t, finish, resp.Choices[0].FinishReason)
		assert.Equal(t, "chat.completion", string(resp.Object))
		assert.Equal(t, "toy", resp.Model)
		assert.True(t, strings.HasPrefix(resp.ID, "chatcmpl-"))
		assert.Equal(t, resp.Usage.PromptTokens+resp.Usage.CompletionTokens, resp.Usage.TotalTokens)
		assert.Equal(t, int64(len(srvTokens("[user]: "+prompt+"\n[assistant]: "))), resp.Usage.PromptTokens)
		spec := specOf(t, resp.Usage.RawJSON())
		assert.Positive(t, spec.Rounds)
		assert.Positive(t, spec.Drafted)
		assert.GreaterOrEqual(t, spec.Tau, 1.0)
		assert.LessOrEqual(t, spec.Tau, 4.0)
		assert.Len(t, spec.AcceptedPerPosition, 3)
		assert.LessOrEqual(t, spec.Accepted, spec.Drafted)
	}
}

func TestE2EStreamingEqualsNonStreaming(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	ctx := t.Context()
	params := openai.ChatCompletionNewParams{Model: "toy", Messages: userMsg("stream me"), MaxTokens: openai.Int(50),
		Temperature: openai.Float(0.8), Seed: openai.Int(11),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	stream := h.client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var chunks int
	var usageRaw string
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		chunks++
		if len(c.Choices) == 0 && c.Usage.TotalTokens > 0 {
			usageRaw = c.Usage.RawJSON()
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.NotEmpty(t, usageRaw, "include_usage must send a final usage chunk")
	spec := specOf(t, usageRaw)
	assert.Positive(t, spec.Rounds)
	assert.Greater(t, chunks, 3)

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	resp, err := h.client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, resp.Choices[0].Message.Content, acc.Choices[0].Message.Content)
	assert.Equal(t, resp.Choices[0].FinishReason, acc.Choices[0].FinishReason)
	assert.Equal(t, resp.Usage.CompletionTokens, acc.Usage.CompletionTokens)
	assert.Equal(t, specOf(t, resp.Usage.RawJSON()), spec)
}

func TestE2ECompletion(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	ctx := t.Context()
	params := openai.CompletionNewParams{Model: "toy", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon a time")},
		MaxTokens: openai.Int(30), Temperature: openai.Float(0)}
	resp, err := h.client.Completions.New(ctx, params)
	require.NoError(t, err)
	want, finish := h.expectedGreedyText("once upon a time", 30)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, want, resp.Choices[0].Text)
	assert.Equal(t, finish, string(resp.Choices[0].FinishReason))
	assert.Equal(t, "text_completion", string(resp.Object))
	assert.Positive(t, specOf(t, resp.Usage.RawJSON()).Rounds)

	stream := h.client.Completions.NewStreaming(ctx, params, option.WithJSONSet("stream_options", map[string]any{"include_usage": true}))
	var text strings.Builder
	var finishGot, usageRaw string
	for stream.Next() {
		c := stream.Current()
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
			if ch.FinishReason != "" {
				finishGot = string(ch.FinishReason)
			}
		}
		if len(c.Choices) == 0 {
			usageRaw = c.Usage.RawJSON()
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.Equal(t, want, text.String())
	assert.Equal(t, finish, finishGot)
	assert.Equal(t, specOf(t, resp.Usage.RawJSON()), specOf(t, usageRaw))
}

func TestE2ESeedReproduces(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	ctx := t.Context()
	gen := func(seed int64) string {
		resp, err := h.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "toy",
			Messages: userMsg("sample please"), MaxTokens: openai.Int(40), Temperature: openai.Float(1), Seed: openai.Int(seed)})
		require.NoError(t, err)
		return resp.Choices[0].Message.Content
	}
	a, b := gen(42), gen(42)
	assert.Equal(t, a, b, "the same seed must reproduce the output")
	differs := false
	for seed := int64(43); seed < 53 && !differs; seed++ {
		differs = gen(seed) != a
	}
	assert.True(t, differs, "other seeds must be able to change a sampled output")
}

func TestE2EStopStrings(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	ctx := t.Context()
	base := openai.ChatCompletionNewParams{Model: "toy", Messages: userMsg("stop test"), MaxTokens: openai.Int(60), Temperature: openai.Float(0)}
	full, err := h.client.Chat.Completions.New(ctx, base)
	require.NoError(t, err)
	text := full.Choices[0].Message.Content
	require.Greater(t, len(text), 12, "the toy model must say enough for this test: %q", text)
	for _, cut := range []int{0, 3, 9} {
		stop := text[cut : cut+3]
		want := text[:strings.Index(text, stop)]
		p := base
		p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"never-there", stop}}
		resp, err := h.client.Chat.Completions.New(ctx, p)
		require.NoError(t, err)
		assert.Equal(t, want, resp.Choices[0].Message.Content, "stop %q", stop)
		assert.Equal(t, "stop", resp.Choices[0].FinishReason)

		stream := h.client.Chat.Completions.NewStreaming(ctx, p)
		var got strings.Builder
		finish := ""
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				got.WriteString(ch.Delta.Content)
				if ch.FinishReason != "" {
					finish = ch.FinishReason
				}
			}
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		assert.Equal(t, want, got.String(), "streamed, stop %q", stop)
		assert.Equal(t, "stop", finish)
	}
}

func TestE2EBlockSizeOneIsLossless(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	ctx := t.Context()
	p := openai.ChatCompletionNewParams{Model: "toy", Messages: userMsg("block"), MaxTokens: openai.Int(30), Temperature: openai.Float(0)}
	spec, err := h.client.Chat.Completions.New(ctx, p)
	require.NoError(t, err)
	plain, err := h.client.Chat.Completions.New(ctx, p, option.WithJSONSet("block_size", 1))
	require.NoError(t, err)
	assert.Equal(t, spec.Choices[0].Message.Content, plain.Choices[0].Message.Content)
	s := specOf(t, plain.Usage.RawJSON())
	assert.Zero(t, s.Drafted)
	assert.InDelta(t, 1.0, s.Tau, 1e-9)
	two, err := h.client.Chat.Completions.New(ctx, p, option.WithJSONSet("block_size", 2))
	require.NoError(t, err)
	assert.Equal(t, spec.Choices[0].Message.Content, two.Choices[0].Message.Content)
	assert.Len(t, specOf(t, two.Usage.RawJSON()).AcceptedPerPosition, 1)
}

func TestE2EReasoningContent(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	resp, err := h.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "toy",
		Messages: userMsg("think"), MaxTokens: openai.Int(20), Temperature: openai.Float(0)},
		option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": true}))
	require.NoError(t, err)
	var reasoning string
	require.NoError(t, json.Unmarshal([]byte(resp.Choices[0].Message.JSON.ExtraFields["reasoning_content"].Raw()), &reasoning))
	// The template opened a think block and the toy model never closes it: everything is reasoning.
	want, _ := h.expectedGreedyText("[user]: think\n[assistant]: <think>\n", 20)
	assert.Equal(t, strings.TrimLeft(want, "\n"), reasoning)
	assert.Empty(t, resp.Choices[0].Message.Content)
}

// The Responses API gives the thinking as a reasoning item, non-streamed and streamed alike.
func TestE2EResponsesReasoningItem(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	p := responses.ResponseNewParams{Model: "toy", MaxOutputTokens: openai.Int(20), Temperature: openai.Float(0),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("think")}}
	thinking := option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": true})
	want, _ := h.expectedGreedyText("[user]: think\n[assistant]: <think>\n", 20)
	want = strings.TrimLeft(want, "\n")
	r, err := h.client.Responses.New(t.Context(), p, thinking)
	require.NoError(t, err)
	require.Len(t, r.Output, 2, r.RawJSON())
	assert.Equal(t, "reasoning", r.Output[0].Type)
	require.Len(t, r.Output[0].Content, 1)
	assert.Equal(t, want, r.Output[0].Content[0].Text)
	assert.Equal(t, "message", r.Output[1].Type)
	assert.Empty(t, r.OutputText())

	st := h.client.Responses.NewStreaming(t.Context(), p, thinking)
	var deltas, done string
	var types []string
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.reasoning_text.delta":
			deltas += ev.Delta
		case "response.reasoning_text.done":
			done = ev.Text
		}
	}
	require.NoError(t, st.Err())
	assert.Equal(t, want, deltas)
	assert.Equal(t, want, done)
	assert.Equal(t, r.Status == responses.ResponseStatusIncomplete, types[len(types)-1] == "response.incomplete", types)
	assert.Contains(t, []string{"response.completed", "response.incomplete"}, types[len(types)-1])
}

func TestE2EModelsAndHealth(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{notReady: true})
	code, hdr, body := h.do("GET", "/health", "", nil)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.JSONEq(t, `{"status":"loading"}`, string(body))
	assert.Equal(t, "application/json", hdr.Get("Content-Type"))
	code, _, body = h.do("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, code, string(body))
	require.NoError(t, h.serve.SetEngine(h.engine))
	code, _, body = h.do("GET", "/health", "", nil)
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"status":"ok"}`, string(body))

	page, err := h.client.Models.List(t.Context())
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, "toy", page.Data[0].ID)
	m, err := h.client.Models.Get(t.Context(), "toy")
	require.NoError(t, err)
	assert.Equal(t, "toy", m.ID)
	_, err = h.client.Models.Get(t.Context(), "nope")
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
}

func TestE2EAPIKey(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{apiKey: "s3cret"})
	_, err := h.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "toy",
		Messages: userMsg("hi"), MaxTokens: openai.Int(3)})
	require.NoError(t, err)
	_, err = h.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "toy",
		Messages: userMsg("hi"), MaxTokens: openai.Int(3)}, option.WithAPIKey("wrong"))
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	// Health and metrics stay open for probes and scrapers.
	code, _, _ := h.do("GET", "/health", "", nil)
	assert.Equal(t, http.StatusOK, code)
}

func TestE2EMetrics(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{})
	_, err := h.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "toy",
		Messages: userMsg("metrics"), MaxTokens: openai.Int(20), Temperature: openai.Float(0)})
	require.NoError(t, err)
	h.do("POST", "/v1/chat/completions", `{`, nil)
	code, _, body := h.do("GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, code)
	text := string(body)
	for _, want := range []string{
		`higgs_requests_total{endpoint="POST /v1/chat/completions",status="200"} 1`,
		`higgs_requests_total{endpoint="POST /v1/chat/completions",status="400"} 1`,
		`higgs_request_duration_seconds_count{endpoint="POST /v1/chat/completions"} 2`,
		`higgs_time_to_first_token_seconds_count{endpoint="POST /v1/chat/completions"} 1`,
		"higgs_queue_depth 0",
		"higgs_prompt_tokens_total ", "higgs_generation_tokens_total ",
		"higgs_spec_decode_num_drafts_total ", "higgs_spec_decode_num_draft_tokens_total ",
		"higgs_spec_decode_num_accepted_tokens_total ",
		`higgs_spec_decode_num_accepted_tokens_per_pos_total{position="0"}`,
	} {
		assert.Contains(t, text, want)
	}
}

func TestE2EPanicIs500(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{panicOn: 1})
	code, _, body := h.do("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, nil)
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.JSONEq(t, `{"error":{"message":"internal server error","type":"server_error","param":null,"code":"internal_error"}}`, string(body))
	// The engine slot was released by the panicking request.
	code, _, body = h.do("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}`, nil)
	assert.Equal(t, http.StatusOK, code, string(body))
}

func TestE2ETimeout(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{timeout: 60 * time.Millisecond, delay: 10 * time.Millisecond, noEOS: true})
	code, _, body := h.do("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2000}`, nil)
	assert.Equal(t, http.StatusGatewayTimeout, code, string(body))
	assert.Contains(t, string(body), "timeout")
	require.Eventually(t, func() bool { return h.target.Open.Load() == 0 }, 2*time.Second, 5*time.Millisecond)
}

// TestE2ECancelStopsGeneration disconnects a streaming client and checks through the fake target's call
// counts that generation stopped within a round and the engine was freed.
func TestE2ECancelStopsGeneration(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{delay: 5 * time.Millisecond, noEOS: true})
	ctx, cancel := context.WithCancel(t.Context())
	stream := h.client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "toy",
		Messages: userMsg("a long answer"), MaxTokens: openai.Int(3000), Temperature: openai.Float(0)},
		option.WithJSONSet("block_size", 1))
	got := 0
	for got < 5 && stream.Next() {
		got++
	}
	require.Equal(t, 5, got, "stream error: %v", stream.Err())
	atCancel := h.target.Forwards.Load()
	cancel()
	_ = stream.Close()
	require.Eventually(t, func() bool { return h.target.Open.Load() == 0 }, 2*time.Second, time.Millisecond,
		"the session must be closed after the client left")
	after := h.target.Forwards.Load()
	// One round of plain decoding is one Forward; allow the one in flight plus one more.
	assert.LessOrEqual(t, after-atCancel, int64(2), "generation went on after the client disconnected")
	time.Sleep(30 * time.Millisecond)
	assert.Equal(t, after, h.target.Forwards.Load(), "no Forward after the session closed")
	// The engine is free: the next request runs at once.
	code, _, body := h.do("POST", "/v1/completions", `{"prompt":"next","max_tokens":3}`, nil)
	assert.Equal(t, http.StatusOK, code, string(body))
	assert.Zero(t, h.serve.QueueDepth())
}

func TestE2EQueueFull(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{delay: 5 * time.Millisecond, queue: 1, concurrency: 1, noEOS: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	long := openai.ChatCompletionNewParams{Model: "toy", Messages: userMsg("hold the engine"), MaxTokens: openai.Int(3000),
		Temperature: openai.Float(0)}
	running := h.client.Chat.Completions.NewStreaming(ctx, long, option.WithJSONSet("block_size", 1))
	require.True(t, running.Next(), "first request must start: %v", running.Err())
	queued := make(chan error, 1)
	go func() {
		_, err := h.client.Chat.Completions.New(ctx, long)
		queued <- err
	}()
	require.Eventually(t, func() bool { return h.serve.QueueDepth() == 1 }, 2*time.Second, time.Millisecond)
	code, hdr, body := h.do("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, nil)
	assert.Equal(t, http.StatusTooManyRequests, code, string(body))
	assert.Equal(t, "1", hdr.Get("Retry-After"))
	assert.Contains(t, string(body), `"type":"rate_limit_error"`)
	_, err := h.client.Chat.Completions.New(ctx, long, option.WithMaxRetries(0))
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusTooManyRequests, apiErr.StatusCode)
	cancel()
	_ = running.Close()
	qerr := <-queued
	assert.True(t, errors.Is(qerr, context.Canceled), "queued request: %v", qerr)
	require.Eventually(t, func() bool { return h.target.Open.Load() == 0 && h.serve.QueueDepth() == 0 }, 2*time.Second, time.Millisecond)
}

// TestE2EConcurrentClientsMatchSerial serves the same requests one by one, then all at once from several
// clients, and checks the outputs are the same.
func TestE2EConcurrentClientsMatchSerial(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{concurrency: 2, queue: 16})
	type job struct {
		prompt string
		temp   float64
		seed   int64
		stream bool
	}
	var jobs []job
	for i := range 8 {
		jobs = append(jobs, job{prompt: strings.Repeat("ab", i+1), temp: []float64{0, 0.7, 1}[i%3], seed: int64(i), stream: i%2 == 0})
	}
	run := func(j job) (string, error) {
		p := openai.ChatCompletionNewParams{Model: "toy", Messages: userMsg(j.prompt), MaxTokens: openai.Int(40),
			Temperature: openai.Float(j.temp), Seed: openai.Int(j.seed)}
		if !j.stream {
			resp, err := h.client.Chat.Completions.New(t.Context(), p)
			if err != nil {
				return "", err
			}
			return resp.Choices[0].Message.Content, nil
		}
		s := h.client.Chat.Completions.NewStreaming(t.Context(), p)
		var sb strings.Builder
		for s.Next() {
			for _, c := range s.Current().Choices {
				sb.WriteString(c.Delta.Content)
			}
		}
		_ = s.Close()
		return sb.String(), s.Err()
	}
	serial := make([]string, len(jobs))
	for i, j := range jobs {
		out, err := run(j)
		require.NoError(t, err)
		serial[i] = out
	}
	type res struct {
		i   int
		out string
		err error
	}
	results := make(chan res, len(jobs))
	for i, j := range jobs {
		go func() {
			out, err := run(j)
			results <- res{i, out, err}
		}()
	}
	for range jobs {
		r := <-results
		require.NoError(t, r.err)
		assert.Equal(t, serial[r.i], r.out, "job %d", r.i)
	}
}

// TestE2EServerBlockSizeAndAdaptive checks the server-wide speculation settings: a default block size of 2,
// and the adaptive depth policy, both still giving the target's greedy output.
func TestE2EServerBlockSizeAndAdaptive(t *testing.T) {
	leakCheck(t)
	for _, o := range []harnessOpts{{blockSize: 2}, {adaptive: true}, {blockSize: 1}} {
		h := newHarness(t, o)
		resp, err := h.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "toy",
			Messages: userMsg("stop test"), MaxTokens: openai.Int(40), Temperature: openai.Float(0)})
		require.NoError(t, err)
		want, _ := h.expectedGreedy([]ports.ChatMessage{{Role: "user", Content: "stop test"}}, 40)
		assert.Equal(t, want, resp.Choices[0].Message.Content, "%+v", o)
		spec := specOf(t, resp.Usage.RawJSON())
		switch {
		case o.blockSize == 2:
			assert.Len(t, spec.AcceptedPerPosition, 1)
		case o.blockSize == 1:
			assert.Zero(t, spec.Drafted)
		}
	}
}
