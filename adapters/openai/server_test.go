package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// scripted is a ports.Generator that emits fixed events and returns a fixed result or error.
type scripted struct {
	events []ports.GenerateEvent
	res    ports.GenerateResult
	err    error // returned after the events
	ready  bool
	got    ports.GenerateRequest
}

func (s *scripted) Models() []ports.ModelCard {
	return []ports.ModelCard{{ID: "toy", Created: 1700000000, OwnedBy: "higgs"}}
}

func (s *scripted) Ready() bool { return s.ready }

func (s *scripted) Generate(_ context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	s.got = req
	for _, ev := range s.events {
		if err := emit(ev); err != nil {
			return s.res, err
		}
	}
	return s.res, s.err
}

var goldenResult = ports.GenerateResult{Model: "toy", PromptTokens: 5, CompletionTokens: 7, CachedTokens: 3, FinishReason: "stop",
	Spec: ports.SpecUsage{Rounds: 3, PlainSteps: 2, Drafted: 9, Accepted: 4, Tau: 7.0 / 3, AcceptedPerPosition: []int{2, 1, 1},
		BlockSize: 4, BlockSizes: []ports.BlockSizeUse{{BlockSize: 4, Rounds: 3}},
		Policy: &ports.PolicyUsage{Mode: "speculative", Reason: "fixed block size 4: the adaptive policy is off"}},
	Content: "Hello, world!\n", Reasoning: "hmm"}

func newTestServer(gen ports.Generator) *Server {
	return New(gen, Options{Log: zerolog.Nop(), Now: func() time.Time { return time.Unix(1700000000, 0) },
		NewID: func() string { return "test" }})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	assert.Equal(t, string(want), string(got), "transcript differs from %s (go test -update rewrites it)", path)
}

func TestGoldenTranscripts(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	events := []ports.GenerateEvent{{Reasoning: "hmm"}, {Content: "Hello, "}, {Content: "world!\n"}}
	cases := []struct {
		name   string
		path   string
		body   string
		events []ports.GenerateEvent
		err    error
	}{
		{"chat_stream_usage", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, events, nil},
		{"chat_stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, events[1:], nil},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, events, nil},
		{"completion_stream_usage", "/v1/completions", `{"prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`, events[1:], nil},
		{"completion", "/v1/completions", `{"prompt":"hi"}`, events[1:], nil},
		{"chat_stream_error_midway", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, events[1:2], errors.New("engine exploded")},
		{"chat_stream_busy", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, nil, ports.ErrBusy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := goldenResult
			if c.path == "/v1/completions" {
				res.Reasoning = ""
			}
			gen := &scripted{events: c.events, res: res, err: c.err, ready: true}
			rec := httptest.NewRecorder()
			newTestServer(gen).ServeHTTP(rec, localRequest("POST", c.path, strings.NewReader(c.body)))
			var buf bytes.Buffer
			buf.WriteString(rec.Result().Status + "\n")
			for _, h := range []string{"Content-Type", "Retry-After", "Cache-Control"} {
				if v := rec.Header().Get(h); v != "" {
					buf.WriteString(h + ": " + v + "\n")
				}
			}
			buf.WriteString("\n")
			buf.Write(rec.Body.Bytes())
			golden(t, c.name, buf.Bytes())
		})
	}
}

func TestHealthLoading(t *testing.T) {
	gen := &scripted{}
	s := newTestServer(gen)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("GET", "/health", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.JSONEq(t, `{"status":"loading"}`, rec.Body.String())
	gen.ready = true
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("GET", "/health", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
}

// failingWriter fails every write after the first n bytes, like a client that went away.
type failingWriter struct {
	http.ResponseWriter
	n      int
	failed int // writes refused
}

// Unwrap lets http.ResponseController reach the recorder's Flush, as it reaches a real connection's.
func (w *failingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.n <= 0 {
		w.failed++
		return 0, errors.New("broken pipe")
	}
	w.n -= len(b)
	return len(b), nil
}

// stubborn is a Generator that keeps emitting after emit fails and records what each emit returned.
type stubborn struct {
	modelsOnly
	errs []error
}

func (g *stubborn) Generate(_ context.Context, _ ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	var first error
	for _, c := range []string{"a", "b", "c"} {
		err := emit(ports.GenerateEvent{Content: c})
		g.errs = append(g.errs, err)
		if first == nil {
			first = err
		}
	}
	return goldenResult, first
}

// When the client goes away mid-stream, emit reports the failed write (so the generator stops), the handler
// writes nothing more to the dead connection, and the disconnect is not logged as a server error.
func TestStreamWriteFailureStopsGeneration(t *testing.T) {
	gen := &stubborn{modelsOnly: modelsOnly{id: "toy"}}
	w := &failingWriter{ResponseWriter: httptest.NewRecorder(), n: 1}
	var logs bytes.Buffer
	s := New(gen, Options{Log: zerolog.New(&logs)})
	s.ServeHTTP(w, localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"x","stream":true}`)))
	require.Len(t, gen.errs, 3)
	assert.NoError(t, gen.errs[0], "the first event fits")
	for i, err := range gen.errs[1:] {
		require.Error(t, err, "emit %d after the failed write", i+1)
		assert.Contains(t, err.Error(), "broken pipe")
	}
	assert.Equal(t, 1, w.failed, "nothing more (events, error event, [DONE]) written to a dead connection")
	assert.NotContains(t, logs.String(), `"level":"error"`)
}

// parseSSE splits a transcript into its data payloads, failing on anything that is not a data line or the
// blank line ending an event.
func parseSSE(t testing.TB, body []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	expectBlank := false
	for sc.Scan() {
		line := sc.Text()
		if expectBlank {
			if line != "" {
				t.Fatalf("event not followed by a blank line: %q", line)
			}
			expectBlank = false
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not a data line: %q", line)
		}
		out = append(out, data)
		expectBlank = true
	}
	return out
}

// FuzzSSEWriter streams arbitrary text pieces and checks the transcript is well-formed SSE whose deltas
// add up to the text, ending with [DONE].
func FuzzSSEWriter(f *testing.F) {
	f.Add("hello", "\n\ndata: [DONE]\n\n", "\r\x00\u2028é")
	f.Add("", "a", "")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		// A Generator only emits whole UTF-8 characters (the stream decoder holds partial ones back).
		pieces := []string{a, b, c}
		var evs []ports.GenerateEvent
		want := ""
		for _, p := range pieces {
			p = strings.ToValidUTF8(p, "\uFFFD")
			want += p
			evs = append(evs, ports.GenerateEvent{Content: p})
		}
		res := goldenResult
		res.Reasoning = ""
		gen := &scripted{events: evs, res: res, ready: true}
		rec := httptest.NewRecorder()
		newTestServer(gen).ServeHTTP(rec, localRequest("POST", "/v1/chat/completions",
			strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"stream":true}`)))
		data := parseSSE(t, rec.Body.Bytes())
		if len(data) == 0 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("stream does not end with [DONE]: %q", data)
		}
		var got strings.Builder
		for _, d := range data[:len(data)-1] {
			var ch ChatChunk
			if err := json.Unmarshal([]byte(d), &ch); err != nil {
				t.Fatalf("event is not a chunk: %v: %q", err, d)
			}
			for _, c := range ch.Choices {
				if c.Delta.Content != nil {
					got.WriteString(*c.Delta.Content)
				}
			}
		}
		if got.String() != want {
			t.Fatalf("deltas add up to %q, want %q", got.String(), want)
		}
	})
}

func TestMetricsEndpoint(t *testing.T) {
	gen := &scripted{res: goldenResult, ready: true}
	s := newTestServer(gen)
	s.ServeHTTP(httptest.NewRecorder(), localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"x"}`)))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		"higgs_spec_decode_num_drafts_total 3", "higgs_decode_plain_steps_total 2", "higgs_spec_decode_num_draft_tokens_total 9",
		"higgs_spec_decode_num_accepted_tokens_total 4", `higgs_spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1`,
		"higgs_prompt_tokens_total 5", "higgs_generation_tokens_total 7",
	} {
		assert.Contains(t, string(body), want)
	}
}

// TestSharedRegistry gives one registry to the hosts of two APIs: the second must not panic (MustRegister
// did), and both count into the same series.
func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	gen := &scripted{res: goldenResult, ready: true}
	var servers []*Server
	for range 2 {
		require.NotPanics(t, func() {
			servers = append(servers, New(gen, Options{Log: zerolog.Nop(), Host: httpapi.New(gen, httpapi.Options{Registry: reg})}))
		})
	}
	for _, s := range servers {
		s.ServeHTTP(httptest.NewRecorder(), localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"x"}`)))
	}
	rec := httptest.NewRecorder()
	servers[1].ServeHTTP(rec, localRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	assert.Contains(t, body, "higgs_prompt_tokens_total 10")
	assert.Contains(t, body, `higgs_requests_total{endpoint="POST /v1/completions",status="200"} 2`)
}

func TestModelIDWithSlash(t *testing.T) {
	gen := &modelsOnly{id: "Qwen/Qwen3-4B"}
	s := newTestServer(gen)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("GET", "/v1/models/Qwen/Qwen3-4B", nil))
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.JSONEq(t, `{"id":"Qwen/Qwen3-4B","object":"model","created":0,"owned_by":"higgs"}`, rec.Body.String())
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("POST", "/v1/models/Qwen/Qwen3-4B", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

type modelsOnly struct{ id string }

func (m *modelsOnly) Models() []ports.ModelCard {
	return []ports.ModelCard{{ID: m.id, OwnedBy: "higgs"}}
}
func (m *modelsOnly) Generate(context.Context, ports.GenerateRequest, func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	return ports.GenerateResult{}, errors.New("not used")
}

func TestNoHTMLEscaping(t *testing.T) {
	gen := &scripted{events: []ports.GenerateEvent{{Content: "a<b>&c"}}, res: goldenResult, ready: true}
	rec := httptest.NewRecorder()
	newTestServer(gen).ServeHTTP(rec, localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"x","stream":true}`)))
	assert.Contains(t, rec.Body.String(), `"text":"a<b>&c"`)
}

// panicking is a Generator whose Generate panics, like a backend bug.
type panicking struct{ modelsOnly }

func (p *panicking) Generate(context.Context, ports.GenerateRequest, func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	panic("index out of range [7] with length 3")
}

// A panic in a handler becomes a 500 in OpenAI's shape, the metrics count it as a 500, and the server keeps
// answering.
func TestHandlerPanicIsA500(t *testing.T) {
	s := newTestServer(&panicking{modelsOnly{id: "toy"}})
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"x"}`)))
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.JSONEq(t, `{"error":{"message":"internal server error","type":"server_error","param":null,"code":"internal_error"}}`,
		rec.Body.String())
	assert.NotContains(t, rec.Body.String(), "index out of range", "panic details stay in the log")

	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("GET", "/metrics", nil))
	assert.Contains(t, rec.Body.String(), `higgs_requests_total{endpoint="POST /v1/completions",status="500"} 1`)
	assert.NotContains(t, rec.Body.String(), `higgs_requests_total{endpoint="POST /v1/completions",status="200"}`)
}

// cachingGen is scripted with a prefix cache account.
type cachingGen struct {
	scripted
	stats ports.PrefixCacheStats
}

func (c *cachingGen) PrefixCacheStats() ports.PrefixCacheStats { return c.stats }

// The prefix cache's account is exported as the higgs_prefix_cache_* series when the generator has one.
func TestPrefixCacheMetrics(t *testing.T) {
	g := &cachingGen{scripted: scripted{ready: true}, stats: ports.PrefixCacheStats{Hits: 4, Misses: 2, CachedTokens: 1500,
		Evictions: 1, Entries: 3, Bytes: 123456, Budget: 1 << 30}}
	s := newTestServer(g)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, line := range []string{"higgs_prefix_cache_hits_total 4", "higgs_prefix_cache_misses_total 2",
		"higgs_prefix_cache_cached_tokens_total 1500", "higgs_prefix_cache_evictions_total 1",
		"higgs_prefix_cache_entries 3", "higgs_prefix_cache_bytes 123456", "higgs_prefix_cache_budget_bytes 1.073741824e+09"} {
		assert.Contains(t, body, line+"\n")
	}
	rec = httptest.NewRecorder()
	newTestServer(&scripted{ready: true}).ServeHTTP(rec, localRequest("GET", "/metrics", nil))
	assert.NotContains(t, rec.Body.String(), "higgs_prefix_cache", "a generator without a cache exports no cache series")
}
