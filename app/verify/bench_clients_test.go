package verify

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// TestBenchClients: bench --clients reports one row per client count, speculation off and on, with the
// aggregate rate, inter-token latencies in order (p50 ≤ p95 ≤ the worst client's p95), the batch the rounds
// had (every client in each forward of plain decoding, which never waits), scaling against one client, and
// the existing figures beside it; bad counts are refused.
func TestBenchClients(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 8}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 9, Taps: []int{0, 2}, Mask: 60, BlockSize: 4}))
	o := BenchOptions{Prompts: testPrompts, MaxTokens: 6, Repeats: 1, Warmup: 0, NoEOS: true,
		Clients: &ClientsOptions{Clients: []int{1, 3}, PrefillChunk: 2}}
	res, err := Bench(t.Context(), m, o)
	require.NoError(t, err)
	assert.Positive(t, res.AR.TokensPerS, "the existing figures are still there")
	require.Len(t, res.Clients, 2)
	require.NotNil(t, res.ClientsBatch)
	for i, n := range []int{1, 3} {
		r := res.Clients[i]
		assert.Equal(t, n, r.Clients)
		for _, f := range []BenchClientsFigure{r.AR, r.Spec} {
			assert.Positive(t, f.TokensPerS)
			assert.Equal(t, 6*n, f.Tokens, "every client generated its tokens")
			assert.Equal(t, 1, f.Runs)
			assert.Positive(t, f.P50ITLMs)
			assert.LessOrEqual(t, f.P50ITLMs, f.P95ITLMs)
			assert.LessOrEqual(t, f.P95ITLMs, f.WorstP95ITLMs)
			assert.Positive(t, f.Scaling)
			assert.GreaterOrEqual(t, f.MeanBatch, 1.0)
			assert.LessOrEqual(t, f.MeanBatch, float64(n))
		}
		assert.Equal(t, 4, r.Spec.BlockSize)
		assert.Positive(t, r.Spec.Tau, "the fixed block speculated")
		assert.Zero(t, r.AR.Tau)
		assert.InDelta(t, r.Spec.TokensPerS/r.AR.TokensPerS, r.Speedup, 1e-9)
	}
	assert.Equal(t, 1.0, res.Clients[0].AR.Scaling)
	assert.Equal(t, 1.0, res.Clients[0].AR.MeanBatch)

	o.Clients = &ClientsOptions{Clients: []int{0}}
	_, err = Bench(t.Context(), m, o)
	assert.ErrorIs(t, err, ErrBadInput)
	assert.ErrorContains(t, err, "--clients 0")
}
