package mlx

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// TestDFlash2TracesMatchCPU: with a DFlash2 drafter the full speculative loop on MLX produces the CPU
// backend's tokens and per-round blocks (the selector's paths) and acceptance, dense and hybrid targets,
// both rollbacks, blocks 4, 8 and the trained 16; and again with compute_logits' multiplier and soft cap,
// which move the selector's unary scores.
func TestDFlash2TracesMatchCPU(t *testing.T) {
	requireMLX(t)
	capped := func(cfg map[string]any) {
		dc := cfg["dflash_config"].(map[string]any)
		dc["output_multiplier"], dc["final_logit_softcapping"] = 1.3, 2.0
	}
	for _, tc := range []struct {
		name   string
		family string
		edit   []func(map[string]any)
	}{{"qwen3", "qwen3", nil}, {"qwen3_next", "qwen3_next", nil}, {"qwen3_next softcapped", "qwen3_next", []func(map[string]any){capped}}} {
		t.Run(tc.name, func(t *testing.T) {
			cp, mp := loadPairs(t, synth.TargetSpec{Family: tc.family, Seed: 1},
				synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, Mask: 63, Nested: true, DFlash2: true}, tc.edit...)
			require.True(t, mp.drafter.(*Drafter).m.Arch.V2())
			accepted := 0
			for _, prompt := range [][]ports.Token{{5, 9, 13, 2}, {40, 41, 42, 43, 44, 45, 46, 47, 1, 2, 3}} {
				for _, bs := range []int{4, 8, 16} {
					for _, rb := range []porttest.Rollback{porttest.RollbackReplay, porttest.RollbackRecompute} {
						want := generate(t, cp, prompt, bs, rb, 24)
						got := generate(t, mp, prompt, bs, rb, 24)
						require.Equal(t, want.Tokens, got.Tokens, "bs %d %s", bs, rb)
						require.Len(t, got.Rounds, len(want.Rounds))
						for i := range want.Rounds {
							assert.Equal(t, want.Rounds[i].Block, got.Rounds[i].Block, "bs %d round %d", bs, i)
							assert.Equal(t, want.Rounds[i].Accepted, got.Rounds[i].Accepted, "bs %d round %d", bs, i)
							accepted += want.Rounds[i].Accepted
						}
					}
				}
			}
			t.Logf("%d draft tokens accepted", accepted)
		})
	}
}

// The end-to-end speculative suite on MLX with a DFlash2 drafter.
func TestSpeculativeConformanceDFlash2(t *testing.T) {
	requireMLX(t)
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			_, mp := loadPairs(t, synth.TargetSpec{Family: family, Seed: 1},
				synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, Mask: 63, Nested: true, DFlash2: true})
			porttest.SpeculativeSuite{Target: mp.target, Drafter: mp.drafter, Tokens: 24}.Run(t)
		})
	}
}

// A DFlash2 drafter on a bfloat16 target (the experimental half-width mode) drafts: the convolution, soft cap
// and selector reads accept bf16 activations, and the proposals are the float32 pair's wherever the float32
// selector's choice is clear (bf16 rounding may flip a close one, so at least half the slots are asked for).
func TestDFlash2BFloat16Drafts(t *testing.T) {
	requireMLX(t)
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 1})
	ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, Mask: 63, Nested: true, DFlash2: true})
	testmodel.EditConfig(t, ddir, func(cfg map[string]any) { cfg["final_logit_softcapping"] = 3.0 })
	var got [2][]ports.Token
	for i, bf16 := range []bool{false, true} {
		mt, err := Load(t.Context(), tdir, LoadOptions{BFloat16: bf16})
		require.NoError(t, err)
		t.Cleanup(func() { _ = mt.Close() })
		md, err := LoadDrafter(t.Context(), ddir, mt, DrafterOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = md.Close() })
		sess, err := mt.NewSession(t.Context(), md.TapLayers())
		require.NoError(t, err)
		fr, err := sess.Forward(t.Context(), []ports.Token{5, 9, 13, 2, 40, 41}, ports.ForwardOptions{Rows: 1, Taps: true})
		require.NoError(t, err)
		ds, err := md.NewSession(t.Context())
		require.NoError(t, err)
		p, err := ds.Draft(t.Context(), fr.Greedy[0], fr.Taps, 16)
		require.NoError(t, err)
		require.Len(t, p.Tokens, 15)
		for _, tok := range p.Tokens {
			require.True(t, tok >= 0 && tok < 64, "token %d in the vocabulary", tok)
		}
		got[i] = p.Tokens
		require.NoError(t, ds.Close())
		require.NoError(t, sess.Close())
	}
	same := 0
	for i := range got[0] {
		if got[0][i] == got[1][i] {
			same++
		}
	}
	t.Logf("bf16 proposals equal to float32 on %d of %d slots", same, len(got[0]))
	assert.GreaterOrEqual(t, 2*same, len(got[0]), "bf16 drafts mostly as float32 does")
}

// At T > 0 the MLX DFlash2 drafter draws the CPU drafter's tokens from the same candidate distributions (up to
// float rounding) given the same uniforms.
func TestDFlash2SampledMatchesCPU(t *testing.T) {
	requireMLX(t)
	cp, mp := loadPairs(t, synth.TargetSpec{Family: "qwen3_next", Seed: 1},
		synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, Mask: 63, Nested: true, DFlash2: true})
	prompt := []ports.Token{40, 41, 42, 43, 44, 45, 46, 47, 1, 2, 3}
	draw := func(p pair) []ports.Proposal {
		sess, err := p.target.NewSession(t.Context(), p.drafter.TapLayers())
		require.NoError(t, err)
		defer sess.Close()
		fr, err := sess.Forward(t.Context(), prompt, ports.ForwardOptions{Rows: 1, Taps: true})
		require.NoError(t, err)
		ds, err := p.drafter.NewSession(t.Context())
		require.NoError(t, err)
		defer ds.Close()
		sd, ok := ds.(ports.SamplingDrafter)
		require.True(t, ok)
		src := rand.New(rand.NewPCG(7, 7))
		var out []ports.Proposal
		for i := range 8 {
			var c ports.Taps
			if i == 0 {
				c = fr.Taps
			}
			pr, err := sd.DraftSampled(t.Context(), fr.Greedy[0], c, 8, 1.5, src)
			require.NoError(t, err)
			out = append(out, pr)
		}
		return out
	}
	want, got := draw(cp), draw(mp)
	for i := range want {
		assert.Equal(t, want[i].Tokens, got[i].Tokens, "draw %d", i)
		require.Len(t, got[i].Dists, len(want[i].Dists))
		for j := range want[i].Dists {
			w, g := want[i].Dists[j].(*model.CandidateDist), got[i].Dists[j].(*model.CandidateDist)
			assert.Equal(t, w.Tokens, g.Tokens, "draw %d slot %d", i, j+1)
			assert.InDeltaSlice(t, w.Probs, g.Probs, 1e-4, "draw %d slot %d", i, j+1)
		}
	}
}
