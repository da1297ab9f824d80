package serve

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/app/models"
)

// TestE2EKV8Lossless serves the bundled demo with --kv-bits 8 and checks that speculation stays lossless
// within the mode: greedy answers decoded speculatively, alone and four at a time in batched rounds, cold and
// from the prefix cache, all equal the plain (block size 1) answer.
func TestE2EKV8Lossless(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the real demo models; skipped with -short")
	}
	leakCheck(t)
	m, serve, client := serveDemo(t, 8, ServeConfig{MaxConcurrency: 4, QueueSize: 8, PrefixCacheBytes: 64 << 20, PrefixCacheEvery: 8})
	require.Equal(t, 8, m.KVBits)
	p := openai.ChatCompletionNewParams{Model: openai.ChatModel(m.Name), Messages: userMsg("Write a Go function that sums a slice."),
		MaxTokens: openai.Int(24), Temperature: openai.Float(0)}
	plain, err := client.Chat.Completions.New(t.Context(), p, option.WithJSONSet("block_size", 1))
	require.NoError(t, err)
	want := plain.Choices[0].Message.Content
	require.NotEmpty(t, want)

	spec, err := client.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	assert.Equal(t, want, spec.Choices[0].Message.Content, "alone")
	assert.Positive(t, specOf(t, spec.Usage.RawJSON()).Drafted, "the drafter must be in use")

	got := make([]string, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			opts := []option.RequestOption{}
			if i > 0 {
				opts = append(opts, option.WithJSONSet("block_size", 1+2*i))
			}
			r, err := client.Chat.Completions.New(t.Context(), p, opts...)
			if err == nil {
				got[i] = r.Choices[0].Message.Content
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		assert.Equal(t, want, got[i], "member %d of a batch", i)
	}
	assert.Positive(t, serve.PrefixCacheStats().Hits, "later requests restored the 8-bit prefix from the cache")
}

// serveDemo loads the bundled demo target and drafter (2 threads, kvBits as --kv-bits) behind the OpenAI API
// with cfg, and returns the models, the Serve and a client of the server, all closed when t ends.
func serveDemo(t *testing.T, kvBits int, cfg ServeConfig) (*models.Models, *Serve, openai.Client) {
	t.Helper()
	root := filepath.Join("..", "..")
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: filepath.Join(root, models.DemoTargetDir),
		Draft: filepath.Join(root, models.DemoDrafterDir), Threads: 2, KVBits: kvBits}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	serve, err := NewServe(cfg, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, serve.SetEngine(EngineFromModels(m)))
	srv := httptest.NewServer(oaiapi.New(serve, oaiapi.Options{Log: zerolog.Nop()}))
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
	return m, serve, client
}
