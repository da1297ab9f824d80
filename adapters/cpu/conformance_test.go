package cpu

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// The ports conformance suite on dense, hybrid and quantized hybrid MoE targets.
func TestPortConformance(t *testing.T) {
	for name, f := range map[string]testmodel.TargetSpec{
		"qwen3":             {Family: "qwen3", Seed: 81, Layers: 2, Tied: true},
		"qwen3_5 hybrid":    {Family: "qwen3_5", Seed: 82, Layers: 4, OutputGate: true, PartialRotary: 0.25},
		"qwen3_next moe q4": {Family: "qwen3_next", Seed: 83, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
	} {
		t.Run(name, func(t *testing.T) {
			f.Context = 40
			tg := loadFixture(t, f, 2)
			porttest.SessionSuite{
				Open:      porttest.Sessions(tg),
				Vocab:     testmodel.Vocab,
				TapLayers: []int{f.Layers - 1, 0},
				ReadTaps: func(tp ports.Taps) ([][]float32, error) {
					c, ok := tp.(*Taps)
					if !ok {
						return nil, errors.New("not cpu taps")
					}
					data, rows, width, err := c.Host()
					if err != nil {
						return nil, err
					}
					out := make([][]float32, rows)
					for r := range out {
						out[r] = data[r*width : (r+1)*width]
					}
					return out, nil
				},
				ContextLength: 40,
			}.Run(t)
		})
	}
}

// The end-to-end speculative suite on a dense and a hybrid target with a DFlash drafter whose tap ids
// disagree with its num_target_layers: greedy speculative output equals greedy output for every block size
// and both rollbacks.
func TestSpeculativeConformance(t *testing.T) {
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			tdir, ddir := testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: 1}), testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, NumTargetLayers: 36, Mask: 63})
			tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			d, err := LoadDrafter(t.Context(), ddir, tg, DrafterOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			n := 40
			if testing.Short() {
				n = 16
			}
			accepted := porttest.SpeculativeSuite{Target: tg, Drafter: d, Tokens: n}.Run(t)
			t.Logf("%s: %d draft tokens accepted over the suite", family, accepted)
		})
	}
}

// The prefix-state suite on a dense and a hybrid target with a DFlash drafter, and on a quantized hybrid MoE
// target alone.
func TestPrefixConformance(t *testing.T) {
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			tdir, ddir := testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: 5}), testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 6, Taps: []int{0, 2}, Mask: 63})
			tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			d, err := LoadDrafter(t.Context(), ddir, tg, DrafterOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			porttest.PrefixSuite{Target: tg, Drafter: d, Vocab: tg.Info().VocabSize}.Run(t)
		})
	}
	t.Run("qwen3_next moe q4", func(t *testing.T) {
		f := testmodel.TargetSpec{Family: "qwen3_next", Seed: 83, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: &quant.Spec{Bits: 4, GroupSize: 32}, Context: 64}
		tg := loadFixture(t, f, 2)
		porttest.PrefixSuite{Target: tg, Vocab: testmodel.Vocab}.Run(t)
	})
}
