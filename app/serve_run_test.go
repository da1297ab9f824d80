package app

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	oaiapi "github.com/higgs-go/higgs/adapters/openai"
)

type runHarness struct {
	addr   chan net.Addr
	done   chan error
	closed atomic.Int64
	target *srvTarget
	cancel context.CancelFunc
	hc     *http.Client
}

// startRun runs the real Server (listener, loader, graceful shutdown) with a loader that waits for release.
func startRun(t *testing.T, shutdown time.Duration, delay time.Duration, release <-chan struct{}) *runHarness {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Port = 0
	cfg.ShutdownTimeout = shutdown
	serve, err := NewServe(cfg.ServeConfig(), zerolog.Nop())
	require.NoError(t, err)
	eng, target := srvEngine(4096, delay, true)
	h := &runHarness{addr: make(chan net.Addr, 1), done: make(chan error, 1), target: target,
		hc: &http.Client{Transport: &http.Transport{}}}
	load := func(ctx context.Context, progress func(done, total int64)) (Engine, func() error, error) {
		progress(0, 10)
		select {
		case <-release:
		case <-ctx.Done():
			return Engine{}, nil, ctx.Err()
		}
		progress(10, 10)
		return eng, func() error { h.closed.Add(1); return nil }, nil
	}
	api := oaiapi.New(serve, oaiapi.Options{Log: zerolog.Nop()})
	srv := NewServer(cfg, serve, api, ProvideMessages(cfg, serve, api, zerolog.Nop()), load, zerolog.Nop())
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
		strings.NewReader(`{"prompt":"x","max_tokens":60,"stream":true,"block_size":1}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan())
	h.cancel()
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
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the shutdown deadline")
	}
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Zero(t, h.target.open.Load(), "the cancelled generation freed its session")
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
