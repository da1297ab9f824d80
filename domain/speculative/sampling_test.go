package speculative

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// TestSampledGenerationMatchesTargetDistribution runs many seeded generations at temperature > 0 under both
// verifications and compares the joint distribution of the first three generated tokens with the exact one
// computed from the toy model (chi-square, threshold chiSquareCritical at the 0.999 quantile, fixed seeds).
// Tokens 1 and 2 come from speculative rounds (one round of block 3, two rounds of block 2, or whatever the
// adaptive policy picks), so a biased acceptance, residual or match rule shows up here. Every run has its
// own seed: under VerifyMatch one seed always gives one output, so the distribution is over seeds.
func TestSampledGenerationMatchesTargetDistribution(t *testing.T) {
	const vocab = 6
	runs := 24000
	if testing.Short() {
		runs = 6000
	}
	sampling := ports.SamplingParams{Temperature: 1}
	mcfg := portfake.Config{Vocab: vocab, Sharpness: 3, Tape: true, Seed: 11}
	model := portfake.MustNew(mcfg)
	prompt := []ports.Token{1, 4, 2}
	cases := []struct {
		name     string
		bs       int
		adaptive bool
		params   ports.SamplingParams
		propose  func(seed uint64) portfake.Proposer
	}{
		{"plain decoding", 1, false, sampling, nil},
		{"greedy drafts block 3", 3, false, sampling, func(uint64) portfake.Proposer { return portfake.Perfect(model) }},
		{"random drafts block 2", 2, false, sampling, func(s uint64) portfake.Proposer { return portfake.RandomTokens(vocab, s) }},
		{"sampled drafts general q block 3", 3, false, sampling, func(s uint64) portfake.Proposer {
			return portfake.Sampled(model, ports.SamplingParams{Temperature: 2}, s)
		}},
		{"top-k target with sampled drafts", 3, false, ports.SamplingParams{Temperature: 0.8, TopK: 3}, func(s uint64) portfake.Proposer {
			return portfake.Sampled(model, ports.SamplingParams{Temperature: 1.5}, s)
		}},
		{"adaptive policy up to block 4", 4, true, ports.SamplingParams{Temperature: 0.7}, func(uint64) portfake.Proposer {
			return portfake.MatchThenDiverge(model, 1)
		}},
		// A proposal restricted to a few candidates (q = 0 elsewhere), as DFlash2's selector draws.
		{"candidate-restricted drafts block 3", 3, false, sampling, func(s uint64) portfake.Proposer {
			return portfake.Sampled(model, ports.SamplingParams{Temperature: 1.5, TopK: 2}, s)
		}},
		// Trees (under VerifyMatch; VerifyResidual verifies chains with the same drafts).
		{"tree of 6 over block 3", 3, false, sampling, func(uint64) portfake.Proposer { return portfake.Ranked(model, 3, 1, 0) }},
		{"adaptive with trees up to 8", 4, true, ports.SamplingParams{Temperature: 0.7}, func(uint64) portfake.Proposer {
			return portfake.Ranked(model, 2, 1)
		}},
	}
	trees := map[string]TreeConfig{"tree of 6 over block 3": {Budget: 6, Width: 3}, "adaptive with trees up to 8": {Budget: 8, Width: 2}}
	for _, verify := range []Verification{VerifyResidual, VerifyMatch} {
		for _, c := range cases {
			t.Run(verify.String()+"/"+c.name, func(t *testing.T) {
				exact := exactJoint(t, model, prompt, c.params, vocab)
				counts := make([]float64, len(exact))
				accepted := 0
				var dr *portfake.Drafter
				if c.propose != nil {
					var err error
					dr, err = portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, Propose: c.propose(99)})
					require.NoError(t, err)
				}
				cfg := Config{BlockSize: c.bs, Adaptive: c.adaptive, MaxTokens: 3, Sampling: c.params, Verify: verify, Tree: trees[c.name]}
				if c.adaptive {
					cfg.Policy.Memory = NewPolicyMemory() // shared by the runs, so later ones speculate from the start
				}
				clock := portfake.NewClock(time.Microsecond)
				for run := range runs {
					dec, err := New(cfg, clock, portfake.NewRand(12345+uint64(run)))
					require.NoError(t, err)
					var ds ports.DraftSession
					var taps []int
					if dr != nil {
						ds, err = dr.NewSession(t.Context())
						require.NoError(t, err)
						taps = dr.TapLayers()
					}
					sess, err := model.NewSession(t.Context(), taps)
					require.NoError(t, err)
					res, err := dec.Generate(t.Context(), sess, ds, prompt, func([]ports.Token) error { return nil })
					require.NoError(t, err)
					require.Len(t, res.Tokens, 3)
					counts[int(res.Tokens[0])*vocab*vocab+int(res.Tokens[1])*vocab+int(res.Tokens[2])]++
					accepted += res.Stats.Accepted()
					require.NoError(t, sess.Close())
				}
				expected := make([]float64, len(exact))
				for i, p := range exact {
					expected[i] = p * float64(runs)
				}
				stat, df := chiSquare(counts, expected)
				t.Logf("chi2 = %.1f (df %d, critical %.1f), accepted drafts %d", stat, df, chiSquareCritical(df), accepted)
				assert.Less(t, stat, chiSquareCritical(df))
				if c.bs > 1 && c.name != "random drafts block 2" {
					assert.Positive(t, accepted, "the drafts should sometimes be accepted, or the test exercises nothing")
				}
			})
		}
	}
}

// exactJoint returns P(x0, x1, x2 | prompt) from the model's distributions, indexed x0·V²+x1·V+x2.
func exactJoint(t *testing.T, m *portfake.Model, prompt []ports.Token, s ports.SamplingParams, vocab int) []float64 {
	t.Helper()
	out := make([]float64, vocab*vocab*vocab)
	d0, err := m.Dist(prompt, s)
	require.NoError(t, err)
	for a := range vocab {
		h1 := append(append([]ports.Token(nil), prompt...), ports.Token(a))
		d1, err := m.Dist(h1, s)
		require.NoError(t, err)
		for b := range vocab {
			d2, err := m.Dist(append(h1, ports.Token(b)), s)
			require.NoError(t, err)
			for c := range vocab {
				out[a*vocab*vocab+b*vocab+c] = d0.Prob(ports.Token(a)) * d1.Prob(ports.Token(b)) * d2.Prob(ports.Token(c))
			}
		}
	}
	return out
}
