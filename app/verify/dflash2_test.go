package verify

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// TestSpeculativeSamplingDistributionDFlash2 is the seeded statistical test at T > 0 with a DFlash2 drafter,
// whose selector draws its proposals from its candidates' softmax (a candidate-restricted q, reported per
// slot): speculative sampling's first DistTokens tokens have plain sampling's distribution (marginals and
// joint, chi-square homogeneity as in TestSpeculativeSamplingDistribution).
func TestSpeculativeSamplingDistributionDFlash2(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test (~1 s) skipped in -short mode")
	}
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 6, Vocab: 64, EmbedScale: 4}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 7, Taps: []int{0, 3}, Mask: 61, BlockSize: 4, DFlash2: true}))
	dt, err := distributionTest(t.Context(), m, LosslessOptions{Prompts: [][]ports.Token{{5, 6}}, Temperature: 1.0,
		Seed: 11, Samples: 400, NoEOS: true}, 4)
	require.NoError(t, err)
	t.Logf("worst: chi2 %.2f, dof %d, p %.3g; joint %+v; positions %+v", dt.Chi2, dt.DoF, dt.PValue, dt.Joint, dt.Positions)
	assert.True(t, dt.Pass)
	for j, p := range dt.Positions {
		assert.Greater(t, p.DoF, 3, "position %d: the test must have some power (several populated cells)", j)
	}
}

// At T > 0 a DFlash2 drafter is asked for sampled proposals (ports.SamplingDrafter) and some are accepted,
// so the candidate-restricted acceptance ratio is really exercised; the seeded run is reproducible.
func TestDFlash2SampledGenerationReproducible(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 6, Vocab: 64, EmbedScale: 4}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 7, Taps: []int{0, 3}, Mask: 61, BlockSize: 4, DFlash2: true}))
	ds, err := m.Drafter.NewSession(t.Context())
	require.NoError(t, err)
	_, ok := ds.(ports.SamplingDrafter)
	require.NoError(t, ds.Close())
	require.True(t, ok, "the CPU draft session samples")
	o := GenerateOptions{Request: generation.Request{Prompt: []ports.Token{5, 6}, MaxTokens: 48, NoEOS: true, BlockSize: 4, Sampling: ports.SamplingParams{Temperature: 0.7}, Seed: 3}, Speculative: true}
	a, err := Generate(t.Context(), m, o)
	require.NoError(t, err)
	b, err := Generate(t.Context(), m, o)
	require.NoError(t, err)
	assert.Equal(t, a.Tokens, b.Tokens)
	assert.Positive(t, a.Stats.Accepted, "sampled DFlash2 drafts are accepted sometimes")
	t.Logf("accepted %d of %d drafted", a.Stats.Accepted, a.Stats.Drafted)
}
