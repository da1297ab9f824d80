package portfake

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.Distribution = (*Dist)(nil)

// Dist is an explicit distribution over a small vocabulary.
type Dist struct {
	p []float64
}

// NewDist returns a distribution over len(probs) tokens; probs must be non-negative with a positive sum and
// are normalised.
func NewDist(probs []float64) (*Dist, error) {
	sum := 0.0
	for i, v := range probs {
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("probability %v of token %d is not a finite non-negative number", v, i)
		}
		sum += v
	}
	if !(sum > 0) {
		return nil, errors.New("distribution has no mass")
	}
	p := make([]float64, len(probs))
	for i, v := range probs {
		p[i] = v / sum
	}
	return &Dist{p: p}, nil
}

// Probs returns a copy of the probabilities, indexed by token.
func (d *Dist) Probs() []float64 { return slices.Clone(d.p) }

// Prob returns the probability of tok (0 outside the vocabulary).
func (d *Dist) Prob(tok ports.Token) float64 {
	if tok < 0 || int(tok) >= len(d.p) {
		return 0
	}
	return d.p[tok]
}

// Argmax returns the most likely token (lowest id on ties).
func (d *Dist) Argmax() ports.Token {
	best := 0
	for i, v := range d.p {
		if v > d.p[best] {
			best = i
		}
	}
	return ports.Token(best)
}

// Sample draws by inverse CDF with u in [0,1), optionally excluding one token and renormalising.
func (d *Dist) Sample(u float64, exclude ports.Token) ports.Token {
	total := 0.0
	for i, v := range d.p {
		if ports.Token(i) != exclude {
			total += v
		}
	}
	if !(total > 0) {
		return ports.NoToken
	}
	target := u * total
	last := ports.NoToken
	acc := 0.0
	for i, v := range d.p {
		if ports.Token(i) == exclude || v == 0 {
			continue
		}
		last = ports.Token(i)
		acc += v
		if target < acc {
			return last
		}
	}
	return last // rounding left target ≥ the summed mass: the last token with mass
}

// transform applies temperature, top-k, top-p and min-p (in that order, each renormalising) to logits, the
// Hugging Face order. Temperature 0 gives a point mass on the argmax.
func transform(logits []float64, s ports.SamplingParams) *Dist {
	n := len(logits)
	p := make([]float64, n)
	if s.Greedy() {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		p[best] = 1
		return &Dist{p: p}
	}
	hi := slices.Max(logits)
	sum := 0.0
	for i, v := range logits {
		p[i] = math.Exp((v - hi) / s.Temperature)
		sum += p[i]
	}
	normalise(p, sum)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	// Descending probability, lower id first on ties.
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case p[a] > p[b]:
			return -1
		case p[a] < p[b]:
			return 1
		}
		return 0
	})
	if s.TopK > 0 && s.TopK < n {
		for _, i := range order[s.TopK:] {
			p[i] = 0
		}
		normalise(p, floatsSum(p))
	}
	if s.TopP > 0 && s.TopP < 1 {
		acc, cut := 0.0, false
		for _, i := range order {
			if cut {
				p[i] = 0
				continue
			}
			acc += p[i]
			cut = acc >= s.TopP
		}
		normalise(p, floatsSum(p))
	}
	if s.MinP > 0 {
		floor := s.MinP * p[order[0]]
		for i, v := range p {
			if v < floor {
				p[i] = 0
			}
		}
		normalise(p, floatsSum(p))
	}
	return &Dist{p: p}
}

func floatsSum(p []float64) float64 {
	s := 0.0
	for _, v := range p {
		s += v
	}
	return s
}

func normalise(p []float64, sum float64) {
	for i := range p {
		p[i] /= sum
	}
}
