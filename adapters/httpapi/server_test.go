package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// bareGen is a Generator without optional abilities.
type bareGen struct{}

func (bareGen) Models() []ports.ModelCard { return nil }
func (bareGen) Generate(context.Context, ports.GenerateRequest, func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	return ports.GenerateResult{}, nil
}

// gen is a Generator with the optional abilities the Server exports (queue depth, prefix cache account).
type gen struct{ bareGen }

func (gen) QueueDepth() int { return 3 }
func (gen) PrefixCacheStats() ports.PrefixCacheStats {
	return ports.PrefixCacheStats{Hits: 2, Misses: 1, Entries: 4, Bytes: 100, Budget: 1000}
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, localRequest("GET", "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return string(body)
}

// TestServerCountsRequests registers routes as an API does and checks higgs_requests_total: by route
// pattern, "other" for what no route matches (or the catch-all "/"), the status written (200 when none
// is), the status MarkStatus sets through the writers an API wraps around the Server's, and the 500 of a
// recovered panic.
func TestServerCountsRequests(t *testing.T) {
	s := New(gen{}, Options{Log: zerolog.Nop()})
	s.Handle("GET /a", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("a")) }))
	s.Handle("POST /b/{id}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	s.Handle("GET /silent", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	s.Handle("GET /gone", Recover(zerolog.Nop(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("started"))
		MarkStatus(w, StatusCancelled)
	}), func(http.ResponseWriter) {}))
	s.Handle("GET /panic", Recover(zerolog.Nop(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("x") }),
		func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) }))
	s.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/a", http.StatusOK},
		{"GET", "/a", http.StatusOK},
		{"POST", "/b/7", http.StatusTeapot},
		{"GET", "/silent", http.StatusOK},
		{"GET", "/gone", http.StatusOK},
		{"GET", "/panic", http.StatusInternalServerError},
		{"GET", "/nowhere", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, localRequest(c.method, c.path, nil))
		assert.Equal(t, c.status, rec.Code, c.path)
	}
	body := scrape(t, s)
	for _, want := range []string{
		`higgs_requests_total{endpoint="GET /a",status="200"} 2`,
		`higgs_requests_total{endpoint="POST /b/{id}",status="418"} 1`,
		`higgs_requests_total{endpoint="GET /silent",status="200"} 1`,
		`higgs_requests_total{endpoint="GET /gone",status="499"} 1`,
		`higgs_requests_total{endpoint="GET /panic",status="500"} 1`,
		`higgs_requests_total{endpoint="other",status="404"} 1`,
		`higgs_request_duration_seconds_count{endpoint="GET /a"} 2`,
	} {
		assert.Contains(t, body, want)
	}
}

// TestMetricsObserve feeds every Observe method and reads the series back from /metrics, with the gauges
// of the generator's optional abilities.
func TestMetricsObserve(t *testing.T) {
	s := New(gen{}, Options{})
	m := s.Metrics()
	m.ObserveTTFT("POST /v1/messages", 30*time.Millisecond)
	m.ObserveResult(ports.GenerateResult{PromptTokens: 5, CompletionTokens: 7,
		Spec: ports.SpecUsage{Rounds: 3, PlainSteps: 2, Drafted: 9, Accepted: 4, AcceptedPerPosition: []int{3, 1}}})
	m.ObserveBatch(2, 9)
	m.ObserveQueueWait(time.Millisecond)
	body := scrape(t, s)
	for _, want := range []string{
		`higgs_time_to_first_token_seconds_count{endpoint="POST /v1/messages"} 1`,
		"higgs_prompt_tokens_total 5", "higgs_generation_tokens_total 7",
		"higgs_spec_decode_num_drafts_total 3", "higgs_decode_plain_steps_total 2",
		"higgs_spec_decode_num_draft_tokens_total 9", "higgs_spec_decode_num_accepted_tokens_total 4",
		`higgs_spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3`,
		`higgs_spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1`,
		"higgs_batch_size_sum 2", "higgs_batch_rows_sum 9", "higgs_queue_wait_seconds_count 1",
		"higgs_queue_depth 3", "higgs_prefix_cache_hits_total 2", "higgs_prefix_cache_misses_total 1",
		"higgs_prefix_cache_entries 4", "higgs_prefix_cache_bytes 100", "higgs_prefix_cache_budget_bytes 1000",
	} {
		assert.Contains(t, body, want)
	}
	// A generator without those abilities exports no such series.
	body = scrape(t, New(bareGen{}, Options{}))
	assert.NotContains(t, body, "higgs_queue_depth")
	assert.NotContains(t, body, "higgs_prefix_cache")
}

// TestSharedRegistry gives one registry to two servers: the second must not panic (MustRegister would), and
// both count into the same series.
func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	var servers []*Server
	for range 2 {
		require.NotPanics(t, func() { servers = append(servers, New(gen{}, Options{Registry: reg})) })
	}
	for _, s := range servers {
		assert.Same(t, reg, s.Registry())
		s.Handle("GET /x", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		s.ServeHTTP(httptest.NewRecorder(), localRequest("GET", "/x", nil))
		s.Metrics().ObserveResult(ports.GenerateResult{PromptTokens: 5})
	}
	body := scrape(t, servers[1])
	assert.Contains(t, body, "higgs_prompt_tokens_total 10")
	assert.Contains(t, body, `higgs_requests_total{endpoint="GET /x",status="200"} 2`)
}

// A wrong method on /metrics is left to the APIs (the OpenAI API answers it in its shape); alone, the mux
// answers it.
func TestMetricsRouteIsGETOnly(t *testing.T) {
	s := New(gen{}, Options{})
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("POST", "/metrics", strings.NewReader("")))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}
