package cpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports/porttest"
)

// In fast mode (int8-quantized inputs) the products are not the reference's, but verify and decode run the same
// arithmetic row by row, so greedy speculative output still equals greedy plain output, on 4- and 8-bit
// quantized targets and drafters.
func TestSpeculativeConformanceFast(t *testing.T) {
	for _, bits := range []int{4, 8} {
		t.Run(map[int]string{4: "q4", 8: "q8"}[bits], func(t *testing.T) {
			spec := &quant.Spec{Bits: bits, GroupSize: 32}
			tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 11, Quant: spec})
			ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 12, Taps: []int{0, 2, 3}, Mask: 63, Quant: spec})
			tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2, Kernels: kernel.ModeFast})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			d, err := LoadDrafter(t.Context(), ddir, tg, DrafterOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			n := 24
			if testing.Short() {
				n = 12
			}
			accepted := porttest.SpeculativeSuite{Target: tg, Drafter: d, Tokens: n}.Run(t)
			t.Logf("q%d fast: %d draft tokens accepted over the suite", bits, accepted)
		})
	}
}
