package cpu

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// hostRows reads CPU taps as rows.
func hostRows(tp ports.Taps) ([][]float32, error) {
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
}

// The batched-forward suite on dense, hybrid and MoE targets, float and 4-bit, with the exact and the fast
// kernels: every item bit-identical to its solo Forward.
func TestBatchConformance(t *testing.T) {
	q4 := &quant.Spec{Bits: 4, GroupSize: 32}
	for name, c := range map[string]struct {
		f    testmodel.TargetSpec
		mode kernel.Mode
	}{
		"qwen3 f32":              {f: testmodel.TargetSpec{Family: "qwen3", Seed: 91, Layers: 2, Tied: true}},
		"qwen3 q4 fast":          {f: testmodel.TargetSpec{Family: "qwen3", Seed: 92, Layers: 2, Quant: q4}, mode: kernel.ModeFast},
		"qwen3_next hybrid f32":  {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 93, Layers: 4}},
		"qwen3_5 hybrid gated":   {f: testmodel.TargetSpec{Family: "qwen3_5", Seed: 94, Layers: 4, OutputGate: true, PartialRotary: 0.25}},
		"qwen3_next moe q4":      {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 95, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: q4}},
		"qwen3_next moe q4 fast": {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 95, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: q4}, mode: kernel.ModeFast},
		"qwen3_5_moe per-expert": {f: testmodel.TargetSpec{Family: "qwen3_5_moe", Seed: 96, Layers: 4, MoE: true, NormTopK: true}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c.f.Context = 64
			tg, err := Load(context.Background(), testmodel.Target(t, c.f), LoadOptions{Threads: 2, Kernels: c.mode})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			porttest.BatchSuite{Target: tg, TapLayers: []int{c.f.Layers - 1, 0}, ReadTaps: hostRows, ContextLength: 64}.Run(t)
		})
	}
}
