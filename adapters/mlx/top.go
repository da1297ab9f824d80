package mlx

import (
	"errors"
	"fmt"
	"math"

	"github.com/higgs-go/higgs/ports"
)

// topCandidates is Proposal.Top (ports.TopDrafter) from the drafted slots' logits read back to the host
// (len(first) rows of vocab, row r the slot of first[r]): per slot, first[r], then the slot's other most
// probable tokens, k in all (fewer when the vocabulary is smaller), with their softmax probabilities at
// temperature 1 in float64. The others are ranked by logit, ties to the lower id: the same order as by
// probability, without an exp per comparison. A row with a NaN or +Inf logit, or only −Inf ones, has no
// distribution and is refused.
func topCandidates(logits []float32, vocab int, first []ports.Token, k int) ([][]ports.Candidate, error) {
	switch {
	case k < 1:
		return nil, fmt.Errorf("top-k %d must be ≥ 1", k)
	case vocab < 1 || len(logits) != len(first)*vocab:
		return nil, fmt.Errorf("%d logits for %d slots of a vocabulary of %d", len(logits), len(first), vocab)
	}
	k = min(k, vocab)
	out := make([][]ports.Candidate, len(first))
	for r, tok := range first {
		row := logits[r*vocab : (r+1)*vocab]
		if tok < 0 || int(tok) >= vocab {
			return nil, fmt.Errorf("slot %d: token %d outside the vocabulary [0,%d)", r, tok, vocab)
		}
		mx, sum, err := softmaxNorm(row)
		if err != nil {
			return nil, fmt.Errorf("slot %d: %w", r, err)
		}
		ids := append(make([]int, 0, k), int(tok))
		ids = bestOthers(ids, row, int(tok), k-1)
		c := make([]ports.Candidate, len(ids))
		for i, id := range ids {
			c[i] = ports.Candidate{Token: ports.Token(id), Prob: math.Exp(float64(row[id])-mx) / sum}
		}
		out[r] = c
	}
	return out, nil
}

// softmaxNorm returns a row's largest logit and Σ exp(logit − max), summed in id order, in float64.
func softmaxNorm(row []float32) (mx, sum float64, err error) {
	mx = math.Inf(-1)
	for id, l := range row {
		x := float64(l)
		switch {
		case math.IsNaN(x):
			return 0, 0, fmt.Errorf("logit of token %d is NaN", id)
		case math.IsInf(x, 1):
			return 0, 0, fmt.Errorf("logit of token %d is +Inf", id)
		}
		mx = max(mx, x)
	}
	if math.IsInf(mx, -1) {
		return 0, 0, errors.New("every logit is −Inf")
	}
	for _, l := range row {
		sum += math.Exp(float64(l) - mx)
	}
	return mx, sum, nil
}

// bestOthers appends to dst the n ids of row other than skip with the highest logits (ties to the lower
// id), best first, in one pass that keeps the n best seen so far sorted.
func bestOthers(dst []int, row []float32, skip, n int) []int {
	base := len(dst)
	better := func(a, b int) bool { return row[a] > row[b] || (row[a] == row[b] && a < b) }
	for id := range row {
		if id == skip || n == 0 {
			continue
		}
		kept := dst[base:]
		if len(kept) == n && !better(id, kept[n-1]) {
			continue
		}
		if len(kept) < n {
			dst = append(dst, id)
		}
		// Shift the worse ones down one place and put id in its slot (ids arrive in increasing order, so
		// an equal logit already kept has the lower id and stays ahead).
		i := len(dst) - 1
		for i > base && better(id, dst[i-1]) {
			dst[i] = dst[i-1]
			i--
		}
		dst[i] = id
	}
	return dst
}
