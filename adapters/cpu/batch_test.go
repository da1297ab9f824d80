package cpu

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
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

// The batched draft suite with DFlash and DFlash2 drafters (greedy and sampled, blocks below and above the configured size) on
// a dense and a hybrid target: every item bit-identical to its solo Draft / DraftSampled.
func TestBatchDraftConformance(t *testing.T) {
	for name, c := range map[string]struct {
		family string
		v2     bool
		opts   DrafterOptions
	}{
		"qwen3 dflash":       {family: "qwen3"},
		"qwen3_next dflash2": {family: "qwen3_next", v2: true},
		"qwen3 dflash2":      {family: "qwen3", v2: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tdir := testmodel.Synth(t, synth.TargetSpec{Family: c.family, Seed: 11})
			ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 12, Taps: []int{0, 2, 3}, Mask: 63, Nested: c.v2, DFlash2: c.v2})
			tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			d, err := LoadDrafter(t.Context(), ddir, tg, c.opts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			porttest.BatchSuite{Target: tg, Drafter: d, TapLayers: []int{3}, ReadTaps: hostRows, Long: 140}.Run(t)
		})
	}
}

// countdown is a context that reports itself cancelled after n calls of Err (a cancellation that lands
// between two layers of a batched pass).
type countdown struct {
	context.Context
	n int
}

func (c *countdown) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// A batch cancelled between layers fails as a whole, and every session whose state it changed refuses
// further work with a clear error; a session it refused up front stays usable.
func TestForwardBatchCancelledMidway(t *testing.T) {
	tg := loadFixture(t, testmodel.TargetSpec{Family: "qwen3_next", Seed: 97, Layers: 4}, 2)
	a, b, c := openSession(t, tg, nil), openSession(t, tg, nil), openSession(t, tg, nil)
	_, err := tg.ForwardBatch(&countdown{Context: t.Context(), n: 3}, []ports.BatchItem{
		{Session: a, Tokens: []ports.Token{1, 2, 3}}, {Session: b, Tokens: []ports.Token{4}}, {Session: c, Tokens: []ports.Token{}},
	})
	require.ErrorIs(t, err, context.Canceled)
	for _, s := range []*Session{a, b} {
		_, err := s.Forward(t.Context(), []ports.Token{5}, ports.ForwardOptions{})
		require.Error(t, err)
		require.Contains(t, err.Error(), "unusable after an interrupted forward")
	}
	_, err = c.Forward(t.Context(), []ports.Token{5}, ports.ForwardOptions{})
	require.NoError(t, err, "the refused item's session was never touched")
}
