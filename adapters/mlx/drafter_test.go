package mlx

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// The MLX taps are readable on the host (by a drafter on another device, or a reference check).
var _ ports.HostTaps = (*Taps)(nil)

type pair struct {
	target  ports.Target
	drafter ports.Drafter
}

// trace is one greedy speculative generation: its tokens and rounds.
type trace struct {
	Tokens []ports.Token
	Rounds []porttest.Round
}

// generate decodes n tokens with the ports-level speculative loop (porttest.Speculate); bs 1 decodes plainly.
func generate(t *testing.T, p pair, prompt []ports.Token, bs int, rb porttest.Rollback, n int) trace {
	t.Helper()
	if bs == 1 {
		toks, err := porttest.Greedy(t.Context(), p.target, prompt, n)
		require.NoError(t, err)
		return trace{Tokens: toks}
	}
	toks, rounds, err := porttest.Speculate(t.Context(), p.target, p.drafter, prompt, bs, rb, n)
	require.NoError(t, err)
	return trace{toks, rounds}
}

// loadPairs loads a target and drafter on the CPU and on MLX.
func loadPairs(t *testing.T, ts synth.TargetSpec, ds synth.DrafterSpec, edit ...func(cfg map[string]any)) (cpuPair, mlxPair pair) {
	t.Helper()
	tdir, ddir := testmodel.Synth(t, ts), testmodel.SynthDrafter(t, ds)
	if len(edit) > 0 {
		testmodel.EditConfig(t, ddir, func(cfg map[string]any) {
			for _, e := range edit {
				e(cfg)
			}
		})
	}
	ct, err := cpu.Load(t.Context(), tdir, cpu.LoadOptions{Threads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ct.Close() })
	cd, err := cpu.LoadDrafter(t.Context(), ddir, ct, cpu.DrafterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cd.Close() })
	mt, err := Load(t.Context(), tdir, LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = mt.Close() })
	md, err := LoadDrafter(t.Context(), ddir, mt, DrafterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = md.Close() })
	return pair{ct, cd}, pair{mt, md}
}

// TestDFlashTracesMatchCPU: the full speculative loop on MLX (MLX target + MLX drafter) produces the CPU
// backend's tokens and the same per-round blocks (drafts and acceptance), dense and hybrid, both rollbacks.
func TestDFlashTracesMatchCPU(t *testing.T) {
	requireMLX(t)
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			cp, mp := loadPairs(t, synth.TargetSpec{Family: family, Seed: 1},
				synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, NumTargetLayers: 36, Mask: 63})
			for _, prompt := range [][]ports.Token{{5, 9, 13, 2}, {40, 41, 42, 43, 44, 45, 46, 47, 1, 2, 3}} {
				for _, bs := range []int{4, 8} {
					for _, rb := range []porttest.Rollback{porttest.RollbackReplay, porttest.RollbackRecompute} {
						want := generate(t, cp, prompt, bs, rb, 24)
						got := generate(t, mp, prompt, bs, rb, 24)
						require.Equal(t, want.Tokens, got.Tokens, "bs %d %s", bs, rb)
						require.Len(t, got.Rounds, len(want.Rounds))
						for i := range want.Rounds {
							assert.Equal(t, want.Rounds[i].Block, got.Rounds[i].Block, "round %d", i)
							assert.Equal(t, want.Rounds[i].Accepted, got.Rounds[i].Accepted, "round %d", i)
						}
					}
				}
			}
		})
	}
}

// A YaRN drafter (some Qwen3.6 drafters): MLX traces equal the CPU's, and the scaling matters to them (the plain
// RoPE drafter drafts differently), so the comparison would catch a backend that ignored it.
func TestDFlashYaRNMatchesCPU(t *testing.T) {
	requireMLX(t)
	ts := synth.TargetSpec{Family: "qwen3_next", Seed: 7}
	ds := synth.DrafterSpec{Seed: 8, Taps: []int{1, 3}, Mask: 61, BlockSize: 8}
	yarn := func(cfg map[string]any) {
		cfg["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 64,
			"beta_fast": 8.0}
		cfg["max_position_embeddings"] = 1024
	}
	cp, mp := loadPairs(t, ts, ds, yarn)
	plain, _ := loadPairs(t, ts, ds)
	differs := false
	for _, want := range requireSameTraces(t, cp, mp) {
		base := generate(t, plain, want.prompt, want.bs, porttest.RollbackReplay, 32)
		for i := range min(len(base.Rounds), len(want.res.Rounds)) {
			differs = differs || !slices.Equal(base.Rounds[i].Block, want.res.Rounds[i].Block)
		}
	}
	assert.True(t, differs, "the YaRN drafter drafted exactly like the plain one: the test cannot see the scaling")
}

// Sliding-window drafter layers (causal by default) past their window: MLX traces equal the CPU's.
func TestDFlashSlidingWindowMatchesCPU(t *testing.T) {
	requireMLX(t)
	cp, mp := loadPairs(t, synth.TargetSpec{Family: "qwen3_next", Seed: 5},
		synth.DrafterSpec{Seed: 6, Taps: []int{1, 3}, Mask: 61, BlockSize: 8},
		func(cfg map[string]any) {
			cfg["layer_types"] = []string{"sliding_attention", "full_attention"}
			cfg["sliding_window"] = 5
		})
	require.Equal(t, []int{5, 0}, cp.drafter.(*cpu.Drafter).Arch().SlidingWindows)
	require.Equal(t, []bool{true, false}, mp.drafter.(*Drafter).m.Arch.Causal)
	requireSameTraces(t, cp, mp)
}

// cpuTrace is one CPU generation of requireSameTraces.
type cpuTrace struct {
	prompt []ports.Token
	bs     int
	res    trace
}

// requireSameTraces runs two prompts at block sizes 4 and 8 (32 tokens, tape replay) on both pairs and requires
// the same tokens and the same per-round blocks; it returns the CPU runs.
func requireSameTraces(t *testing.T, cp, mp pair) []cpuTrace {
	t.Helper()
	var out []cpuTrace
	for _, prompt := range [][]ports.Token{{5, 9, 13, 2}, {40, 41, 42, 43, 44, 45, 46, 47, 1, 2, 3}} {
		for _, bs := range []int{4, 8} {
			want := generate(t, cp, prompt, bs, porttest.RollbackReplay, 32)
			got := generate(t, mp, prompt, bs, porttest.RollbackReplay, 32)
			require.Equal(t, want.Tokens, got.Tokens, "bs %d", bs)
			require.Len(t, got.Rounds, len(want.Rounds))
			for i := range want.Rounds {
				assert.Equal(t, want.Rounds[i].Block, got.Rounds[i].Block, "bs %d round %d", bs, i)
			}
			out = append(out, cpuTrace{prompt, bs, want})
		}
	}
	return out
}

// The DraftSession conformance suite on the MLX drafter.
func TestDraftConformance(t *testing.T) {
	requireMLX(t)
	_, mp := loadPairs(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3},
		synth.DrafterSpec{Seed: 4, Taps: []int{1, 3}, Mask: 60, BlockSize: 8})
	porttest.DraftSuite{
		OpenTarget: func(t *testing.T) ports.Session {
			s, err := mp.target.NewSession(t.Context(), mp.drafter.TapLayers())
			require.NoError(t, err)
			return s
		},
		OpenDraft: func(t *testing.T) ports.DraftSession {
			s, err := mp.drafter.NewSession(t.Context())
			require.NoError(t, err)
			return s
		},
		BlockSize:     8,
		Vocab:         64,
		ContextLength: mp.target.Info().ContextLength,
	}.Run(t)
}

// TestAnyBlockSizeMatchesCPU: a Draft call on MLX runs exactly bs slots, below and above the configured block
// size (16), and proposes the CPU drafter's tokens, for both drafter generations.
func TestAnyBlockSizeMatchesCPU(t *testing.T) {
	requireMLX(t)
	ctx := t.Context()
	prompt := []ports.Token{40, 41, 42, 43, 44, 45, 46, 47, 1, 2, 3}
	draft := func(p pair, bs int) []ports.Token {
		sess, err := p.target.NewSession(ctx, p.drafter.TapLayers())
		require.NoError(t, err)
		defer sess.Close()
		fr, err := sess.Forward(ctx, prompt, ports.ForwardOptions{Rows: 1, Taps: true})
		require.NoError(t, err)
		ds, err := p.drafter.NewSession(ctx)
		require.NoError(t, err)
		defer ds.Close()
		pr, err := ds.Draft(ctx, fr.Greedy[0], fr.Taps, bs)
		require.NoError(t, err)
		require.Len(t, pr.Tokens, bs-1)
		assert.Equal(t, len(prompt), ds.Len())
		return pr.Tokens
	}
	for _, v2 := range []bool{false, true} {
		cp, mp := loadPairs(t, synth.TargetSpec{Family: "qwen3_next", Seed: 21},
			synth.DrafterSpec{Seed: 22, Taps: []int{0, 3}, Mask: 63, Nested: v2, DFlash2: v2})
		for _, bs := range []int{2, 4, 8, 16, 17, 24} {
			assert.Equal(t, draft(cp, bs), draft(mp, bs), "DFlash2 %v: block size %d", v2, bs)
		}
	}
}

// TestLoadDrafterRefusesBadDrafters: the MLX drafter resolves its config without the CPU drafter's loader, so
// it must itself refuse every bad checkpoint with a clear error (config incompatible with the target,
// truncated file, misshapen, missing or unexpected tensors).
func TestLoadDrafterRefusesBadDrafters(t *testing.T) {
	requireMLX(t)
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3})
	mt, err := Load(t.Context(), tdir, LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = mt.Close() })
	spec := synth.DrafterSpec{Seed: 4, Taps: []int{1, 3}, Mask: 61, BlockSize: 8}
	for _, tc := range []struct {
		name string
		spec synth.DrafterSpec
		edit func(t *testing.T, dir string)
		want string
	}{
		{name: "tap outside the target", spec: synth.DrafterSpec{Seed: 4, Taps: []int{1, 9}, Mask: 61, BlockSize: 8}, want: "9"},
		{name: "truncated weights", spec: spec, edit: func(t *testing.T, dir string) {
			testmodel.Truncate(t, dir, "model.safetensors")
		}, want: "model.safetensors"},
		{name: "misshapen tensor", spec: spec, edit: func(t *testing.T, dir string) {
			testmodel.RewriteWeights(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == "fc.weight" {
						ts[i].Shape = []int{ts[i].Shape[1], ts[i].Shape[0]}
					}
				}
				return ts
			})
		}, want: "fc.weight"},
		{name: "missing tensor", spec: spec, edit: func(t *testing.T, dir string) {
			testmodel.RewriteWeights(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				return slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return x.Name == "norm.weight" })
			})
		}, want: "norm.weight"},
		{name: "unexpected tensor", spec: spec, edit: func(t *testing.T, dir string) {
			testmodel.RewriteWeights(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				return append(ts, safetensors.Tensor{Name: "layers.0.extra.weight", DType: safetensors.F32, Shape: []int{1},
					Data: make([]byte, 4)})
			})
		}, want: "layers.0.extra.weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := testmodel.SynthDrafter(t, tc.spec)
			if tc.edit != nil {
				tc.edit(t, dir)
			}
			d, err := LoadDrafter(t.Context(), dir, mt, DrafterOptions{})
			require.Error(t, err)
			assert.Nil(t, d)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The end-to-end speculative suite on MLX pairs (dense and hybrid): greedy speculative output equals greedy
// output for every block size and both rollbacks.
func TestSpeculativeConformance(t *testing.T) {
	requireMLX(t)
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			_, mp := loadPairs(t, synth.TargetSpec{Family: family, Seed: 1},
				synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, NumTargetLayers: 36, Mask: 63})
			porttest.SpeculativeSuite{Target: mp.target, Drafter: mp.drafter, Tokens: 24}.Run(t)
		})
	}
}
