package ops

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// TieMargin is how many candidates past k Top reads back per row, so that a run of equal logits across the
// k-th place is settled on the host (ties to the lower id) rather than by the device's selection, which
// keeps no order among equals. Only a run longer than the margin makes Top read that row whole.
const TieMargin = 16

// Top builds Proposal.Top (ports.TopDrafter) for the logit rows of x ([rows, V]) on the device: per row,
// first[r] and then the row's other most probable tokens, k in all, exactly as model.TopCandidates ranks
// them (higher logit first, equal logits to the lower id), each with its softmax probability at temperature
// 1. It reads back per row only the m = k+TieMargin largest logits and their ids (one selection pass,
// argpartition), the drafted token's logit (DFlash2's selector may pick outside the top k), the row's
// largest logit and Σ exp(logit − largest): m·8 + 12 bytes against a row's 4·V. The probabilities are
// exp(logit − largest) / Σ in float64 from those; the device's float32 sum puts them within a relative
// 1e-5 or so of the float64 reference's on a vocabulary of 150k.
//
// Rows the summary cannot settle are read whole and ranked by model.TopCandidates: a row whose largest
// logit or sum is not finite (a NaN logit, every logit −Inf, a +Inf one: the NaN of inf−inf or of the
// NaN itself reaches the sum) is refused there with model.RowMax's error, and a row whose k-th place ties
// the m-th largest logit (so that the device may have dropped an equal logit of a lower id) is ranked there
// exactly. When m reaches V the rows are no larger than the candidates and every row goes that way.
//
// Refusals (k < 1, a token outside the vocabulary, a row without a distribution) are returned as errors;
// a device failure is the graph's error, returned too.
func (o Backend) Top(x Act, first []ports.Token, k int) ([][]ports.Candidate, error) {
	g := o.G
	rows, vocab := x.R, x.C
	switch {
	case k < 1:
		return nil, fmt.Errorf("top-k %d must be ≥ 1", k)
	case len(first) != rows:
		return nil, fmt.Errorf("%d drafted tokens for %d logit rows", len(first), rows)
	}
	for r, tok := range first {
		if tok < 0 || int(tok) >= vocab {
			return nil, fmt.Errorf("row %d: token %d outside the vocabulary of %d", r, tok, vocab)
		}
	}
	if g.Err != nil {
		return nil, g.Err
	}
	if rows == 0 {
		return [][]ports.Candidate{}, nil
	}
	m := k + TieMargin
	if m >= vocab {
		logits := o.Host(x)
		if g.Err != nil {
			return nil, g.Err
		}
		return model.TopCandidates(logits, vocab, first, k)
	}
	f := x.A
	if mlxc.ArrayDtype(f) != mlxc.Float32 {
		f = g.Astype(f, mlxc.Float32) // exact: the logits the host path reads
	}
	// Sorted place vocab−m and everything after it: the m largest, the m-th largest first.
	part := g.Slice(g.Argpartition(f, vocab-m, -1), []int{0, vocab - m}, []int{rows, vocab})
	vals := g.TakeAlong(f, part, -1)
	mx := g.Max(vals, -1, true)
	sum := g.Sum(g.Exp(g.Sub(f, mx)), -1, true)
	ids := g.Astype(part, mlxc.Int32)
	tokl := g.TakeAlong(f, graph.UploadI32(g, first, rows, 1), -1)
	g.Eval(ids, vals, mx, sum, tokl)
	hid, hval, hmx, hsum, htok := g.ReadI32(ids), g.ReadF32(vals), g.ReadF32(mx), g.ReadF32(sum), g.ReadF32(tokl)
	if g.Err != nil {
		return nil, g.Err
	}
	out := make([][]ports.Candidate, rows)
	others := make([]cand, 0, m)
	for r, tok := range first {
		mr, sr := float64(hmx[r]), float64(hsum[r])
		if !finite(mr) || !finite(sr) {
			c, err := o.rowTop(f, r, vocab, tok, k)
			if err != nil {
				return nil, err
			}
			out[r] = c
			continue
		}
		others = others[:0]
		floor := hval[r*m]
		for j := r * m; j < (r+1)*m; j++ {
			floor = min(floor, hval[j])
			if hid[j] != tok {
				others = append(others, cand{hid[j], hval[j]})
			}
		}
		slices.SortFunc(others, func(a, b cand) int {
			if c := cmp.Compare(b.logit, a.logit); c != 0 {
				return c
			}
			return cmp.Compare(a.id, b.id)
		})
		others = others[:k-1]
		if k > 1 && others[k-2].logit == floor {
			c, err := o.rowTop(f, r, vocab, tok, k)
			if err != nil {
				return nil, err
			}
			out[r] = c
			continue
		}
		prob := func(l float32) float64 { return math.Exp(float64(l)-mr) / sr }
		c := make([]ports.Candidate, 0, k)
		c = append(c, ports.Candidate{Token: tok, Prob: prob(htok[r])})
		for _, e := range others {
			c = append(c, ports.Candidate{Token: e.id, Prob: prob(e.logit)})
		}
		out[r] = c
	}
	return out, nil
}

// cand is a read-back candidate: its id and logit.
type cand struct {
	id    ports.Token
	logit float32
}

// rowTop reads row r of f ([rows, vocab] float32) whole and ranks it with model.TopCandidates, refusing a
// row without a distribution with model.RowMax's error.
func (o Backend) rowTop(f arr, r, vocab int, tok ports.Token, k int) ([]ports.Candidate, error) {
	g := o.G
	row := g.Slice(f, []int{r, 0}, []int{r + 1, vocab})
	g.Eval(row)
	logits := g.ReadF32(row)
	if g.Err != nil {
		return nil, g.Err
	}
	if _, err := model.RowMax(logits); err != nil {
		return nil, fmt.Errorf("row %d: %w", r, err)
	}
	c, err := model.TopCandidates(logits, vocab, []ports.Token{tok}, k)
	if err != nil {
		return nil, fmt.Errorf("row %d: %w", r, err)
	}
	return c[0], nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
