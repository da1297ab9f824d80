package app

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/app/internal/fakeengine"
	"github.com/higgs-go/higgs/app/serve"
)

type runHarness struct {
	addr   chan net.Addr
	done   chan error
	closed atomic.Int64
	target *fakeengine.Target
	cancel context.CancelFunc
	hc     *http.Client
}

// startRun runs the real Server (listener, loader, graceful shutdown) with a loader that waits for release.
func startRun(t *testing.T, shutdown time.Duration, delay time.Duration, release <-chan struct{}) *runHarness {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Port = 0
	cfg.ShutdownTimeout = shutdown
	eng, target := srvEngine(4096, delay, true)
	h := &runHarness{addr: make(chan net.Addr, 1), done: make(chan error, 1), target: target,
		hc: &http.Client{Transport: &http.Transport{}}}
	load := func(ctx context.Context, progress func(done, total int64)) (serve.Engine, func() error, error) {
		progress(0, 10)
		select {
		case <-release:
		case <-ctx.Done():
			return serve.Engine{}, nil, ctx.Err()
		}
		progress(10, 10)
		return eng, func() error { h.closed.Add(1); return nil }, nil
	}
	svc, err := ProvideFleet(cfg, func(ModelSpec) LoadFunc { return load }, zerolog.Nop())
	require.NoError(t, err)
	host := ProvideHTTP(cfg, svc, zerolog.Nop())
	api := oaiapi.New(svc, oaiapi.Options{Log: zerolog.Nop(), Host: host})
	srv := NewServer(cfg, svc, host, api, ProvideResponses(api), ProvideMessages(cfg, svc, host, nil, zerolog.Nop()), zerolog.Nop())
	srv.OnListen = func(a net.Addr) { h.addr <- a }
	srv.Progress = func(int64, int64) {}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		h.hc.CloseIdleConnections()
	})
	return h
}

func (h *runHarness) url(t *testing.T) string {
	select {
	case a := <-h.addr:
		u := "http://" + a.String()
		h.addr <- a
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("server did not listen")
	}
	return ""
}

func (h *runHarness) status(t *testing.T, path string) int {
	resp, err := h.hc.Get(h.url(t) + path)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestRunLoadsServesAndShutsDownGracefully(t *testing.T) {
	leakCheck(t)
	release := make(chan struct{})
	h := startRun(t, 5*time.Second, 2*time.Millisecond, release)
	assert.Equal(t, http.StatusServiceUnavailable, h.status(t, "/health"), "listening before loading, 503 while loading")
	close(release)
	require.Eventually(t, func() bool { return h.status(t, "/health") == http.StatusOK }, 5*time.Second, 5*time.Millisecond)

	// A streaming request in flight when shutdown starts finishes normally.
	resp, err := h.hc.Post(h.url(t)+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"x","max_tokens":200,"stream":true,"block_size":1}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan())
	h.cancel()
	// While it drains, the listener stays open: /health answers 503 draining instead of refusing connections.
	probe := &http.Client{Transport: &http.Transport{}}
	defer probe.CloseIdleConnections()
	var health string
	require.Eventually(t, func() bool {
		r, err := probe.Get(h.url(t) + "/health")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		health = string(b)
		return r.StatusCode == http.StatusServiceUnavailable
	}, 5*time.Second, time.Millisecond)
	assert.JSONEq(t, `{"status":"draining"}`, health)
	last := ""
	for sc.Scan() {
		if sc.Text() != "" {
			last = sc.Text()
		}
	}
	assert.Equal(t, "data: [DONE]", last, "in-flight stream must complete during graceful shutdown")
	select {
	case err := <-h.done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	assert.Equal(t, int64(1), h.closed.Load(), "models closed once")
	_, err = h.hc.Get(h.url(t) + "/health")
	assert.Error(t, err, "no new connections after shutdown")
}

func TestRunShutdownCancelsLongRequests(t *testing.T) {
	leakCheck(t)
	release := make(chan struct{})
	close(release)
	h := startRun(t, 50*time.Millisecond, 5*time.Millisecond, release)
	require.Eventually(t, func() bool { return h.status(t, "/health") == http.StatusOK }, 5*time.Second, 5*time.Millisecond)
	resp, err := h.hc.Post(h.url(t)+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"x","max_tokens":3000,"stream":true,"block_size":1}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan())
	start := time.Now()
	h.cancel()
	select {
	case err := <-h.done:
		require.ErrorIs(t, err, ErrCut, "the exit status says a request was cut")
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the shutdown deadline")
	}
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Zero(t, h.target.Open.Load(), "the cancelled generation freed its session")
	for sc.Scan() {
	}
}

func TestRunShutdownWhileLoading(t *testing.T) {
	leakCheck(t)
	h := startRun(t, time.Second, 0, make(chan struct{}))
	assert.Equal(t, http.StatusServiceUnavailable, h.status(t, "/health"))
	h.cancel()
	select {
	case err := <-h.done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	assert.Zero(t, h.closed.Load())
}

func TestExposedWithoutKey(t *testing.T) {
	for _, c := range []struct {
		host, key string
		exposed   bool
	}{
		{"127.0.0.1", "", false}, {"localhost", "", false}, {"::1", "", false}, {"127.0.0.2", "", false},
		{"0.0.0.0", "", true}, {"::", "", true}, {"192.168.1.5", "", true}, {"myhost.lan", "", true},
		{"0.0.0.0", "k", false},
	} {
		cfg := DefaultConfig()
		cfg.Host = c.host
		if c.key != "" {
			cfg.APIKeys = []string{c.key}
		}
		assert.Equal(t, c.exposed, cfg.ExposedWithoutKey(), "%s key %q", c.host, c.key)
	}
}

// A wide bind without a key is warned about at start; the default bind is not.
func TestRunWarnsWideBindWithoutKey(t *testing.T) {
	for _, c := range []struct {
		host string
		warn bool
	}{{"0.0.0.0", true}, {"127.0.0.1", false}} {
		var logs strings.Builder
		cfg := DefaultConfig()
		cfg.Host, cfg.Port = c.host, 0
		log := zerolog.New(&syncWriter{w: &logs})
		load := func(ctx context.Context, _ func(done, total int64)) (serve.Engine, func() error, error) {
			<-ctx.Done()
			return serve.Engine{}, nil, ctx.Err()
		}
		svc, err := ProvideFleet(cfg, func(ModelSpec) LoadFunc { return load }, log)
		require.NoError(t, err)
		host := ProvideHTTP(cfg, svc, log)
		api := oaiapi.New(svc, oaiapi.Options{Log: log, Host: host})
		srv := NewServer(cfg, svc, host, api, ProvideResponses(api), ProvideMessages(cfg, svc, host, nil, log), log)
		listening := make(chan struct{})
		srv.OnListen = func(net.Addr) { close(listening) }
		srv.Progress = func(int64, int64) {}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		<-listening
		cancel()
		<-done
		got := logs.String()
		if c.warn {
			assert.Contains(t, got, `"level":"warn","host":"0.0.0.0","message":"listening beyond this machine without --api-key`)
		} else {
			assert.NotContains(t, got, "without --api-key")
		}
	}
}

// syncWriter serialises writes from the server's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// srvEngine is the serving tests' toy engine as the runner's loader hands it to Serve.
func srvEngine(ctxLen int, delay time.Duration, noEOS bool) (serve.Engine, *fakeengine.Target) {
	p := fakeengine.New(ctxLen, delay, noEOS)
	return serve.Engine{Target: p.Target, Drafter: p.Drafter, Tokenizer: p.Tokenizer, Template: p.Template,
		EOS: p.EOS, Name: "toy", Created: 1700000000}, p.Target
}

// leakCheck fails the test if it leaves goroutines behind.
func leakCheck(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}
