package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// The fast recurrence's block kernel (rows held in registers through a block: gdnJob.run) changes no bits: a
// prefill, a taped verify, a tree (stepped node by node) and its kept path, and a decode step give the same
// logits and taps with it as step by step, on hybrid targets whose Gated DeltaNet heads hold 64 and 128 values
// (the kernel's two shapes), 4-bit quantized. Not parallel: it sets useGDNRun.
func TestGDNBlockKernelChangesNoBits(t *testing.T) {
	for _, wide := range []int{4, 8} {
		if vecmath.GDNRunRows(16*wide) == 0 {
			t.Skipf("the CPU lacks AVX-512: the Gated DeltaNet block kernel for %d-value rows does not run here", 16*wide)
		}
		tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 41, Wide: wide, Quant: &quant.Spec{Bits: 4, GroupSize: 64}})
		tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2, Kernels: kernel.ModeFast})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tg.Close() })
		run := func() [][]float32 {
			s, err := tg.NewSession(t.Context(), []int{0, 2})
			require.NoError(t, err)
			defer s.Close()
			var out [][]float32
			keep := func(res ports.ForwardResult) {
				out = append(out, res.Logits)
				taps, _, _, err := res.Taps.(ports.HostTaps).Host()
				require.NoError(t, err)
				out = append(out, append([]float32(nil), taps...))
			}
			prompt := make([]ports.Token, 40)
			for i := range prompt {
				prompt[i] = ports.Token(1 + (i*5)%60)
			}
			res, err := s.Forward(t.Context(), prompt, ports.ForwardOptions{Rows: 2, Logits: true, Taps: true})
			require.NoError(t, err)
			keep(res)
			res, err = s.Forward(t.Context(), []ports.Token{3, 9, 27, 17, 51, 33, 2}, ports.ForwardOptions{Rows: 7, Logits: true, Taps: true, RecordTape: true})
			require.NoError(t, err)
			keep(res)
			tv := s.(ports.TreeVerifier)
			// A chain of three, a sibling at the first slot, a child of that sibling: stretches of 3, 1 and 1.
			res, err = tv.ForwardTree(t.Context(), []ports.Token{5, 6, 7, 8, 10, 11}, []int{-1, 0, 1, 2, 0, 4}, ports.ForwardOptions{Logits: true, Taps: true})
			require.NoError(t, err)
			keep(res)
			kept, err := tv.KeepPath(t.Context(), []int{0, 4, 5})
			require.NoError(t, err)
			taps, _, _, err := kept.(ports.HostTaps).Host()
			require.NoError(t, err)
			out = append(out, append([]float32(nil), taps...))
			res, err = s.Forward(t.Context(), []ports.Token{12}, ports.ForwardOptions{Rows: 1, Logits: true, Taps: true})
			require.NoError(t, err)
			keep(res)
			return out
		}
		useGDNRun = false
		want := run()
		useGDNRun = true
		got := run()
		require.Len(t, got, len(want))
		for i := range want {
			require.Len(t, got[i], len(want[i]), "wide %d output %d", wide, i)
			for j, v := range got[i] {
				require.Equal(t, math.Float32bits(want[i][j]), math.Float32bits(v), "wide %d output %d value %d", wide, i, j)
			}
		}
	}
}
