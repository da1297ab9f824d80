package mlx

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports"
)

func TestTopCandidates(t *testing.T) {
	inf := float32(math.Inf(1))
	// Row 0: logits 1, 3, 3, 0, 2 (ties 1 and 2: the lower id first). Row 1: −Inf entries rank last.
	logits := []float32{1, 3, 3, 0, 2, 0, -inf, 5, -inf, 5}
	z0 := math.Exp(1) + 2*math.Exp(3) + 1 + math.Exp(2)
	p0 := func(l float64) float64 { return math.Exp(l) / z0 }
	z1 := 1 + 2*math.Exp(5)
	p1 := func(l float64) float64 { return math.Exp(l) / z1 }
	for _, tc := range []struct {
		name  string
		first []ports.Token
		k     int
		want  [][]ports.Candidate
	}{
		{"argmax first", []ports.Token{1, 2}, 3, [][]ports.Candidate{
			{{Token: 1, Prob: p0(3)}, {Token: 2, Prob: p0(3)}, {Token: 4, Prob: p0(2)}},
			{{Token: 2, Prob: p1(5)}, {Token: 4, Prob: p1(5)}, {Token: 0, Prob: p1(0)}},
		}},
		{"another first", []ports.Token{3, 0}, 2, [][]ports.Candidate{
			{{Token: 3, Prob: p0(0)}, {Token: 1, Prob: p0(3)}},
			{{Token: 0, Prob: p1(0)}, {Token: 2, Prob: p1(5)}},
		}},
		{"k 1", []ports.Token{4, 4}, 1, [][]ports.Candidate{{{Token: 4, Prob: p0(2)}}, {{Token: 4, Prob: p1(5)}}}},
		{"k past the vocabulary", []ports.Token{0, 1}, 9, [][]ports.Candidate{
			{{Token: 0, Prob: p0(1)}, {Token: 1, Prob: p0(3)}, {Token: 2, Prob: p0(3)}, {Token: 4, Prob: p0(2)}, {Token: 3, Prob: p0(0)}},
			{{Token: 1, Prob: 0}, {Token: 2, Prob: p1(5)}, {Token: 4, Prob: p1(5)}, {Token: 0, Prob: p1(0)}, {Token: 3, Prob: 0}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := topCandidates(logits, 5, tc.first, tc.k)
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for r := range tc.want {
				require.Len(t, got[r], len(tc.want[r]), "slot %d", r)
				for i, c := range tc.want[r] {
					assert.Equal(t, c.Token, got[r][i].Token, "slot %d rank %d", r, i)
					assert.InDelta(t, c.Prob, got[r][i].Prob, 1e-15, "slot %d rank %d", r, i)
				}
			}
		})
	}
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name   string
		logits []float32
		vocab  int
		first  []ports.Token
		k      int
		want   string
	}{
		{"k 0", logits, 5, []ports.Token{1, 2}, 0, "top-k 0"},
		{"short logits", logits[:9], 5, []ports.Token{1, 2}, 2, "9 logits for 2 slots"},
		{"empty vocabulary", nil, 0, []ports.Token{}, 2, "vocabulary of 0"},
		{"token outside", logits, 5, []ports.Token{5, 2}, 2, "slot 0: token 5 outside"},
		{"negative token", logits, 5, []ports.Token{1, -1}, 2, "slot 1: token -1 outside"},
		{"NaN", []float32{0, nan}, 2, []ports.Token{0}, 1, "NaN"},
		{"+Inf", []float32{0, inf}, 2, []ports.Token{0}, 1, "+Inf"},
		{"all −Inf", []float32{-inf, -inf}, 2, []ports.Token{0}, 1, "every logit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := topCandidates(tc.logits, tc.vocab, tc.first, tc.k)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// topReference ranks a row by sorting every id: the definition topCandidates's one-pass selection must meet.
func topReference(row []float32, first ports.Token, k int) []ports.Token {
	ids := make([]ports.Token, 0, len(row))
	for id := range row {
		if ports.Token(id) != first {
			ids = append(ids, ports.Token(id))
		}
	}
	slices.SortStableFunc(ids, func(a, b ports.Token) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	return append([]ports.Token{first}, ids[:min(k, len(row))-1]...)
}

// On random rows with many ties (logits from a few levels), the selection equals the sorted reference and
// the probabilities are the softmax's.
func TestTopCandidatesMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		V := 1 + rng.IntN(40)
		row := make([]float32, V)
		for i := range row {
			row[i] = float32(rng.IntN(6)) * 0.5
		}
		first := ports.Token(rng.IntN(V))
		k := 1 + rng.IntN(V+3)
		got, err := topCandidates(row, V, []ports.Token{first}, k)
		require.NoError(t, err)
		want := topReference(row, first, k)
		var z float64
		for _, l := range row {
			z += math.Exp(float64(l))
		}
		require.Len(t, got[0], len(want))
		for i, tok := range want {
			assert.Equal(t, tok, got[0][i].Token)
			assert.InDelta(t, math.Exp(float64(row[tok]))/z, got[0][i].Prob, 1e-12)
		}
	}
}

// DraftTop drafts what Draft drafts (the same tokens, the same context append) and ranks each slot's
// candidates: the drafted token first, then the others by probability; with k past the vocabulary every
// token is listed and the probabilities sum to 1. DFlash's drafted token is its argmax, so its lists are
// sorted whole. k < 1 is refused before anything is appended; bs 1 has no slots.
func TestDraftTop(t *testing.T) {
	requireMLX(t)
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
			_, err = top.(ports.TopDrafter).DraftTop(t.Context(), anchor, fr.Taps, 4, 0)
			assert.ErrorContains(t, err, "top-k 0")
			assert.Equal(t, 0, top.Len(), "a refused call appends nothing")
			for _, bs := range []int{6, 12} {
				want, err := plain.Draft(t.Context(), anchor, fr.Taps, bs)
				require.NoError(t, err)
				for _, k := range []int{1, 3, V + 5} {
					d := open()
					got, err := d.(ports.TopDrafter).DraftTop(t.Context(), anchor, fr.Taps, bs, k)
					require.NoError(t, err)
					assert.Equal(t, want.Tokens, got.Tokens, "bs %d k %d", bs, k)
					assert.Equal(t, plain.Len(), d.Len())
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
			got, err := open().(ports.TopDrafter).DraftTop(t.Context(), anchor, fr.Taps, 1, 2)
			require.NoError(t, err)
			assert.Empty(t, got.Tokens)
			assert.NotNil(t, got.Top)
			assert.Empty(t, got.Top)
		})
	}
}
