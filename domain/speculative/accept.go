package speculative

import (
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// maxResidualTries bounds the rejection sampler of the general residual max(0, p−q). Its expected number of
// tries, given that the residual is needed at all, is 1/Σ max(0, p−q); reaching this bound means p and q
// agree to within about 1e-6 in total variation while the draft was still rejected, which a sane pair of
// distributions practically never produces.
const maxResidualTries = 1 << 20

// emptyResidual is the residual mass below which the residual counts as empty: far below any probability a
// sampler resolves, and above the rounding of a sum of float64 probabilities.
const emptyResidual = 1e-12

// acceptGreedy applies the greedy rule of docs/model-math.md#acceptance-rules: greedy[i] is the target's argmax after
// block slot i, so draft i+1 is accepted while drafts[i] == greedy[i]. It returns the number of accepted drafts and
// the bonus/correction token greedy[accepted]. greedy must hold exactly len(drafts)+1 tokens.
func acceptGreedy(drafts, greedy []ports.Token) (int, ports.Token, error) {
	if len(greedy) != len(drafts)+1 {
		return 0, ports.NoToken, fmt.Errorf("accept: %d target tokens for %d drafts, want %d",
			len(greedy), len(drafts), len(drafts)+1)
	}
	a := 0
	for a < len(drafts) && drafts[a] == greedy[a] {
		a++
	}
	return a, greedy[a], nil
}

// acceptSampled applies lossless speculative sampling (docs/model-math.md#acceptance-rules). ps[i] is the target
// distribution after block slot i (len(drafts)+1 of them); qs[i], when qs is non-nil, is the distribution
// drafts[i] was drawn from, and nil qs means point-mass drafts. Draft i is accepted with probability
// min(1, p(d)/q(d)); on the first rejection the correction is drawn from the residual ∝ max(0, p−q); if every
// draft is accepted the bonus is drawn from the last p. All randomness comes from rnd.
//
// A rejection with an empty residual (p ≤ q everywhere, so p and q agree but for rounding: a draft with
// q(d) a hair above p(d) can still be rejected) draws the correction from p itself, as the drafter's authors do
// (their _rejection_sample falls back to the target's distribution when the residual sums to 0). Where q
// overshoots p by a constant factor c ≥ 1 (stored probabilities summing past 1) that keeps the output
// exactly p: P(y) = p(y)/c + (1 − 1/c)·p(y).
func acceptSampled(drafts []ports.Token, qs, ps []ports.Distribution, rnd ports.Rand) (int, ports.Token, error) {
	if len(ps) != len(drafts)+1 {
		return 0, ports.NoToken, fmt.Errorf("accept: %d target distributions for %d drafts, want %d",
			len(ps), len(drafts), len(drafts)+1)
	}
	if qs != nil && len(qs) != len(drafts) {
		return 0, ports.NoToken, fmt.Errorf("accept: %d draft distributions for %d drafts", len(qs), len(drafts))
	}
	for i, d := range drafts {
		p := ps[i]
		if p == nil || (qs != nil && qs[i] == nil) {
			return 0, ports.NoToken, fmt.Errorf("accept: nil distribution at slot %d", i)
		}
		q := 1.0
		if qs != nil {
			q = qs[i].Prob(d)
			if !(q > 0) {
				return 0, ports.NoToken, fmt.Errorf("accept: draft token %d at slot %d has probability %v under its own distribution", d, i+1, q)
			}
		}
		if rnd.Float64() < min(1, p.Prob(d)/q) {
			continue
		}
		var y ports.Token
		var err error
		if qs == nil {
			// Point-mass draft: the residual max(0, p−δ_d) is p with d removed, renormalised; it is empty
			// only when p is all on d, and then the fallback draws from p.
			y = p.Sample(rnd.Float64(), d)
		} else {
			y, err = sampleResidual(p, qs[i], rnd)
			if err != nil {
				return 0, ports.NoToken, fmt.Errorf("accept: slot %d: %w", i+1, err)
			}
		}
		if y == ports.NoToken {
			// The residual is empty: fall back to the target's distribution.
			if y = p.Sample(rnd.Float64(), ports.NoToken); y == ports.NoToken {
				return 0, ports.NoToken, fmt.Errorf("accept: slot %d: target distribution has no mass", i+1)
			}
		}
		return i, y, nil
	}
	last := ps[len(drafts)]
	if last == nil {
		return 0, ports.NoToken, fmt.Errorf("accept: nil distribution at slot %d", len(drafts))
	}
	y := last.Sample(rnd.Float64(), ports.NoToken)
	if y == ports.NoToken {
		return 0, ports.NoToken, errors.New("accept: target distribution has no mass")
	}
	return len(drafts), y, nil
}

// acceptMatch applies sample-and-match (VerifyMatch): ps[i] is the target distribution of the token at
// sequence position pos+i (len(drafts)+1 of them); the target's token there is ps[i].Sample(noise.Uniform(pos+i)),
// and drafts[i] is accepted iff it equals that token. It returns the number of accepted drafts and the target's
// token at the first mismatch (or after the last draft) — the very token plain decoding draws at that position
// with the same numbers, which is what makes the output independent of how it was split into blocks.
func acceptMatch(drafts []ports.Token, ps []ports.Distribution, noise ports.PositionRand, pos int) (int, ports.Token, error) {
	if len(ps) != len(drafts)+1 {
		return 0, ports.NoToken, fmt.Errorf("accept: %d target distributions for %d drafts, want %d",
			len(ps), len(drafts), len(drafts)+1)
	}
	for i, p := range ps {
		if p == nil {
			return 0, ports.NoToken, fmt.Errorf("accept: nil distribution at slot %d", i)
		}
		y := p.Sample(noise.Uniform(pos+i), ports.NoToken)
		if y == ports.NoToken {
			return 0, ports.NoToken, fmt.Errorf("accept: slot %d: target distribution has no mass", i)
		}
		if i < len(drafts) && drafts[i] == y {
			continue
		}
		return i, y, nil
	}
	return 0, ports.NoToken, errors.New("accept: no target distribution") // unreachable: len(ps) ≥ 1
}

// sampleResidual draws from r ∝ max(0, p−q) knowing p and q only through Prob and Sample: propose y ~ p and
// keep it with probability max(0, p(y)−q(y))/p(y), which is ≤ 1, so this is exact rejection sampling. It
// returns NoToken when the residual is empty: once the distinct tokens proposed bound its mass — Σ over them
// of max(0, p−q), plus the p-mass of every token not yet proposed — to at most emptyResidual (or, failing
// that, after maxResidualTries proposals, which a residual of mass r survives with probability about
// e^(−r·2^20): the output distribution then differs from p's by at most 1/(e·2^20) ≈ 3.5e-7 in total variation).
func sampleResidual(p, q ports.Distribution, rnd ports.Rand) (ports.Token, error) {
	seen := map[ports.Token]bool{}
	covered, mass := 0.0, 0.0 // p-mass of the tokens proposed so far, and their residual mass
	for range maxResidualTries {
		y := p.Sample(rnd.Float64(), ports.NoToken)
		if y == ports.NoToken {
			return ports.NoToken, errors.New("target distribution has no mass")
		}
		py := p.Prob(y)
		if !(py > 0) {
			continue
		}
		qy := q.Prob(y)
		if rnd.Float64() < 1-qy/py {
			return y, nil
		}
		if !seen[y] {
			seen[y] = true
			covered += py
			mass += max(0, py-qy)
		}
		if mass+max(0, 1-covered) <= emptyResidual {
			return ports.NoToken, nil
		}
	}
	return ports.NoToken, nil
}

// sampleFirst picks the first token from the prefill's last row, with the number draw returns when sampling.
func sampleFirst(fr ports.ForwardResult, greedy bool, draw func() float64) (ports.Token, error) {
	if greedy {
		if len(fr.Greedy) != 1 {
			return ports.NoToken, fmt.Errorf("prefill returned %d greedy rows, want 1", len(fr.Greedy))
		}
		return fr.Greedy[0], nil
	}
	if len(fr.Dists) != 1 || fr.Dists[0] == nil {
		return ports.NoToken, fmt.Errorf("prefill returned %d distributions, want 1", len(fr.Dists))
	}
	y := fr.Dists[0].Sample(draw(), ports.NoToken)
	if y == ports.NoToken {
		return ports.NoToken, errors.New("prefill distribution has no mass")
	}
	return y, nil
}
