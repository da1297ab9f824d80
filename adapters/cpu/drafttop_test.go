package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// DraftTop is Draft (the same tokens, the same context bookkeeping) plus Top: the drafted token first, k
// candidates, probabilities that sum to at most 1 and never rise after the first; for DFlash the drafted
// token is the logits' argmax (Top is the plain top-k), for DFlash2 it is the selector's pick. Block sizes
// below, at and above the configured 8. Asked for fewer slots (TopRequest.Slots), a session proposes exactly
// the full draft's first slots, tokens, candidates and probabilities bit for bit; asked for a narrow draft
// (TopRequest.Narrow), a DFlash drafter's later layer runs on fewer rows (other logits where it proposes
// fewer slots than the block has, the full draft's where it proposes them all) and DFlash2's, whose
// convolutions mix the slots, drafts in full.
func TestDraftTop(t *testing.T) {
	const k = 4
	for name, a := range map[string]hfmodel.DrafterArch{"dflash": tinyDraftArch(), "dflash2": tinyDraft2Arch()} {
		t.Run(name, func(t *testing.T) {
			d, _, _ := newTinyDrafter(t, 41, a, 2, DrafterOptions{})
			V := d.t.m.Arch.Vocab
			width := len(a.TapLayers) * a.HiddenSize
			rng := rand.New(rand.NewPCG(41, 2))
			open := func() *DraftSession {
				s, err := d.NewSession(t.Context())
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				return s.(*DraftSession)
			}
			plain, top, part, narrow := open(), open(), open(), open()
			differs := 0
			for round, bs := range []int{5, 2, 8, 12} {
				rows := 3 + round
				ctx := &draftTaps{data: testmodel.NormalVec(rng, rows*width, 1), rows: rows, width: width}
				anchor := ports.Token(7 + round)
				want, err := plain.Draft(t.Context(), anchor, ctx, bs)
				require.NoError(t, err)
				got, err := top.DraftTop(t.Context(), anchor, ctx, bs, ports.TopRequest{K: k})
				require.NoError(t, err)
				msg := fmt.Sprintf("round %d, bs %d", round, bs)
				slots := max(1, (bs-1)/2)
				few, err := part.DraftTop(t.Context(), anchor, ctx, bs, ports.TopRequest{K: k, Slots: slots})
				require.NoError(t, err)
				require.Equal(t, got.Tokens[:slots], few.Tokens, msg)
				require.Equal(t, got.Top[:slots], few.Top, msg)
				require.Equal(t, top.Len(), part.Len(), msg)
				nar, err := narrow.DraftTop(t.Context(), anchor, ctx, bs, ports.TopRequest{K: k, Slots: slots, Narrow: true})
				require.NoError(t, err)
				require.Equal(t, top.Len(), narrow.Len(), msg)
				require.Len(t, nar.Top, slots, msg)
				switch {
				case a.Generation >= 2 || slots == bs-1:
					require.Equal(t, few.Tokens, nar.Tokens, msg)
					require.Equal(t, few.Top, nar.Top, msg)
					require.Equal(t, part.logits, narrow.logits, msg)
				default:
					require.NotEqual(t, part.logits, narrow.logits, "%s: the narrow draft's later layer saw fewer slots", msg)
				}
				require.Equal(t, want.Tokens, got.Tokens, msg)
				require.Equal(t, plain.Len(), top.Len(), msg)
				require.Len(t, got.Top, bs-1, msg)
				for i, c := range got.Top {
					row := top.logits[i*V : (i+1)*V]
					require.Len(t, c, k, msg)
					assert.Equal(t, got.Tokens[i], c[0].Token, "the drafted token first: %s slot %d", msg, i)
					argmax := sampling.Argmax(row)
					if a.Generation < 2 {
						assert.Equal(t, argmax, c[0].Token, "DFlash drafts the argmax: %s slot %d", msg, i)
					} else if c[0].Token != argmax {
						differs++
					}
					sum := 0.0
					for j, cand := range c {
						sum += cand.Prob
						assert.Positive(t, cand.Prob)
						if j > 1 {
							assert.LessOrEqual(t, cand.Prob, c[j-1].Prob, "%s slot %d", msg, i)
						}
						if j > 0 {
							assert.NotEqual(t, c[0].Token, cand.Token, "no token twice: %s slot %d", msg, i)
							// No token outside Top is more probable than a kept other.
							for tok, l := range row {
								if ports.Token(tok) != c[0].Token && !inTop(c, ports.Token(tok)) {
									assert.True(t, l < row[cand.Token] || (l == row[cand.Token] && ports.Token(tok) > cand.Token), "%s slot %d: token %d beats kept %d", msg, i, tok, cand.Token)
								}
							}
						}
					}
					assert.LessOrEqual(t, sum, 1+1e-12, "%s slot %d", msg, i)
				}
			}
			if a.Generation >= 2 {
				t.Logf("DFlash2's selector picked a token other than the argmax in %d slots", differs)
			}
			// bs 1 only appends context: no slots, an empty Top.
			ctx := &draftTaps{data: testmodel.NormalVec(rng, width, 1), rows: 1, width: width}
			p, err := top.DraftTop(t.Context(), 3, ctx, 1, ports.TopRequest{K: k})
			require.NoError(t, err)
			assert.Empty(t, p.Tokens)
			assert.NotNil(t, p.Top)
			assert.Empty(t, p.Top)
			// k < 1 is refused before anything is appended.
			n := top.Len()
			_, err = top.DraftTop(t.Context(), 3, ctx, 4, ports.TopRequest{})
			require.Error(t, err)
			assert.Equal(t, n, top.Len())
		})
	}
}

func inTop(c []ports.Candidate, tok ports.Token) bool {
	for _, x := range c {
		if x.Token == tok {
			return true
		}
	}
	return false
}
