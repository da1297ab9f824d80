package serve

import (
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	m, serve, client := serveDemo(t, 0, ServeConfig{MaxConcurrency: 4, QueueSize: 8, PrefixCacheBytes: 64 << 20,
		PrefixCacheEvery: 8, TreeBudget: 10, TreeWidth: 3})
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
