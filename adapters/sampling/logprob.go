package sampling

import (
	"errors"
	"fmt"
	"math"

	"github.com/higgs-go/higgs/ports"
)

// LogSumExp returns log Σ exp(logits[j]) over the finite logits, summed in ascending id order in float64
// (so the same row always gives the same bits). NaN and −Inf logits (masked tokens) count for nothing. It is
// an error when no logit is finite or one is +Inf.
func LogSumExp(logits []float32) (float64, error) {
	m := math.Inf(-1)
	for _, v := range logits {
		x := float64(v)
		if math.IsInf(x, 1) {
			return 0, errors.New("sampling: +Inf logit")
		}
		if x == x && x > m {
			m = x
		}
	}
	if math.IsInf(m, -1) {
		return 0, fmt.Errorf("sampling: no finite logit among %d", len(logits))
	}
	var sum float64
	for _, v := range logits {
		x := float64(v)
		if x == x && !math.IsInf(x, -1) {
			sum += math.Exp(x - m)
		}
	}
	return m + math.Log(sum), nil
}

// Logprobs returns the log-probability of tok under softmax(logits) (temperature 1, no truncation) and the k
// most likely tokens with theirs, most likely first, the lowest id first on ties. Masked tokens (−Inf or
// NaN) have log-probability −Inf and are never listed, so fewer than k may come back.
func Logprobs(logits []float32, tok ports.Token, k int) (float64, []ports.TopLogprob, error) {
	if tok < 0 || int(tok) >= len(logits) {
		return 0, nil, fmt.Errorf("sampling: token %d outside a row of %d logits", tok, len(logits))
	}
	lse, err := LogSumExp(logits)
	if err != nil {
		return 0, nil, err
	}
	lp := math.Inf(-1)
	if x := float64(logits[tok]); x == x {
		lp = x - lse
	}
	if k <= 0 {
		return lp, nil, nil
	}
	// Insertion into a list of at most k (k ≤ ports.MaxTopLogprobs): O(V·k) in the worst case, O(V) in
	// practice, and only for the rows of committed tokens.
	top := make([]int, 0, k)
	for j, v := range logits {
		x := float64(v)
		if x != x || math.IsInf(x, -1) {
			continue
		}
		if len(top) == k && !(v > logits[top[k-1]]) {
			continue
		}
		i := len(top)
		if i == k {
			i--
		} else {
			top = append(top, 0)
		}
		for i > 0 && v > logits[top[i-1]] {
			top[i] = top[i-1]
			i--
		}
		top[i] = j
	}
	out := make([]ports.TopLogprob, len(top))
	for i, j := range top {
		out[i] = ports.TopLogprob{Token: ports.Token(j), Logprob: float64(logits[j]) - lse}
	}
	return lp, out, nil
}
