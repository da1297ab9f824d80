package cpu

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// readCPUTaps reads a CPU Taps handle's rows.
func readCPUTaps(tp ports.Taps) ([][]float32, error) {
	c, ok := tp.(*Taps)
	if !ok {
		return nil, fmt.Errorf("taps of type %T are not cpu taps", tp)
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

// The tree suite, bit for bit, on dense, hybrid and quantized hybrid MoE targets in both kernel modes with float32 and 8-bit KV
// caches: every node equals the chain forward of its path, KeepPath leaves the chain's state.
func TestTreeConformance(t *testing.T) {
	specs := map[string]testmodel.TargetSpec{
		"qwen3":             {Family: "qwen3", Seed: 84, Layers: 2, Tied: true},
		"qwen3_5 hybrid":    {Family: "qwen3_5", Seed: 85, Layers: 4, OutputGate: true, PartialRotary: 0.25},
		"qwen3_next":        {Family: "qwen3_next", Seed: 86, Layers: 4},
		"qwen3_next moe q4": {Family: "qwen3_next", Seed: 88, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
	}
	for name, f := range specs {
		f.Context = 24
		dir := testmodel.Target(t, f)
		for _, mode := range []kernel.Mode{kernel.ModeExact, kernel.ModeFast} {
			for _, bits := range []int{32, 8} {
				t.Run(fmt.Sprintf("%s/%v/kv%d", name, mode, bits), func(t *testing.T) {
					tg, err := Load(context.Background(), dir, LoadOptions{Threads: 2, Kernels: mode, KVBits: bits})
					require.NoError(t, err)
					t.Cleanup(func() { _ = tg.Close() })
					porttest.TreeSuite{
						Open: func(t *testing.T, taps []int) ports.Session {
							s, err := tg.NewSession(t.Context(), taps)
							require.NoError(t, err)
							return s
						},
						Vocab:         testmodel.Vocab,
						TapLayers:     []int{f.Layers - 1, 0},
						ReadTaps:      readCPUTaps,
						ContextLength: 24,
					}.Run(t)
				})
			}
		}
	}
}

// A ForwardTree interrupted half-way leaves the session unusable with a clear error; Close still works.
func TestTreeInterrupted(t *testing.T) {
	tg := loadFixture(t, testmodel.TargetSpec{Family: "qwen3_next", Seed: 87, Layers: 4}, 2)
	s := openSession(t, tg, nil)
	_, err := s.Forward(t.Context(), []ports.Token{1, 2, 3}, ports.ForwardOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errors.New("stop"))
	_, err = s.ForwardTree(ctx, []ports.Token{4, 5}, []int{-1, 0}, ports.ForwardOptions{})
	require.Error(t, err)
	require.Equal(t, 3, s.Len())
	_, err = s.Forward(t.Context(), []ports.Token{4}, ports.ForwardOptions{})
	require.NoError(t, err, "a tree cancelled before any work leaves the session usable")

	c := &countdown{Context: t.Context(), n: 2}
	_, err = s.ForwardTree(c, []ports.Token{4, 5}, []int{-1, 0}, ports.ForwardOptions{})
	require.Error(t, err)
	_, err = s.Forward(t.Context(), []ports.Token{4}, ports.ForwardOptions{})
	require.ErrorContains(t, err, "unusable")
	_, err = s.KeepPath(t.Context(), []int{0})
	require.Error(t, err)
	require.NoError(t, s.Close())
}

// While a tree is pending, a batched forward refuses that session's item (the others run) and ImportPrefix
// is refused; KeepPath then makes the session usable again.
func TestTreePendingBatchAndPrefix(t *testing.T) {
	tg := loadFixture(t, testmodel.TargetSpec{Family: "qwen3_next", Seed: 89, Layers: 4}, 2)
	a, b := openSession(t, tg, nil), openSession(t, tg, nil)
	for _, s := range []*Session{a, b} {
		_, err := s.Forward(t.Context(), []ports.Token{1, 2, 3}, ports.ForwardOptions{})
		require.NoError(t, err)
	}
	p, err := b.ExportPrefix(3)
	require.NoError(t, err)
	_, err = a.ForwardTree(t.Context(), []ports.Token{4, 5, 6}, []int{-1, 0, 0}, ports.ForwardOptions{})
	require.NoError(t, err)
	res, err := tg.ForwardBatch(t.Context(), []ports.BatchItem{{Session: a, Tokens: []ports.Token{7}}, {Session: b, Tokens: []ports.Token{7}}})
	require.NoError(t, err)
	require.ErrorContains(t, res[0].Err, "tree is pending")
	require.NoError(t, res[1].Err)
	require.ErrorContains(t, a.ImportPrefix(p), "tree is pending")
	_, err = a.KeepPath(t.Context(), []int{0, 2})
	require.NoError(t, err)
	require.Equal(t, 5, a.Len())
	_, err = a.Forward(t.Context(), []ports.Token{7}, ports.ForwardOptions{})
	require.NoError(t, err)
}
