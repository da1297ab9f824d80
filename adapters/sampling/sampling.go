// Package sampling turns a row of logits into a next-token distribution after the sampling transforms
// (temperature, top-k, top-p, min-p — the Hugging Face / vLLM order) and implements ports.Distribution.
// Everything is deterministic: ties are broken towards the lowest token id, sums run in a fixed order, and
// Sample is an inverse CDF over ascending token ids driven by the caller's uniform number.
package sampling

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

// Argmax returns the id of the largest logit, the lowest id on ties; NaN never wins. NoToken for an empty
// row or an all-NaN row.
func Argmax(logits []float32) ports.Token {
	best := -1
	for j, v := range logits {
		if v != v {
			continue
		}
		if best < 0 || v > logits[best] {
			best = j
		}
	}
	if best < 0 {
		return ports.NoToken
	}
	return ports.Token(best)
}

// Dist is a distribution over a sparse support kept in ascending token order. It implements
// ports.Distribution and is immutable (safe for concurrent use).
type Dist struct {
	ids   []ports.Token
	probs []float64
}

var _ ports.Distribution = (*Dist)(nil)

// PointMass returns the distribution that always yields tok.
func PointMass(tok ports.Token) *Dist {
	return &Dist{ids: []ports.Token{tok}, probs: []float64{1}}
}

// New applies p to logits and returns the resulting distribution. Greedy parameters (temperature 0) give a
// point mass on the argmax. Invalid parameters or a row without a finite logit are an error.
func New(logits []float32, p ports.SamplingParams) (*Dist, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sampling: %w", err)
	}
	if p.Greedy() {
		tok := Argmax(logits)
		if tok == ports.NoToken || math.IsInf(float64(logits[tok]), -1) {
			return nil, fmt.Errorf("sampling: no finite logit among %d", len(logits))
		}
		return PointMass(tok), nil
	}
	// Candidates sorted by logit descending, id ascending on ties (a strict total order, so top-k selection
	// and a full sort agree on the first k).
	cands := make([]cand, 0, len(logits))
	for j, v := range logits {
		if v != v || math.IsInf(float64(v), -1) {
			continue
		}
		cands = append(cands, cand{j, float64(v) / p.Temperature})
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("sampling: no finite logit among %d", len(logits))
	}
	if p.TopK > 0 && p.TopK < len(cands) {
		// Only the first TopK survive: select them in O(V log k) rather than sort the whole vocabulary for
		// every row of every verify block. The +Inf rule below keeps its meaning, as +Inf logits come first.
		cands = topK(cands, p.TopK)
	} else {
		slices.SortFunc(cands, candOrder)
	}
	if math.IsInf(cands[0].z, 1) {
		// +Inf logits: uniform over them (the limit of the softmax).
		n := 0
		for n < len(cands) && math.IsInf(cands[n].z, 1) {
			n++
		}
		cands = cands[:n]
		for i := range cands {
			cands[i].z = 0
		}
	}
	if p.TopK > 0 && p.TopK < len(cands) {
		cands = cands[:p.TopK]
	}
	probs := make([]float64, len(cands))
	m := cands[0].z
	var sum float64
	for i, c := range cands {
		probs[i] = math.Exp(c.z - m)
		sum += probs[i]
	}
	for i := range probs {
		probs[i] /= sum
	}
	if p.TopP > 0 && p.TopP < 1 {
		// Smallest prefix (in descending order) whose mass reaches TopP; at least one token.
		var cum float64
		keep := len(probs)
		for i, q := range probs {
			cum += q
			if cum >= p.TopP {
				keep = i + 1
				break
			}
		}
		cands, probs = cands[:keep], renorm(probs[:keep])
	}
	if p.MinP > 0 {
		thr := p.MinP * probs[0]
		keep := len(probs)
		for i, q := range probs {
			if q < thr {
				keep = i
				break
			}
		}
		cands, probs = cands[:keep], renorm(probs[:keep])
	}
	d := &Dist{ids: make([]ports.Token, len(cands)), probs: make([]float64, len(cands))}
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(cands[a].id, cands[b].id) })
	for i, k := range order {
		d.ids[i] = ports.Token(cands[k].id)
		d.probs[i] = probs[k]
	}
	return d, nil
}

type cand struct {
	id int
	z  float64
}

// candOrder sorts by z descending, then id ascending.
func candOrder(a, b cand) int {
	if c := cmp.Compare(b.z, a.z); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// topK returns the first k of cs under candOrder (0 < k < len(cs)), sorted, reordering cs in place. cs[:k] is
// kept as a heap whose root is the worst of the k best seen so far.
func topK(cs []cand, k int) []cand {
	h := cs[:k]
	siftDown := func(i int) {
		for {
			w, l, r := i, 2*i+1, 2*i+2
			if l < k && candOrder(h[l], h[w]) > 0 {
				w = l
			}
			if r < k && candOrder(h[r], h[w]) > 0 {
				w = r
			}
			if w == i {
				return
			}
			h[i], h[w] = h[w], h[i]
			i = w
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(i)
	}
	for _, c := range cs[k:] {
		if candOrder(c, h[0]) < 0 {
			h[0] = c
			siftDown(0)
		}
	}
	slices.SortFunc(h, candOrder)
	return h
}

func renorm(p []float64) []float64 {
	var s float64
	for _, v := range p {
		s += v
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// Prob returns the probability of tok (0 outside the support).
func (d *Dist) Prob(tok ports.Token) float64 {
	i, ok := slices.BinarySearch(d.ids, tok)
	if !ok {
		return 0
	}
	return d.probs[i]
}

// Support returns the tokens with non-zero probability in ascending order (shared; do not modify).
func (d *Dist) Support() []ports.Token { return d.ids }

// Sample draws by inverse CDF over ascending ids with u in [0,1); exclude (unless NoToken) is removed and the
// rest renormalised. It returns NoToken when no mass remains.
func (d *Dist) Sample(u float64, exclude ports.Token) ports.Token {
	var total float64
	last := -1
	for i, id := range d.ids {
		if id == exclude || d.probs[i] <= 0 {
			continue
		}
		total += d.probs[i]
		last = i
	}
	if last < 0 || total <= 0 {
		return ports.NoToken
	}
	u = min(max(u, 0), 1)
	target := u * total
	var cum float64
	for i, id := range d.ids {
		if id == exclude || d.probs[i] <= 0 {
			continue
		}
		cum += d.probs[i]
		if target < cum {
			return id
		}
	}
	return d.ids[last]
}
