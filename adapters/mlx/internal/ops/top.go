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

// run is the width of the blocks Top cuts a row into: each block's logsumexp and largest logit are one short
// reduction. Short runs keep float32 rounding small (a reduction adds along the axis one term after another
// on MLX's CPU backend: over 150k terms the sum drifts by a relative 1e-4), and the m blocks with the largest
// maxima hold the row's m largest logits, so only m·run logits go through the selection.
const run = 256

// Top builds Proposal.Top (ports.TopDrafter) for the logit rows of x ([rows, V]) on the device: per row,
// first[r] and then the row's other most probable tokens, k in all, exactly as model.TopCandidates ranks
// them (higher logit first, equal logits to the lower id), each with its softmax probability at
// temperature 1. Per row it reads back only the m = k+TieMargin largest logits with their ids, the drafted
// token's logit (DFlash2's selector may pick outside the top k) and the row's logsumexp, plus the m block
// ids below: at most 12·m + 8 bytes against a row's 4·V. The probabilities are exp(logit − logsumexp) in
// float64, within a relative 1e-5 of the float64 reference's on a vocabulary of 150k (the logsumexp is
// float32, taken over blocks of run logits and then over the blocks).
//
// The m largest are selected in two steps when the row has more than m blocks: the m blocks with the
// largest maxima (a logit outside them is no larger than any of those m maxima, hence than the m-th
// largest logit inside them), then the m largest of those blocks and the row's tail (argpartition: a
// selection pass, no sort). Rows the summary cannot settle are read whole and ranked by
// model.TopCandidates: a row whose logsumexp is not finite (a NaN logit, every logit −Inf, a +Inf one) is
// refused there with model.RowMax's error, and a row whose k-th place ties the m-th largest logit (the
// device may have left out an equal logit of a lower id) is ranked there exactly. When m reaches V the
// rows are no larger than the candidates and every row goes that way.
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
	sel := o.largest(f, rows, vocab, m)
	vals := g.TakeAlong(sel.from, sel.idx, -1)
	lse := o.logSumExp(f, rows, vocab)
	tokl := g.TakeAlong(f, graph.UploadI32(g, first, rows, 1), -1)
	idx := g.Astype(sel.idx, mlxc.Int32)
	var blocks arr
	if sel.blocks != 0 {
		blocks = g.Astype(sel.blocks, mlxc.Int32)
	}
	g.Eval(idx, blocks, vals, lse, tokl)
	hidx, hval, hlse, htok := g.ReadI32(idx), g.ReadF32(vals), g.ReadF32(lse), g.ReadF32(tokl)
	var hblk []int32
	if blocks != 0 {
		hblk = g.ReadI32(blocks)
	}
	if g.Err != nil {
		return nil, g.Err
	}
	out := make([][]ports.Candidate, rows)
	others := make([]cand, 0, m)
	for r, tok := range first {
		z := float64(hlse[r])
		if !finite(z) {
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
			id := sel.id(hidx[j], hblk, r)
			floor = min(floor, hval[j])
			if id != tok {
				others = append(others, cand{id, hval[j]})
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
		prob := func(l float32) float64 { return math.Exp(float64(l) - z) }
		c := make([]ports.Candidate, 0, k)
		c = append(c, ports.Candidate{Token: tok, Prob: prob(htok[r])})
		for _, e := range others {
			c = append(c, ports.Candidate{Token: e.id, Prob: prob(e.logit)})
		}
		out[r] = c
	}
	return out, nil
}

// selection is where Top's m largest logits of each row are: idx [rows, m] indexes the rows of from, which
// is the logits themselves, or (blocks ≠ 0) the m blocks blocks [rows, m] names, run logits each, followed
// by the row's tail past the last whole block at body.
type selection struct {
	from, idx, blocks arr
	m, body           int
}

// id maps a read-back index of row r to its token id (blocks: that row's read-back block ids).
func (s selection) id(j int32, blocks []int32, r int) ports.Token {
	if s.blocks == 0 {
		return j
	}
	if span := int32(s.m * run); j >= span {
		return int32(s.body) + j - span
	}
	return blocks[r*s.m+int(j)/run]*run + j%run
}

// largest selects the m largest logits of each row of f ([rows, vocab] float32), ties at the m-th in no
// particular order: through the m blocks with the largest maxima when the row has more than m blocks.
func (o Backend) largest(f arr, rows, vocab, m int) selection {
	g := o.G
	q := vocab / run
	if q <= m {
		part := g.Argpartition(f, vocab-m, -1)
		return selection{from: f, idx: g.Slice(part, []int{0, vocab - m}, []int{rows, vocab}), m: m}
	}
	body := q * run
	b := g.Reshape(o.bodyOf(f, rows, vocab), rows, q, run)
	// Sorted place q−m and everything after it: the m blocks with the largest maxima.
	blocks := g.Slice(g.Argpartition(g.Max(b, -1, false), q-m, -1), []int{0, q - m}, []int{rows, q})
	from := g.Reshape(g.TakeAlong(b, g.Reshape(blocks, rows, m, 1), 1), rows, m*run)
	n := m * run
	if body < vocab {
		from = g.Concat(1, from, g.Slice(f, []int{0, body}, []int{rows, vocab}))
		n += vocab - body
	}
	idx := g.Slice(g.Argpartition(from, n-m, -1), []int{0, n - m}, []int{rows, n})
	return selection{from: from, idx: idx, blocks: blocks, m: m, body: body}
}

// bodyOf is f's whole blocks of run logits ([rows, vocab/run·run]).
func (o Backend) bodyOf(f arr, rows, vocab int) arr {
	if body := vocab / run * run; body < vocab {
		return o.G.Slice(f, []int{0, 0}, []int{rows, body})
	}
	return f
}

// logSumExp is log Σ exp over each row of f ([rows, vocab] float32) into [rows, 1]: per block of run logits,
// then over the blocks and the tail.
func (o Backend) logSumExp(f arr, rows, vocab int) arr {
	g := o.G
	q := vocab / run
	if q < 2 {
		return g.LogSumExp(f, -1, true)
	}
	parts := g.LogSumExp(g.Reshape(o.bodyOf(f, rows, vocab), rows, q, run), -1, false)
	if body := q * run; body < vocab {
		parts = g.Concat(1, parts, g.LogSumExp(g.Slice(f, []int{0, body}, []int{rows, vocab}), -1, true))
	}
	return g.LogSumExp(parts, -1, true)
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
