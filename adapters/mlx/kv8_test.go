package mlx

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// kv8Pairs loads a synth target and DFlash drafter with 8-bit KV on the CPU backend (the oracle) and on MLX.
func kv8Pairs(t *testing.T, family string) (cpuPair, mlxPair pair) {
	t.Helper()
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: 1})
	ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, NumTargetLayers: 36, Mask: 63})
	ct, err := cpu.Load(t.Context(), tdir, cpu.LoadOptions{Threads: 1, KVBits: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ct.Close() })
	cd, err := cpu.LoadDrafter(t.Context(), ddir, ct, cpu.DrafterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cd.Close() })
	mt, err := Load(t.Context(), tdir, LoadOptions{KVBits: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = mt.Close() })
	require.Equal(t, 8, mt.KVBits())
	md, err := LoadDrafter(t.Context(), ddir, mt, DrafterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = md.Close() })
	return pair{ct, cd}, pair{mt, md}
}

// With 8-bit KV on MLX, greedy speculative output equals greedy plain output (every block size, both
// rollbacks), and an imported prefix continues as the session it came from.
func TestKV8Conformance(t *testing.T) {
	requireMLX(t)
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			_, mp := kv8Pairs(t, family)
			porttest.SpeculativeSuite{Target: mp.target, Drafter: mp.drafter, Tokens: 24}.Run(t)
			porttest.PrefixSuite{Target: mp.target, Drafter: mp.drafter, Vocab: mp.target.Info().VocabSize, CutTolerance: batchTolerance}.Run(t)
		})
	}
}

// Batched forwards over 8-bit caches agree with solo ones within the batch tolerance.
func TestKV8BatchConformance(t *testing.T) {
	requireMLX(t)
	_, mp := kv8Pairs(t, "qwen3_next")
	porttest.BatchSuite{Target: mp.target, Drafter: mp.drafter, TapLayers: []int{3}, ReadTaps: readTaps, Tolerance: batchTolerance, Long: 40}.Run(t)
}

// MLX's 8-bit KV reads back the CPU backend's values (the same format): logits agree with the CPU's 8-bit
// run to float32 rounding, and both stay within the quantization's error of the full-precision logits.
func TestKV8ParityWithCPU(t *testing.T) {
	requireMLX(t)
	cp, mp := kv8Pairs(t, "qwen3_next")
	prompt := make([]ports.Token, 40)
	for i := range prompt {
		prompt[i] = ports.Token(i*13%60 + 1)
	}
	logits := func(tg ports.Target) []float32 {
		s, err := tg.NewSession(t.Context(), nil)
		require.NoError(t, err)
		defer s.Close()
		r, err := s.Forward(t.Context(), prompt[:30], ports.ForwardOptions{Logits: true})
		require.NoError(t, err)
		out := r.Logits
		for _, tok := range prompt[30:] {
			r, err = s.Forward(t.Context(), []ports.Token{tok}, ports.ForwardOptions{Logits: true})
			require.NoError(t, err)
			out = append(out, r.Logits...)
		}
		return out
	}
	want, got := logits(cp.target), logits(mp.target)
	require.Len(t, got, len(want))
	worst := 0.0
	for i := range want {
		worst = max(worst, math.Abs(float64(want[i]-got[i])))
	}
	t.Logf("max |Δlogit| MLX kv8 vs CPU kv8: %.3g", worst)
	assert.Less(t, worst, 1e-3)
}

// An 8-bit session holds int8 codes and one float32 scale per position and KV head.
func TestKV8SessionHoldsCodes(t *testing.T) {
	requireMLX(t)
	_, mp := kv8Pairs(t, "qwen3")
	tg := mp.target.(*Target)
	ps, err := tg.NewSession(t.Context(), nil)
	require.NoError(t, err)
	defer ps.Close()
	_, err = ps.Forward(t.Context(), []ports.Token{5, 9, 13, 2, 7, 1, 3}, ports.ForwardOptions{})
	require.NoError(t, err)
	a := tg.m.Arch
	s := ps.(*Session)
	require.NoError(t, tg.rt.Do(func() error {
		for _, c := range s.st.kv {
			if c == nil {
				continue
			}
			require.True(t, c.Q8)
			assert.Equal(t, int64(7*a.KVHeads*a.HeadDim), graph.ArrBytes(c.K), "one byte a code")
			assert.Equal(t, int64(7*a.KVHeads*a.HeadDim), graph.ArrBytes(c.V))
			assert.Equal(t, int64(7*a.KVHeads*4), graph.ArrBytes(c.KS), "a float32 scale per position and head")
			assert.Equal(t, int64(7*a.KVHeads*4), graph.ArrBytes(c.VS))
		}
		return nil
	}))
	px, err := s.ExportPrefix(7)
	require.NoError(t, err)
	assert.Equal(t, 8, px.(*Prefix).KVBits(), "the exported state says its format")
	assert.Equal(t, int64(2*7*a.KVHeads*(a.HeadDim+4)*countAttention(a.Kinds)), px.Bytes(), "codes and scales")
	require.NoError(t, s.TrimKV(4))
	require.NoError(t, tg.rt.Do(func() error {
		for _, c := range s.st.kv {
			if c != nil {
				assert.Equal(t, int64(4*a.KVHeads*4), graph.ArrBytes(c.KS), "trimmed scales")
				assert.Equal(t, int64(4*a.KVHeads*a.HeadDim), graph.ArrBytes(c.K), "trimmed codes")
			}
		}
		return nil
	}))
}

// Bits other than 0 and 8 are refused at load.
func TestKVBitsRefusedMLX(t *testing.T) {
	requireMLX(t)
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 3})
	_, err := Load(t.Context(), dir, LoadOptions{KVBits: 4})
	require.ErrorIs(t, err, ErrKVBits)
}

func countAttention(kinds []ports.LayerKind) int {
	n := 0
	for _, k := range kinds {
		if k == ports.LayerAttention {
			n++
		}
	}
	return n
}
