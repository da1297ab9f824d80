package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/cpu/weights"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/internal/golden"
	"github.com/higgs-go/higgs/ports"
)

// The CPU backend reproduces transformers' float32 logits (max |Δ| ≤ 1e-3), hidden states after every layer,
// and greedy continuations wherever the reference's top-2 margin exceeds 1e-3.
func TestGoldens(t *testing.T) {
	for _, gt := range golden.Targets(t) {
		t.Run(gt.Name, func(t *testing.T) {
			dir, g := gt.Dir, gt.Case
			tg, err := Load(t.Context(), dir, LoadOptions{Threads: 2})
			require.NoError(t, err)
			defer tg.Close()
			a := tg.m.Arch
			T := len(g.Prompt)
			require.Equal(t, []int{T, a.Vocab}, g.Logits.Shape)

			taps := make([]int, a.Layers)
			for i := range taps {
				taps[i] = i
			}
			s := openSession(t, tg, taps)
			logits, tapData, _ := run(t, s, g.Prompt, false)
			want := golden.Floats(t, dir, g.Logits)
			var worst float64
			for i := range want {
				worst = math.Max(worst, math.Abs(float64(want[i])-float64(logits[i])))
			}
			t.Logf("max |Δlogit| = %.3g over %d positions", worst, T)
			assert.LessOrEqual(t, worst, 1e-3, "max |Δlogit|")

			if g.HiddenStates.File != "" {
				require.Equal(t, []int{a.Layers + 1, T, a.Hidden}, g.HiddenStates.Shape)
				hs := golden.Floats(t, dir, g.HiddenStates)
				emb := make([]float32, T*a.Hidden)
				require.NoError(t, tg.EmbedTokens(emb, g.Prompt))
				layerErr := func(l int, got func(tt, j int) float32) float64 {
					var d, scale float64
					for tt := range T {
						for j := range a.Hidden {
							w := float64(hs[(l*T+tt)*a.Hidden+j])
							d = math.Max(d, math.Abs(w-float64(got(tt, j))))
							scale = math.Max(scale, math.Abs(w))
						}
					}
					return d / math.Max(scale, 1)
				}
				assert.LessOrEqual(t, layerErr(0, func(tt, j int) float32 { return emb[tt*a.Hidden+j] }), 1e-6, "embedding")
				width := a.Layers * a.Hidden
				for l := range a.Layers {
					e := layerErr(l+1, func(tt, j int) float32 { return tapData[tt*width+l*a.Hidden+j] })
					assert.LessOrEqual(t, e, 1e-4, "hidden state after layer %d (relative to its max)", l)
				}
			}

			// MLX cases: the weights the kernels see are bit-identical to the reference dequantization.
			if len(g.DequantSamples) > 0 {
				st, err := safetensors.OpenDir(dir)
				require.NoError(t, err)
				defer st.Close()
				for _, ds := range g.DequantSamples {
					want := golden.Floats(t, dir, ds.Array)
					spec := &quant.Spec{Bits: ds.Bits, GroupSize: ds.GroupSize}
					n := len(ds.Shape)
					out, in := ds.Shape[n-2], ds.Shape[n-1]
					var lins []*kernel.Linear
					if n == 3 {
						lins, err = weights.LoadStacked(st, ds.Module+".weight", ds.Module, spec, ds.Shape[0], out, in)
					} else {
						var l *kernel.Linear
						l, err = weights.LoadLinear(st, ds.Module, spec, out, in)
						lins = []*kernel.Linear{l}
					}
					require.NoError(t, err, ds.Module)
					row := make([]float32, in)
					for e, l := range lins {
						for r := range out {
							l.Row(row, r)
							requireBits(t, want[(e*out+r)*in:(e*out+r+1)*in], row, fmt.Sprintf("%s expert %d row %d", ds.Module, e, r))
						}
					}
				}
			}

			// Greedy continuation, token by token through the session (the reference re-runs the full sequence).
			next := g.Greedy.Tokens
			last := ports.Token(-1)
			compared := 0
			row := logits[(T-1)*a.Vocab:]
			for i, tok := range next {
				var got ports.Token
				if i == 0 {
					got = argmax32(row)
				} else {
					res, err := s.Forward(t.Context(), []ports.Token{last}, ports.ForwardOptions{})
					require.NoError(t, err)
					got = res.Greedy[0]
				}
				if g.Greedy.Top2Margin[i] <= 1e-3 {
					t.Logf("greedy step %d: reference margin %.3g too small to compare; stopping", i, g.Greedy.Top2Margin[i])
					break
				}
				require.Equal(t, tok, got, "greedy step %d (reference margin %.3g)", i, g.Greedy.Top2Margin[i])
				last = tok
				compared++
			}
			t.Logf("greedy: %d of %d tokens compared and equal", compared, len(next))
		})
	}
}

func argmax32(row []float32) ports.Token {
	best := 0
	for j, v := range row {
		if v > row[best] {
			best = j
		}
	}
	return ports.Token(best)
}
