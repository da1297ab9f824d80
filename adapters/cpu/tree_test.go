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
						Open:          porttest.Sessions(tg),
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

// Consecutive tree rounds on hybrid targets, with a chain round rolled back by tape replay and one by
// snapshot and recompute between them, leave bit for bit the state of a session fed the kept tokens as one
// chain: its next forward's logits, and those of a session importing its exported prefix. (The tree suite
// continues a kept path with a plain forward; here trees follow trees.)
func TestConsecutiveTreesAndRollbacks(t *testing.T) {
	for _, spec := range []testmodel.TargetSpec{
		{Family: "qwen3_next", Seed: 86, Layers: 4},
		{Family: "qwen3_5", Seed: 85, Layers: 4, OutputGate: true, PartialRotary: 0.25},
	} {
		for _, bits := range []int{32, 8} {
			t.Run(fmt.Sprintf("%s/kv%d", spec.Family, bits), func(t *testing.T) {
				tg, err := Load(t.Context(), testmodel.Target(t, spec), LoadOptions{Threads: 2, KVBits: bits})
				require.NoError(t, err)
				t.Cleanup(func() { _ = tg.Close() })
				a, b := openSession(t, tg, []int{0}), openSession(t, tg, []int{0})
				prompt := []ports.Token{1, 2, 3, 4, 5, 6}
				_, err = a.Forward(t.Context(), prompt, ports.ForwardOptions{})
				require.NoError(t, err)
				seq := append([]ports.Token(nil), prompt...)
				// The anchor, two children with two children each, and a deep chain under the first.
				parents := []int{-1, 0, 0, 1, 1, 2, 3, 6, 7}
				toks := func(salt int) []ports.Token {
					out := make([]ports.Token, len(parents))
					for i := range out {
						out[i] = ports.Token((i*5 + salt) % testmodel.Vocab)
					}
					return out
				}
				for r, path := range [][]int{{0, 1, 3, 6, 7, 8}, {0, 2}, {0}, {0, 1, 4}, {0, 1, 3, 6}} {
					tk := toks(r + 3)
					_, err := a.ForwardTree(t.Context(), tk, parents, ports.ForwardOptions{Taps: true})
					require.NoError(t, err)
					_, err = a.KeepPath(t.Context(), path)
					require.NoError(t, err)
					for _, v := range path {
						seq = append(seq, tk[v])
					}
					if r == 1 {
						// A chain round with a tape, rolled back to 2 of 4.
						blk := []ports.Token{9, 10, 11, 12}
						n := a.Len()
						fr, err := a.Forward(t.Context(), blk, ports.ForwardOptions{RecordTape: true, Taps: true})
						require.NoError(t, err)
						require.NoError(t, a.TrimKV(n+2))
						require.NoError(t, a.ReplayTape(t.Context(), fr.Tape, 2))
						seq = append(seq, 9, 10)
					}
					if r == 3 {
						snap, err := a.Snapshot()
						require.NoError(t, err)
						n := a.Len()
						_, err = a.Forward(t.Context(), []ports.Token{13, 14, 15}, ports.ForwardOptions{Taps: true})
						require.NoError(t, err)
						require.NoError(t, a.TrimKV(n))
						require.NoError(t, a.Restore(snap))
						_, err = a.Forward(t.Context(), []ports.Token{13}, ports.ForwardOptions{Rows: 1, Taps: true})
						require.NoError(t, err)
						seq = append(seq, 13)
					}
				}
				require.Equal(t, len(seq), a.Len())
				_, err = b.Forward(t.Context(), seq, ports.ForwardOptions{})
				require.NoError(t, err)
				next := []ports.Token{7, 8, 9}
				want, err := b.Forward(t.Context(), next, ports.ForwardOptions{Logits: true})
				require.NoError(t, err)
				got, err := a.Forward(t.Context(), next, ports.ForwardOptions{Logits: true})
				require.NoError(t, err)
				require.Equal(t, want.Logits, got.Logits)
				p, err := a.ExportPrefix(a.Len())
				require.NoError(t, err)
				c := openSession(t, tg, nil)
				require.NoError(t, c.ImportPrefix(p))
				w2, err := b.Forward(t.Context(), []ports.Token{3}, ports.ForwardOptions{Logits: true})
				require.NoError(t, err)
				g2, err := c.Forward(t.Context(), []ports.Token{3}, ports.ForwardOptions{Logits: true})
				require.NoError(t, err)
				require.Equal(t, w2.Logits, g2.Logits)
			})
		}
	}
}
