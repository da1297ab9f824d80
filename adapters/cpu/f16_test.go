package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// TestF16TargetMatchesF32: a target stored as F16 (kept half precision by the loader) and the same values
// stored as F32 (--symmetric makes every float exact in f16) give bit-identical logits for a prefill, a
// decode step and a 5-row verify, in both kernel modes: the f16 kernels compute the widened weights' bits.
func TestF16TargetMatchesF32(t *testing.T) {
	ctx := t.Context()
	for _, family := range []string{"qwen3_next", "qwen3"} {
		h := testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: 37, Layers: 2, F16: true, Symmetric: true})
		f := testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: 37, Layers: 2, Symmetric: true})
		for _, kernels := range []string{"exact", "fast"} {
			logits := func(dir string) [][]float32 {
				opts := LoadOptions{Threads: 2}
				if kernels == "fast" {
					opts.Kernels = kernel.ModeFast
				}
				tg, err := Load(ctx, dir, opts)
				require.NoError(t, err)
				defer tg.Close()
				s, err := tg.NewSession(ctx, nil)
				require.NoError(t, err)
				defer s.Close()
				var out [][]float32
				for _, block := range [][]ports.Token{{1, 2, 3, 4, 5, 6, 7}, {8}, {9, 10, 11, 12, 13}} {
					fr, err := s.Forward(ctx, block, ports.ForwardOptions{Logits: true})
					require.NoError(t, err)
					out = append(out, fr.Logits)
				}
				return out
			}
			a, b := logits(h), logits(f)
			for i := range a {
				require.Len(t, a[i], len(b[i]))
				for j := range a[i] {
					require.Equal(t, math.Float32bits(b[i][j]), math.Float32bits(a[i][j]), "%s %s block %d logit %d", family, kernels, i, j)
				}
			}
		}
	}
}
