package app

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app/internal/fakeengine"
	"github.com/higgs-go/higgs/app/serve"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// TestRunFlushesPrefixCacheAtShutdown: with --prefix-cache-dir, the real runner writes what the prefix cache
// holds to the directory once it has drained (the fleet flushes each model as it unloads it, before closing
// its backend), so the next start finds it.
func TestRunFlushesPrefixCacheAtShutdown(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Port = 0
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.PrefixCacheDir = dir
	tg, err := cpu.Load(t.Context(), testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 31, Vocab: fakeengine.ModelVocab}), cpu.LoadOptions{Threads: 1})
	require.NoError(t, err)
	parts := fakeengine.New(4096, 0, true)
	eng := serve.Engine{Target: tg, Tokenizer: parts.Tokenizer, Template: parts.Template, Name: "toy", Identity: "test-weights:run"}
	load := func(ctx context.Context, progress func(done, total int64)) (serve.Engine, func() error, error) {
		return eng, tg.Close, nil
	}
	svc, err := ProvideFleet(cfg, func(ModelSpec) LoadFunc { return load }, zerolog.Nop())
	require.NoError(t, err)
	host := ProvideHTTP(cfg, svc, zerolog.Nop())
	api := oaiapi.New(svc, oaiapi.Options{Log: zerolog.Nop(), Host: host})
	srv := NewServer(cfg, svc, host, api, ProvideResponses(api), ProvideMessages(cfg, svc, host, nil, zerolog.Nop()), zerolog.Nop())
	addr := make(chan net.Addr, 1)
	srv.OnListen = func(a net.Addr) { addr <- a }
	srv.Progress = func(int64, int64) {}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	base := "http://" + (<-addr).String()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	require.Eventually(t, func() bool {
		r, err := hc.Get(base + "/health")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 10*time.Second, 5*time.Millisecond)
	resp, err := hc.Post(base+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"a prompt long enough to cache","max_tokens":3,"block_size":1}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	names, err := filepath.Glob(filepath.Join(dir, "*.hpc"))
	require.NoError(t, err)
	assert.Empty(t, names, "nothing is written while memory has room")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	names, err = filepath.Glob(filepath.Join(dir, "*.hpc"))
	require.NoError(t, err)
	assert.NotEmpty(t, names, "the prefix cache's entries were written at shutdown")
	for _, n := range names {
		st, err := os.Stat(n)
		require.NoError(t, err)
		assert.Positive(t, st.Size())
	}
}
