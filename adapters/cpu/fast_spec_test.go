package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
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

// In fast mode the loader fuses each MLP's gate and up into one product (loader.Fuse, where the panel form
// runs); the fused target's logits and taps equal, bit for bit, those of the same target with the two
// products run apart, for a 16-row block and for the decode steps after it.
func TestFusedGateUpMatchesSeparate(t *testing.T) {
	for _, bits := range []int{4, 8} {
		spec := &quant.Spec{Bits: bits, GroupSize: 32}
		tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 11, Quant: spec})
		load := func() *Target {
			tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2, Kernels: kernel.ModeFast})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			return tg
		}
		fused, apart := load(), load()
		n := 0
		for i := range apart.m.Layers {
			f := apart.m.Layers[i].MLP
			if f == nil || f.GateUp == nil {
				continue
			}
			n++
			f.Gate, f.Up, f.GateUp = &weight{lin: f.GateUp.pair[0]}, &weight{lin: f.GateUp.pair[1]}, nil
		}
		if n == 0 {
			t.Skipf("q%d: no MLP was fused (the panel form does not run on this CPU)", bits)
		}
		// Read as one matrix, a pair's product is its two products side by side in each row.
		var pair *weight
		for _, ly := range fused.m.Layers {
			if ly.MLP != nil && ly.MLP.GateUp != nil {
				pair = ly.MLP.GateUp
				break
			}
		}
		require.NotNil(t, pair, "q%d: a fused MLP", bits)
		be := ops{pool: fused.pool}
		x := act{randValues(rand.New(rand.NewPCG(7, 8)), 5*pair.pair[0].In, 1), 5}
		requireBits(t, be.Concat(be.Linear(&weight{lin: pair.pair[0]}, x), be.Linear(&weight{lin: pair.pair[1]}, x)).v,
			be.Linear(pair, x).v, fmt.Sprintf("q%d: the pair as one matrix", bits))
		toks := tokensOf(5, 20)
		for i := range toks {
			toks[i] %= ports.Token(fused.m.Arch.Vocab)
		}
		sf, sa := openSession(t, fused, []int{1, 2}), openSession(t, apart, []int{1, 2})
		lf, tf, _ := run(t, sf, toks[:16], true)
		la, ta, _ := run(t, sa, toks[:16], true)
		requireBits(t, la, lf, fmt.Sprintf("q%d: block logits", bits))
		requireBits(t, ta, tf, fmt.Sprintf("q%d: block taps", bits))
		for i := 16; i < len(toks); i++ {
			lf, _, _ = run(t, sf, toks[i:i+1], false)
			la, _, _ = run(t, sa, toks[i:i+1], false)
			requireBits(t, la, lf, fmt.Sprintf("q%d: decode step %d", bits, i))
		}
	}
}
