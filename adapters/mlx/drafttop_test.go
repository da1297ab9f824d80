package mlx

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports"
)

// DraftTop drafts what Draft drafts (the same tokens, the same context append) and ranks each slot's
// candidates: the drafted token first, then the others by probability; with k past the vocabulary every
// token is listed and the probabilities sum to 1. DFlash's drafted token is its argmax, so its lists are
// sorted whole. k < 1 is refused before anything is appended; bs 1 has no slots. Both rankings run: on the
// device (the GPU's) and on the host (MLX's CPU device's).
func TestDraftTop(t *testing.T) {
	requireMLX(t)
	bothRankings(t, testDraftTop)
}

// bothRankings runs test with DraftTop's candidates ranked on the device, then on the host.
func bothRankings(t *testing.T, test func(t *testing.T)) {
	saved := rankOnDevice
	defer func() { rankOnDevice = saved }()
	for _, device := range []bool{true, false} {
		rankOnDevice = func(*mlxc.Runtime) bool { return device }
		t.Run(fmt.Sprint("device=", device), test)
	}
}

func testDraftTop(t *testing.T) {
	for name, v2 := range map[string]bool{"dflash": false, "dflash2": true} {
		t.Run(name, func(t *testing.T) {
			_, mp := loadPairs(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3},
				synth.DrafterSpec{Seed: 4, Taps: []int{1, 3}, Mask: 60, BlockSize: 8, Nested: v2, DFlash2: v2})
			V := mp.target.Info().VocabSize
			ts, err := mp.target.NewSession(t.Context(), mp.drafter.TapLayers())
			require.NoError(t, err)
			defer ts.Close()
			ctxTokens := []ports.Token{5, 9, 13, 2, 40, 41, 42}
			fr, err := ts.Forward(t.Context(), ctxTokens, ports.ForwardOptions{Taps: true})
			require.NoError(t, err)
			open := func() ports.DraftSession {
				ds, err := mp.drafter.NewSession(t.Context())
				require.NoError(t, err)
				t.Cleanup(func() { _ = ds.Close() })
				return ds
			}
			plain, top := open(), open()
			anchor := fr.Greedy[len(ctxTokens)-1]
			_, err = top.(ports.TopDrafter).DraftTop(t.Context(), anchor, fr.Taps, 4, ports.TopRequest{})
			assert.ErrorContains(t, err, "top-k 0")
			assert.Equal(t, 0, top.Len(), "a refused call appends nothing")
			for _, bs := range []int{6, 12} {
				want, err := plain.Draft(t.Context(), anchor, fr.Taps, bs)
				require.NoError(t, err)
				for _, k := range []int{1, 3, V + 5} {
					d := open()
					got, err := d.(ports.TopDrafter).DraftTop(t.Context(), anchor, fr.Taps, bs, ports.TopRequest{K: k})
					require.NoError(t, err)
					assert.Equal(t, want.Tokens, got.Tokens, "bs %d k %d", bs, k)
					assert.Equal(t, plain.Len(), d.Len())
					// Fewer slots: the same first slots (the last layer's other rows and their LM head rows skipped).
					slots := (bs - 1) / 2
					few, err := open().(ports.TopDrafter).DraftTop(t.Context(), anchor, fr.Taps, bs, ports.TopRequest{K: k, Slots: slots})
					require.NoError(t, err)
					assert.Equal(t, got.Tokens[:slots], few.Tokens, "bs %d k %d slots %d", bs, k, slots)
					require.Len(t, few.Top, slots)
					for i, cands := range few.Top {
						require.Len(t, cands, len(got.Top[i]))
						for j, c := range cands {
							assert.Equal(t, got.Top[i][j].Token, c.Token, "slot %d rank %d", i, j)
							assert.InDelta(t, got.Top[i][j].Prob, c.Prob, 1e-5, "slot %d rank %d", i, j)
						}
					}
					require.Len(t, got.Top, bs-1)
					for i, cands := range got.Top {
						require.Len(t, cands, min(k, V))
						assert.Equal(t, got.Tokens[i], cands[0].Token, "slot %d", i)
						from := 1
						if !v2 {
							from = 0
						}
						for j := from + 1; j < len(cands); j++ {
							assert.GreaterOrEqual(t, cands[j-1].Prob, cands[j].Prob, "slot %d rank %d", i, j)
						}
						sum := 0.0
						for _, c := range cands {
							assert.True(t, c.Prob >= 0 && c.Prob <= 1)
							sum += c.Prob
						}
						if k > V {
							assert.InDelta(t, 1, sum, 1e-9, "slot %d", i)
						}
					}
				}
				require.NoError(t, plain.Crop(0))
			}
			got, err := open().(ports.TopDrafter).DraftTop(t.Context(), anchor, fr.Taps, 1, ports.TopRequest{K: 2})
			require.NoError(t, err)
			assert.Empty(t, got.Tokens)
			assert.NotNil(t, got.Top)
			assert.Empty(t, got.Top)
		})
	}
}

// MLX's candidates are the CPU backend's: the same tokens in the same order, probabilities within the
// parity tolerance, for DFlash and DFlash2 drafters, ranked on the device or on the host.
func TestDraftTopMatchesCPU(t *testing.T) {
	requireMLX(t)
	bothRankings(t, testDraftTopMatchesCPU)
}

func testDraftTopMatchesCPU(t *testing.T) {
	for name, v2 := range map[string]bool{"dflash": false, "dflash2": true} {
		t.Run(name, func(t *testing.T) {
			cp, mp := loadPairs(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3},
				synth.DrafterSpec{Seed: 4, Taps: []int{1, 3}, Mask: 60, BlockSize: 8, Nested: v2, DFlash2: v2})
			ctxTokens := []ports.Token{5, 9, 13, 2, 40, 41, 42}
			var got [2]ports.Proposal
			for i, p := range []pair{cp, mp} {
				ts, err := p.target.NewSession(t.Context(), p.drafter.TapLayers())
				require.NoError(t, err)
				defer ts.Close()
				fr, err := ts.Forward(t.Context(), ctxTokens, ports.ForwardOptions{Taps: true})
				require.NoError(t, err)
				ds, err := p.drafter.NewSession(t.Context())
				require.NoError(t, err)
				defer ds.Close()
				got[i], err = ds.(ports.TopDrafter).DraftTop(t.Context(), fr.Greedy[len(ctxTokens)-1], fr.Taps, 8, ports.TopRequest{K: 4})
				require.NoError(t, err)
			}
			want, have := got[0], got[1]
			require.Equal(t, want.Tokens, have.Tokens)
			require.Len(t, have.Top, len(want.Top))
			for i := range want.Top {
				require.Len(t, have.Top[i], len(want.Top[i]))
				for j, c := range want.Top[i] {
					assert.Equal(t, c.Token, have.Top[i][j].Token, "slot %d rank %d", i, j)
					assert.InDelta(t, c.Prob, have.Top[i][j].Prob, 1e-4, "slot %d rank %d", i, j)
				}
			}
		})
	}
}
