package speculative

import "time"

// Policy reasons reported in RoundStats.Policy.
const (
	reasonFixed      = "fixed"       // Adaptive off: Config.BlockSize (or 1 without a drafter)
	reasonLength     = "length"      // shortened so the round cannot pass the token budget
	reasonExplore    = "explore"     // first measurements of the largest block and of plain decoding
	reasonBest       = "best"        // the block size with the highest expected committed tokens per second
	reasonProbe      = "probe"       // periodic measurement of a block size not currently chosen
	reasonFallbackAR = "fallback-ar" // speculation is not expected to pay: plain decoding
)

const (
	defaultProbeEvery = 16
	defaultDecay      = 0.2
	// priorAcceptance is the per-slot conditional acceptance assumed before any observation.
	priorAcceptance = 0.5
	// slowWeight is the pseudo-count pulling a slot's recent-window estimate towards its long-run one.
	slowWeight = 0.5
)

// depthPolicy is the adaptive depth controller: a pure state machine fed with measured round costs per
// block size and observed per-slot acceptance. It picks the block size maximising
//
//	E[committed tokens | bs] / E[round time | bs],   E[committed | bs] = 1 + Σ_{k<bs} Π_{j≤k} r_j
//
// where r_j is the estimated probability that draft slot j is accepted given slot j−1 was, and the round time
// (draft + verify + rollback) of an unmeasured size is interpolated from measured ones. Block 1 is plain
// decoding (no draft call). Every probeEvery rounds it measures a size it is not using so that it recovers
// from regime changes.
//
// r_j blends two estimators: recent-window counts (passes and tests of slot j, both multiplied by
// 1−decay/2 every round, tested or not) shrunk towards a long-run moving average updated only when the slot
// is tested (weight decay). A slot tested only by rare probes thus forgets its old regime between probes, so
// one probe in a new regime moves the estimate most of the way, while a slot that is no longer tested (just
// past the chosen block) keeps its long-run value instead of drifting back to an optimistic prior. Slots
// never tested inherit the estimate of the slot before them (the first one a prior of 0.5).
type depthPolicy struct {
	maxBS      int
	probeEvery int
	decay      float64

	slots  []slotStat // slots[j-1]: acceptance statistics of draft slot j
	cost   []ema      // cost[bs-1]: round time in nanoseconds at block size bs
	rounds int
	probes int
}

func newDepthPolicy(maxBS int, cfg PolicyConfig) *depthPolicy {
	p := &depthPolicy{maxBS: maxBS, probeEvery: cfg.ProbeEvery, decay: cfg.Decay}
	if p.probeEvery == 0 {
		p.probeEvery = defaultProbeEvery
	}
	if p.decay == 0 {
		p.decay = defaultDecay
	}
	p.slots = make([]slotStat, max(maxBS-1, 0))
	p.cost = make([]ema, maxBS)
	return p
}

// choose returns the block size for the next round, at most limit (the budget-shortened maximum), and why.
func (p *depthPolicy) choose(limit int) (int, string) {
	bs, why := p.plan()
	if bs > limit {
		return limit, reasonLength
	}
	return bs, why
}

func (p *depthPolicy) plan() (int, string) {
	if p.maxBS <= 1 {
		return 1, reasonFixed
	}
	if !p.cost[p.maxBS-1].ok {
		return p.maxBS, reasonExplore
	}
	if !p.cost[0].ok {
		return 1, reasonExplore
	}
	best := p.best()
	if p.rounds > 0 && p.rounds%p.probeEvery == 0 {
		// Alternate probes between the largest block (refreshes every slot's acceptance) and plain
		// decoding (refreshes the baseline cost), skipping the one already chosen.
		p.probes++
		probe := p.maxBS
		if best == p.maxBS || (best > 1 && p.probes%2 == 0) {
			probe = 1
		}
		return probe, reasonProbe
	}
	if best == 1 {
		return 1, reasonFallbackAR
	}
	return best, reasonBest
}

// best returns the block size with the highest expected throughput.
func (p *depthPolicy) best() int {
	bestBS, bestRate := 1, 0.0
	expected := 1.0
	chain := 1.0
	for bs := 1; bs <= p.maxBS; bs++ {
		if bs > 1 {
			chain *= p.acceptance(bs - 1)
			expected += chain
		}
		c := p.costOf(bs)
		if c <= 0 {
			continue
		}
		// Strictly better only: ties keep the smaller block, which wastes less work.
		if rate := expected / c; rate > bestRate*(1+1e-9) {
			bestBS, bestRate = bs, rate
		}
	}
	return bestBS
}

// slotStat holds one draft slot's acceptance statistics.
type slotStat struct {
	pass, tests float64 // recent-window counts (forgetting per round)
	slow        ema     // long-run rate (moving average per test)
}

// acceptance returns the estimate of r_j for draft slot j (1-based).
func (p *depthPolicy) acceptance(j int) float64 {
	r := priorAcceptance
	for k := 1; k <= j; k++ {
		s := p.slots[k-1]
		base := r
		if s.slow.ok {
			base = s.slow.v
		}
		r = (s.pass + slowWeight*base) / (s.tests + slowWeight)
	}
	return r
}

// costOf returns the measured round time of bs, or one interpolated (linearly between the nearest measured
// sizes, extrapolated from the two nearest on one side, assuming cost grows with the block).
func (p *depthPolicy) costOf(bs int) float64 {
	if p.cost[bs-1].ok {
		return p.cost[bs-1].v
	}
	lo, hi := p.measured(bs, -1), p.measured(bs, +1)
	switch {
	case lo > 0 && hi > 0:
		a, b := p.cost[lo-1].v, p.cost[hi-1].v
		return a + (b-a)*float64(bs-lo)/float64(hi-lo)
	case lo > 0:
		return p.extrapolate(lo, p.measured(lo, -1), bs)
	case hi > 0:
		return p.extrapolate(hi, p.measured(hi, +1), bs)
	}
	return 0
}

func (p *depthPolicy) extrapolate(near, far, bs int) float64 {
	v := p.cost[near-1].v
	est := v
	if far > 0 {
		est = v + (v-p.cost[far-1].v)/float64(near-far)*float64(bs-near)
	}
	if bs > near {
		// A larger block never costs less than a smaller measured one.
		return max(est, v)
	}
	// A smaller block costs at most the larger measured one and at least its proportional share.
	return min(max(est, v*float64(bs)/float64(near)), v)
}

// measured returns the nearest measured block size strictly beyond bs in direction dir, or 0.
func (p *depthPolicy) measured(bs, dir int) int {
	for k := bs + dir; k >= 1 && k <= p.maxBS; k += dir {
		if p.cost[k-1].ok {
			return k
		}
	}
	return 0
}

// observe records one finished round: its block size, accepted drafts and measured phase durations.
func (p *depthPolicy) observe(bs, accepted int, draft, verify, rollback time.Duration) {
	if bs < 1 || bs > p.maxBS {
		return
	}
	p.rounds++
	p.cost[bs-1].addWeighted(float64(draft+verify+rollback), p.decay)
	keep := 1 - p.decay/2
	for j := range p.slots {
		p.slots[j].pass *= keep
		p.slots[j].tests *= keep
	}
	for j := 1; j <= min(accepted+1, bs-1); j++ {
		s := &p.slots[j-1]
		x := b2f(j <= accepted)
		s.tests++
		s.pass += x
		s.slow.addWeighted(x, p.decay)
	}
}
