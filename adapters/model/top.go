package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

// TopCandidates builds Proposal.Top (ports.TopDrafter) from a drafted block's logits on the host (rows ×
// vocab, row i the slot of first[i]): per row, first[i] and then the row's other most probable tokens, k in
// all (fewer when the vocabulary is smaller), each with its softmax probability at temperature 1 computed in
// float64. Among the others, higher logits come first and equal logits go to the lower id, so the
// probabilities never rise along a row after its first entry. A row with a NaN logit has no distribution
// and is refused.
func TopCandidates(logits []float32, vocab int, first []ports.Token, k int) ([][]ports.Candidate, error) {
	return TopCandidatesWith(logits, vocab, first, k, nil)
}

// RowProbs returns the softmax probability of any token of row r, or an error when the row has no
// distribution (a NaN logit, every logit −Inf, a +Inf one). A backend with a vectorized softmax of its own gives
// one to TopCandidatesWith instead of the float64 reference.
type RowProbs func(r int, row []float32) (func(ports.Token) float64, error)

// TopCandidatesWith is TopCandidates with the rows' probabilities from probs (nil: the float64 softmax).
func TopCandidatesWith(logits []float32, vocab int, first []ports.Token, k int, probs RowProbs) ([][]ports.Candidate, error) {
	if probs == nil {
		probs = func(_ int, row []float32) (func(ports.Token) float64, error) { return softmax64(row) }
	}
	switch {
	case k < 1:
		return nil, fmt.Errorf("top-k %d must be ≥ 1", k)
	case vocab < 1 || len(logits) != len(first)*vocab:
		return nil, fmt.Errorf("%d logits for %d rows of a vocabulary of %d", len(logits), len(first), vocab)
	}
	k = min(k, vocab)
	out := make([][]ports.Candidate, len(first))
	for r, tok := range first {
		row := logits[r*vocab : (r+1)*vocab]
		if tok < 0 || int(tok) >= vocab {
			return nil, fmt.Errorf("row %d: token %d outside the vocabulary of %d", r, tok, vocab)
		}
		prob, err := probs(r, row)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", r, err)
		}
		top := append(make([]ports.Token, 0, k), tok)
		top = appendTop(top, row, tok, k)
		c := make([]ports.Candidate, len(top))
		for i, t := range top {
			c[i] = ports.Candidate{Token: t, Prob: prob(t)}
		}
		out[r] = c
	}
	return out, nil
}

// appendTop appends to top (which holds skip) the most probable tokens of row other than skip, higher logit
// first and the lower id on ties, until top holds k: one pass over the row keeping a sorted list.
func appendTop(top []ports.Token, row []float32, skip ports.Token, k int) []ports.Token {
	lo := len(top) // top[lo:] is the sorted list of the best others so far
	if lo >= k {
		return top
	}
	for id, l := range row {
		t := ports.Token(id)
		if t == skip {
			continue
		}
		if len(top) == k {
			if l <= row[top[k-1]] { // not better than the worst kept (equal: the kept has the lower id)
				continue
			}
			top = top[:k-1]
		}
		// Insert after every kept token with a logit ≥ l (they have lower ids).
		i := len(top)
		for i > lo && row[top[i-1]] < l {
			i--
		}
		top = append(top, 0)
		copy(top[i+1:], top[i:])
		top[i] = t
	}
	return top
}

// softmax64 returns the softmax probability (temperature 1, in float64) of any token of row.
func softmax64(row []float32) (func(ports.Token) float64, error) {
	m, err := RowMax(row)
	if err != nil {
		return nil, err
	}
	var sum float64
	for _, l := range row {
		sum += math.Exp(float64(l) - m)
	}
	return func(t ports.Token) float64 { return math.Exp(float64(row[t])-m) / sum }, nil
}

// RowMax returns a logit row's largest value, or an error when the row has no distribution: a NaN logit,
// every logit −Inf, or a +Inf one.
func RowMax(row []float32) (float64, error) {
	// Two float32 comparisons a logit (a tree round ranks every drafted slot's row: the float64 max with its
	// NaN check took ~10% of a gocoder tree draft).
	m := float32(math.Inf(-1))
	for id, l := range row {
		if l > m {
			m = l
		} else if l != l {
			return 0, fmt.Errorf("logit of token %d is NaN", id)
		}
	}
	if m == 0 && math.Signbit(float64(m)) && slices.ContainsFunc(row, func(l float32) bool { return l == 0 && !math.Signbit(float64(l)) }) {
		m = 0 // +0 above −0, as a float64 max has it
	}
	if math.IsInf(float64(m), -1) {
		return 0, fmt.Errorf("every logit is -Inf: no distribution")
	}
	if math.IsInf(float64(m), 1) {
		return 0, fmt.Errorf("a logit is +Inf: no distribution")
	}
	return float64(m), nil
}
