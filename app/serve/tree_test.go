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

// TestE2ETreesLossless serves the bundled demo with tree verification (--tree-budget, the policy off so that
// every speculative round verifies a tree) and checks that greedy answers equal the plain (block size 1)
// answer: alone, four at a time in shared rounds (each tree's forward on its own), from the prefix cache,
// and with logprobs (whose decorator verifies chains); the usage reports the tree rounds.
func TestE2ETreesLossless(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the real demo models; skipped with -short")
	}
	leakCheck(t)
	root := filepath.Join("..", "..")
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: filepath.Join(root, models.DemoTargetDir),
		Draft: filepath.Join(root, models.DemoDrafterDir), Threads: 2}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	serve, err := NewServe(ServeConfig{MaxConcurrency: 4, QueueSize: 8, PrefixCacheBytes: 64 << 20, PrefixCacheEvery: 8,
		TreeBudget: 10, TreeWidth: 3}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, serve.SetEngine(EngineFromModels(m)))
	srv := httptest.NewServer(oaiapi.New(serve, oaiapi.Options{Log: zerolog.Nop()}))
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
	p := openai.ChatCompletionNewParams{Model: openai.ChatModel(m.Name), Messages: userMsg("Write a Go function that reverses a string."),
		MaxTokens: openai.Int(24), Temperature: openai.Float(0)}
	plain, err := client.Chat.Completions.New(t.Context(), p, option.WithJSONSet("block_size", 1))
	require.NoError(t, err)
	want := plain.Choices[0].Message.Content
	require.NotEmpty(t, want)

	spec, err := client.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	assert.Equal(t, want, spec.Choices[0].Message.Content, "alone")
	su := specOf(t, spec.Usage.RawJSON())
	assert.Positive(t, su.TreeRounds, "the rounds verified trees")
	assert.Equal(t, su.Rounds, su.TreeRounds, "every speculative round verified a tree")
	assert.LessOrEqual(t, su.TreeNodes, 10*su.TreeRounds)

	withLogprobs := p
	withLogprobs.Logprobs = openai.Bool(true)
	lp, err := client.Chat.Completions.New(t.Context(), withLogprobs)
	require.NoError(t, err)
	assert.Equal(t, want, lp.Choices[0].Message.Content, "with logprobs (chains)")
	assert.Zero(t, specOf(t, lp.Usage.RawJSON()).TreeRounds, "logprobs verify chains")

	got := make([]string, 4)
	trees := make([]int, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			r, err := client.Chat.Completions.New(t.Context(), p)
			if err == nil {
				got[i] = r.Choices[0].Message.Content
				trees[i] = specOf(t, r.Usage.RawJSON()).TreeRounds
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		assert.Equal(t, want, got[i], "member %d of a batch", i)
		assert.Positive(t, trees[i], "member %d verified trees in the shared rounds", i)
	}
	assert.Positive(t, serve.PrefixCacheStats().Hits, "later requests restored the prefix from the cache")
}
