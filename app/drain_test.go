package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/app/serve"
)

// The drain tests run the real runner over the fake engine with both APIs on one listener, and send each API
// a streamed and a non-streamed generation: one lifecycle must cover all four.

// drainCall is one generation request of the matrix: an API, streamed or not.
type drainCall struct {
	name, path, body string
	stream           bool
}

func drainCalls(maxTokens int) []drainCall {
	var calls []drainCall
	for _, stream := range []bool{false, true} {
		calls = append(calls,
			drainCall{"openai", "/v1/chat/completions", fmt.Sprintf(
				`{"model":"toy","messages":[{"role":"user","content":"x"}],"max_tokens":%d,"block_size":1,"stream":%v}`, maxTokens, stream), stream},
			drainCall{"anthropic", "/v1/messages", fmt.Sprintf(
				`{"model":"toy","messages":[{"role":"user","content":"x"}],"max_tokens":%d,"block_size":1,"stream":%v}`, maxTokens, stream), stream})
	}
	return calls
}

func (c drainCall) String() string { return fmt.Sprintf("%s stream=%v", c.name, c.stream) }

// drainAnswer is what a client got.
type drainAnswer struct {
	status     int
	retryAfter string
	body       string
	err        error
}

func sendCall(hc *http.Client, url string, c drainCall) drainAnswer {
	resp, err := hc.Post(url+c.path, "application/json", strings.NewReader(c.body))
	if err != nil {
		return drainAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return drainAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b), err: err}
}

// startDrainRun runs the real Server as higgsd wires it (both APIs on one host) over the fake engine, loaded
// at once, with its log in logs.
func startDrainRun(t *testing.T, shutdown, delay time.Duration) (*runHarness, *strings.Builder) {
	t.Helper()
	logs := &strings.Builder{}
	log := zerolog.New(&syncWriter{w: logs})
	cfg := DefaultConfig()
	cfg.Port = 0
	cfg.ShutdownTimeout = shutdown
	eng, target := srvEngine(4096, delay, true)
	h := &runHarness{addr: make(chan net.Addr, 1), done: make(chan error, 1), target: target,
		hc: &http.Client{Transport: &http.Transport{}}}
	load := func(context.Context, func(done, total int64)) (serve.Engine, func() error, error) {
		return eng, func() error { h.closed.Add(1); return nil }, nil
	}
	svc, err := ProvideFleet(cfg, func(ModelSpec) LoadFunc { return load }, zerolog.Nop())
	require.NoError(t, err)
	host := ProvideHTTP(cfg, svc, log)
	api := ProvideAPI(cfg, svc, svc.Events(), svc, host, nil, log)
	srv := NewServer(cfg, svc, host, api, ProvideResponses(api), ProvideMessages(cfg, svc, host, nil, log), log)
	srv.OnListen = func(a net.Addr) { h.addr <- a }
	srv.Progress = func(int64, int64) {}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		h.hc.CloseIdleConnections()
	})
	require.Eventually(t, func() bool { return h.status(t, "/health") == http.StatusOK }, 5*time.Second, 5*time.Millisecond)
	return h, logs
}

// inFlight sends every call and waits until all are generating.
func inFlight(t *testing.T, h *runHarness, calls []drainCall) []chan drainAnswer {
	t.Helper()
	answers := make([]chan drainAnswer, len(calls))
	for i, c := range calls {
		answers[i] = make(chan drainAnswer, 1)
		go func() { answers[i] <- sendCall(h.hc, h.url(t), c) }()
	}
	require.Eventually(t, func() bool { return h.target.Open.Load() == int64(len(calls)) }, 10*time.Second, time.Millisecond,
		"every request decoding")
	return answers
}

// expectRefusals checks that new work on both APIs, streamed or not, is refused while the server drains: 503,
// Retry-After, each API's error shape; and that /health says draining.
func expectRefusals(t *testing.T, h *runHarness) {
	t.Helper()
	probe := &http.Client{Transport: &http.Transport{}}
	defer probe.CloseIdleConnections()
	var health string
	require.Eventually(t, func() bool {
		resp, err := probe.Get(h.url(t) + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		health = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable
	}, 5*time.Second, time.Millisecond)
	assert.JSONEq(t, `{"status":"draining"}`, health)
	for _, c := range drainCalls(5) {
		a := sendCall(probe, h.url(t), c)
		require.NoError(t, a.err, c.String())
		assert.Equal(t, http.StatusServiceUnavailable, a.status, "%s: no new work while draining", c)
		assert.Equal(t, "5", a.retryAfter, c.String())
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type string `json:"type"`
				Code string `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(a.body), &body), "%s: %s", c, a.body)
		if c.name == "openai" {
			assert.Equal(t, "shutting_down", body.Error.Code, "%s: %s", c, a.body)
		} else {
			assert.Equal(t, "error", body.Type, "%s: %s", c, a.body)
			assert.Equal(t, "overloaded_error", body.Error.Type, "%s: %s", c, a.body)
		}
	}
}

// lastEvents is a stream's last n events (blank-line separated), trimmed.
func lastEvents(body string, n int) []string {
	ev := strings.Split(strings.TrimSpace(body), "\n\n")
	return ev[max(0, len(ev)-n):]
}

// Requests in flight when shutdown starts finish within the deadline with their normal ending, on both APIs,
// streamed or not, while new ones are refused; Run then returns nil and logs that nothing was cut.
func TestRunDrainsBothAPIs(t *testing.T) {
	leakCheck(t)
	h, logs := startDrainRun(t, 30*time.Second, 3*time.Millisecond)
	calls := drainCalls(150)
	answers := inFlight(t, h, calls)
	h.cancel()
	expectRefusals(t, h)
	for i, c := range calls {
		a := <-answers[i]
		require.NoError(t, a.err, c.String())
		assert.Equal(t, http.StatusOK, a.status, "%s: %s", c, a.body)
		switch {
		case c.name == "openai" && c.stream:
			last := lastEvents(a.body, 2)
			assert.Contains(t, last[0], `"finish_reason":"length"`, c.String())
			assert.Equal(t, "data: [DONE]", last[1], c.String())
		case c.name == "openai":
			assert.Contains(t, a.body, `"finish_reason":"length"`, c.String())
		case c.stream:
			last := lastEvents(a.body, 2)
			assert.Contains(t, last[0], `"stop_reason":"max_tokens"`, c.String())
			assert.Equal(t, "event: message_stop\ndata: {\"type\":\"message_stop\"}", last[1], c.String())
		default:
			assert.Contains(t, a.body, `"stop_reason":"max_tokens"`, c.String())
		}
		assert.NotContains(t, a.body, "shut down", c.String())
	}
	select {
	case err := <-h.done:
		require.NoError(t, err, "nothing was cut: exit status 0")
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	assert.Regexp(t, `"level":"info","in_flight":4,"finished":4,"cut":0,"unended":0,"refused":4,"took":[^,]+,"message":"drained: every request in flight finished"`,
		logs.String())
}

// Requests still running at the deadline end with their API's terminal event (OpenAI: an error chunk then
// [DONE]; Anthropic: an `error` event) or, not streamed, a 503 in the API's shape; Run returns ErrCut and
// logs the counts.
func TestRunCutsBothAPIsAtTheDeadline(t *testing.T) {
	leakCheck(t)
	const deadline = 1500 * time.Millisecond
	h, logs := startDrainRun(t, deadline, 3*time.Millisecond)
	calls := drainCalls(3000)
	answers := inFlight(t, h, calls)
	start := time.Now()
	h.cancel()
	expectRefusals(t, h)
	for i, c := range calls {
		a := <-answers[i]
		require.NoError(t, a.err, c.String())
		switch {
		case c.name == "openai" && c.stream:
			assert.Equal(t, http.StatusOK, a.status, c.String())
			last := lastEvents(a.body, 2)
			assert.JSONEq(t, `{"error":{"message":"the server shut down before the request finished; retry it","type":"server_error","param":null,"code":"shutting_down"}}`,
				strings.TrimPrefix(last[0], "data: "), c.String())
			assert.Equal(t, "data: [DONE]", last[1], c.String())
		case c.name == "openai":
			assert.Equal(t, http.StatusServiceUnavailable, a.status, c.String())
			assert.Equal(t, "5", a.retryAfter, c.String())
			assert.JSONEq(t, `{"error":{"message":"the server shut down before the request finished; retry it","type":"server_error","param":null,"code":"shutting_down"}}`,
				a.body, c.String())
		case c.stream:
			assert.Equal(t, http.StatusOK, a.status, c.String())
			last := strings.SplitN(lastEvents(a.body, 1)[0], "\n", 2)
			require.Len(t, last, 2, "%s: %s", c, a.body)
			assert.Equal(t, "event: error", last[0], c.String())
			assert.Contains(t, last[1], `"error":{"type":"api_error","message":"the server shut down before the request finished; retry it"}`, c.String())
			assert.NotContains(t, a.body, "message_stop", c.String())
		default:
			assert.Equal(t, http.StatusServiceUnavailable, a.status, c.String())
			assert.Equal(t, "5", a.retryAfter, c.String())
			assert.Contains(t, a.body, `"type":"error","error":{"type":"api_error","message":"the server shut down before the request finished; retry it"}`, c.String())
		}
	}
	select {
	case err := <-h.done:
		require.ErrorIs(t, err, ErrCut)
		assert.ErrorContains(t, err, "4 of 4")
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	assert.Less(t, time.Since(start), deadline+3*time.Second, "cut at the deadline")
	assert.Zero(t, h.target.Open.Load(), "the cut generations freed their sessions")
	assert.Regexp(t, `"level":"warn","in_flight":4,"finished":0,"cut":4,"unended":0,"refused":4,"took":[^,]+,"message":"drained: requests still running at the deadline were cut`,
		logs.String())
	assert.Equal(t, 4, strings.Count(logs.String(), "request cut: still running at the shutdown deadline"))
	assert.NotContains(t, logs.String(), `"level":"error"`)
}
