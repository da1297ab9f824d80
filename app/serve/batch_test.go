package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/anthropic"
	"github.com/higgs-go/higgs/adapters/httpapi"
	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// batchMetrics records what Serve reports for /metrics.
type batchMetrics struct {
	mu      sync.Mutex
	batches []int
	waits   []time.Duration
}

func (m *batchMetrics) ObserveBatch(sequences, _ int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches = append(m.batches, sequences)
}

func (m *batchMetrics) ObserveQueueWait(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waits = append(m.waits, d)
}

func (m *batchMetrics) largest() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, b := range m.batches {
		n = max(n, b)
	}
	return n
}

var _ EngineMetrics = (*httpapi.Metrics)(nil)

// mixedDemoRequests are eight requests of different prompts, lengths and parameters: greedy and seeded
// sampling at T 0.7, plain decoding, the drafter's block and a short one.
func mixedDemoRequests() []ports.GenerateRequest {
	prompts := []string{"func (s *Server) ", "package main\n\nimport (", "// Sum returns", "type Config struct {\n",
		"for i := range ", "if err != nil {", "func main() {\n\tfmt.", "var ("}
	var out []ports.GenerateRequest
	for i, p := range prompts {
		r := ports.GenerateRequest{ID: fmt.Sprintf("r%d", i), Prompt: p, MaxTokens: 8 + 4*(i%4), BlockSize: []int{0, 1, 4, 0}[i%4]}
		if i%2 == 1 {
			seed := uint64(40 + i)
			r.Seed = &seed
			r.Sampling = ports.SamplingParams{Temperature: 0.7, TopP: 1}
		}
		out = append(out, r)
	}
	return out
}

// TestE2EConcurrentClientsEqualSolo: eight clients of mixed prompts, lengths and parameters (greedy and
// seeded, with and without the drafter), arriving at random times, are decoded together in shared rounds
// on the demo models (CPU backend), and each gets exactly the text it gets alone; with fixed block sizes
// its τ equals its solo τ too.
func TestE2EConcurrentClientsEqualSolo(t *testing.T) {
	m := loadDemo(t, 0)
	for _, adaptive := range []bool{false, true} {
		t.Run(fmt.Sprintf("adaptive=%t", adaptive), func(t *testing.T) {
			serve, err := NewServe(ServeConfig{Adaptive: adaptive, MaxConcurrency: 8, QueueSize: 8, PrefillChunk: 3}, zerolog.Nop())
			require.NoError(t, err)
			metrics := &batchMetrics{}
			serve.SetMetrics(metrics)
			require.NoError(t, serve.SetEngine(EngineFromModels(m)))
			reqs := mixedDemoRequests()
			solo := make([]ports.GenerateResult, len(reqs))
			for i, r := range reqs {
				solo[i], err = serve.Generate(t.Context(), r, nil)
				require.NoError(t, err)
			}
			assert.Equal(t, 1, metrics.largest(), "one at a time: every round serves one sequence")

			rng := rand.New(rand.NewPCG(17, 1))
			delays := make([]time.Duration, len(reqs))
			for i := range delays {
				delays[i] = time.Duration(rng.IntN(40)) * time.Millisecond
			}
			got := make([]ports.GenerateResult, len(reqs))
			errs := make([]error, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Go(func() {
					time.Sleep(delays[i])
					got[i], errs[i] = serve.Generate(t.Context(), r, nil)
				})
			}
			wg.Wait()
			for i := range reqs {
				require.NoError(t, errs[i], "request %d", i)
				assert.Equal(t, solo[i].Content, got[i].Content, "request %d (%+v): batched text differs from solo", i, reqs[i])
				assert.Equal(t, solo[i].CompletionTokens, got[i].CompletionTokens, "request %d", i)
				if !adaptive {
					assert.Equal(t, solo[i].Spec.Tau, got[i].Spec.Tau, "request %d: τ", i)
					assert.Equal(t, solo[i].Spec.Rounds, got[i].Spec.Rounds, "request %d: rounds", i)
				}
			}
			assert.GreaterOrEqual(t, metrics.largest(), 2, "concurrent requests shared rounds")
			metrics.mu.Lock()
			assert.Len(t, metrics.waits, 2*len(reqs), "every request reports its queue wait")
			metrics.mu.Unlock()
		})
	}
}

// TestMemoryAdmission: a request whose KV cache and state can never fit the memory budget is refused with a
// client error naming the limit; one that does not fit now waits for the running one to finish, then runs.
func TestMemoryAdmission(t *testing.T) {
	eng, tg := srvEngine(4096, 2*time.Millisecond, true)
	tg.Price = portfake.Price{PerPosition: 1000}
	// 30 prompt tokens + 40 generated + a block of 4: 74 000 bytes; two do not fit in 100 000.
	serve, err := NewServe(ServeConfig{BlockSize: 4, MaxConcurrency: 4, QueueSize: 4, MemoryBudget: 100_000}, zerolog.Nop())
	require.NoError(t, err)
	metrics := &batchMetrics{}
	serve.SetMetrics(metrics)
	require.NoError(t, serve.SetEngine(eng))

	big := ports.GenerateRequest{Prompt: "abcdefghij", MaxTokens: 200}
	_, err = serve.Generate(t.Context(), big, nil)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "max_tokens", re.Param)
	assert.Contains(t, re.Message, "memory budget of 100000 bytes (--memory-budget-bytes)")
	assert.ErrorIs(t, err, ports.ErrInvalidRequest)

	req := ports.GenerateRequest{Prompt: "abcdefghijabcdefghijabcdefghij", MaxTokens: 40}
	l := serve.engine.Load()
	first := make(chan error, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		_, err := serve.Generate(t.Context(), req, func(ports.GenerateEvent) error {
			once.Do(func() { close(started) })
			return nil
		})
		first <- err
	}()
	<-started
	second := make(chan error, 1)
	go func() {
		_, err := serve.Generate(t.Context(), req, nil)
		second <- err
	}()
	require.Eventually(t, func() bool { return l.budget.Waiting() == 1 }, 5*time.Second, time.Millisecond,
		"the second request waits for memory")
	select {
	case err := <-first:
		// The first may finish just as the second queues; then the second must still complete.
		require.NoError(t, err)
	case err := <-second:
		t.Fatalf("the second request ran beside the first: %v", err)
	}
	require.NoError(t, <-second)
	assert.Zero(t, l.budget.Used(), "every reservation given back")

	// A cancelled waiter leaves the queue and reserves nothing.
	ctx, cancel := context.WithCancel(t.Context())
	release, err := l.budget.Reserve(t.Context(), 90_000)
	require.NoError(t, err)
	go func() {
		require.Eventually(t, func() bool { return l.budget.Waiting() == 1 }, 5*time.Second, time.Millisecond)
		cancel()
	}()
	_, err = serve.Generate(ctx, req, nil)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	release()
	assert.Zero(t, l.budget.Used())
}

// TestMetricsShowBatchAndQueueWait: with the HTTP server's metrics as Serve's (as higgsd wires them), /metrics
// carries each round's batch size and rows and each request's queue wait.
func TestMetricsShowBatchAndQueueWait(t *testing.T) {
	leakCheck(t)
	eng, _ := srvEngine(4096, 0, false)
	serve, err := NewServe(ServeConfig{BlockSize: 4, MaxConcurrency: 4, QueueSize: 4}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, serve.SetEngine(eng))
	host := httpapi.New(serve, httpapi.Options{Log: zerolog.Nop()})
	oaiapi.New(serve, oaiapi.Options{Log: zerolog.Nop(), Host: host})
	anthropic.New(serve, anthropic.Options{Host: host, Log: zerolog.Nop()})
	serve.SetMetrics(host.Metrics())
	srv := httptest.NewServer(host)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	resp, err := hc.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"abc","max_tokens":5}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = hc.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	text := string(body)
	for _, want := range []string{`higgs_batch_size_bucket{le="1"}`, "higgs_batch_size_count", "higgs_batch_rows_sum",
		"higgs_queue_wait_seconds_count 1"} {
		assert.Contains(t, text, want)
	}
}
