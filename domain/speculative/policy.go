package speculative

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Policy reasons reported in RoundStats.Policy.
const (
	reasonFixed      = "fixed"       // Adaptive off: Config.BlockSize (or 1 without a drafter)
	reasonLength     = "length"      // shortened so the round cannot pass the token budget
	reasonExplore    = "explore"     // first measurements: plain decoding, then the largest (the configured) block
	reasonBest       = "best"        // the block size with the highest expected committed tokens per second
	reasonProbe      = "probe"       // periodic measurement of a block size not currently chosen
	reasonFallbackAR = "fallback-ar" // speculation is not expected to pay: plain decoding
)

const (
	defaultProbeEvery  = 16
	defaultProbeBudget = 0.02
	defaultDecay       = 0.2
	// costClip bounds how far one slow round may pull a cost average up (ema.addTime).
	costClip = 2
	// staleProbes is how many probe intervals after its last measurement plain decoding is probed whatever
	// the probes have spent (plainStale).
	staleProbes = 4
	// defaultMaxPendingRounds is PolicyConfig.MaxPendingRounds's default.
	defaultMaxPendingRounds = 1024
	// priorAcceptance is the per-slot conditional acceptance assumed before any observation.
	priorAcceptance = 0.5
	// slowWeight is the pseudo-count pulling a slot's recent-window estimate towards its long-run one.
	slowWeight = 0.5
	// sizeHalving is how many block sizes apart a slot's statistics count half (sizeWeight).
	sizeHalving = 2.0
)

// depthPolicy is the adaptive depth controller: a pure state machine fed with measured round costs per
// block size and observed per-slot acceptance. It picks the block size maximising
//
//	E[committed tokens | bs] / E[round time | bs],   E[committed | bs] = 1 + Σ_{k<bs} Π_{j≤k} r_j(bs)
//
// where r_j(bs) is the estimated probability that draft slot j of a bs-slot block is accepted given slot j−1
// was. The round time is draft(bs) + verify(bs) (verify including rollback), each measured per block size; an
// unmeasured size's draft time is interpolated between measured speculative sizes and extrapolated beyond them
// (a drafter runs exactly bs slots, so a shorter draft costs less and a longer one more), and its verify time
// likewise between all measured sizes, block 1 (plain decoding, no draft call) included.
//
// Acceptance is kept per block size, not pooled over all sizes: a drafter drafts exactly bs slots, and slot j of
// a 4-slot block is drafted beside other masks than slot j of a 16-slot one — a drafter trained on 16-slot
// blocks may accept well there and poorly in a block of 4. The estimate of r_j(bs) weighs every run size's
// statistics of slot j by how near that size is to bs (sizeWeight: 1 at bs itself, half sizeHalving sizes away):
// a size that has run leans on its own tests, with its neighbours' sharpening them where acceptance changes
// little with the size; a size that has not run gets the weighted estimate of the run sizes that hold a slot j,
// the nearest counting most; a slot no run size has tested inherits the estimate of the slot before it (the
// first slot a prior of 0.5). The first rounds measure plain decoding (a generation's first round is a warm-up
// and not a sample, so a fresh policy decodes plainly twice), then the largest block: maxBS, the drafter's
// configured block unless the request named another, which is the regime the drafter was trained in (a first
// round cut short by the token budget measures a shorter block, and the largest is explored in the first round
// with room for it). Every shorter size then starts from that block's slots, and running a shorter size replaces
// the borrowed estimate with its own.
//
// Probes measure a size that is not the current choice: while falling back, the most promising speculative
// size; while speculating, alternately the runner-up speculative size (the one whose measurement may change
// the choice: a size not run keeps the estimate it was last given) and plain decoding (refreshes the
// baseline; also whenever the runner-up does not fit the budget). A probe runs at least probeEvery rounds
// after the previous one and only when the probes' cumulative loss — each probe's round time (its drafter
// catch-up included) minus the time the displaced choice would have taken for the tokens the probe committed
// — plus this probe's expected loss stays within budget × the decode time observed so far; a plain-decoding
// probe also runs, whatever the probes have spent, once plain decoding went unmeasured staleProbes probe
// intervals (plainStale: a baseline left as a burst of contention made it would make speculation look cheap
// for the rest of a generation). Falling back, the speculative probe measures the best tree where it promises
// more than the chain it would measure (treeLeads). So the adaptive
// policy loses at most about that fraction to the best fixed choice it knows (plain decoding when speculation
// cannot pay), while still recovering from regime changes. The exploring round of the largest block is
// outside the budget: it is one round per policy (two when the first was cut short; PolicyMemory keeps them
// across generations), and charged it would hold every probe back until the budget had covered a block that
// may cost many plain steps.
//
// r_j blends two estimators: recent-window counts (passes and tests of slot j, both multiplied by
// 1−decay/2 every round, tested or not) shrunk towards a long-run moving average updated only when the slot
// is tested (weight decay). A slot tested only by rare probes thus forgets its old regime between probes, so
// one probe in a new regime moves the estimate most of the way, while a slot that is no longer tested (a size
// no longer run, or a slot just past where its chains stop) keeps its long-run value instead of drifting back
// to an optimistic prior.
//
// Choosing costs O(maxBS² × run sizes) per round (every size's chain of slots, each slot weighing the sizes
// that have run): microseconds at the block sizes drafters are trained with.
type depthPolicy struct {
	maxBS      int
	probeEvery int
	budget     float64
	decay      float64

	// sizes[bs-1][j-1]: acceptance statistics of slot j in a block of bs slots; nil until a round of bs is
	// observed (every such round tests slot 1, so a non-nil size has a tested first slot).
	sizes [][]slotStat
	// run lists the block sizes ≥ 2 with statistics (sizes[bs-1] != nil), ascending.
	run []int
	// near[d] is sizeWeight(d) for d < maxBS (precomputed: slotRate weighs O(maxBS² × run sizes) pairs a
	// round). Never written after construction, so clones share it.
	near   []float64
	draft  []ema // draft[bs-1]: final draft call in nanoseconds at block size bs ≥ 2
	verify []ema // verify[bs-1]: verify + rollback in nanoseconds at block size bs
	// fed is the context rows the drafter took in the round about to be observed (caughtUp).
	fed int
	// genRounds counts the rounds observed in the current generation (a remembered policy starts again at 0).
	// A generation's first round, when plain, pays one-off warm-up after prefill (measured 2.3× a steady step
	// on a 300M model) and is not taken as a cost sample.
	genRounds int
	rounds    int
	probes    int
	lastProbe int     // round count at the last probe
	lastPlain int     // round count at the last plain round observed
	probeRate float64 // when the pending round is a probe: the displaced choice's expected tokens per ns
	// probeWeight is how many sequences the pending probe delays (itself and, in a batched round, the others
	// sharing the round: each waits for its draft and rows); its loss counts that many times.
	probeWeight float64
	elapsed     float64 // nanoseconds of every observed round
	spent       float64 // nanoseconds the probes lost against the choices they displaced
	// batch prices blocks in shared rounds (PolicyConfig.Batch); nil when the generation runs alone.
	batch BatchCost
	// batchNS and batchOthers are the current round's prices by block size (scratch, reused), valid when
	// batchedNow (the latest best had every price).
	batchNS, batchOthers []float64
	batchedNow           bool
	// trees are the tree budgets the policy weighs against chains (enableTrees); empty without trees.
	// treesOff keeps them out of this generation's choices (disableTrees; a remembered policy loads with it
	// unset).
	trees    []treeArm
	treesOff bool
}

func newDepthPolicy(maxBS int, cfg PolicyConfig) *depthPolicy {
	p := &depthPolicy{maxBS: maxBS, probeEvery: cfg.ProbeEvery, budget: cfg.ProbeBudget, decay: cfg.Decay,
		batch: cfg.Batch}
	if p.probeEvery == 0 {
		p.probeEvery = defaultProbeEvery
	}
	if p.budget == 0 {
		p.budget = defaultProbeBudget
	}
	if p.decay == 0 {
		p.decay = defaultDecay
	}
	p.sizes = make([][]slotStat, maxBS)
	p.near = make([]float64, max(maxBS, 1))
	for d := range p.near {
		p.near[d] = sizeWeight(d)
	}
	p.draft = make([]ema, maxBS)
	p.verify = make([]ema, maxBS)
	return p
}

// choose returns the decision for the next round: a block size of at most limit (the budget-shortened
// maximum), why, and the estimates behind it.
func (p *depthPolicy) choose(limit int) Decision {
	bs, tree, why := p.plan(limit)
	d := Decision{Code: why, BlockSize: bs, MaxBlockSize: p.maxBS, Adaptive: true, ProbeEvery: p.probeEvery,
		ProbeBudget: p.budget, Tree: tree}
	if bs > limit {
		d.Code, d.BlockSize, d.Left = reasonLength, limit, limit
		if limit < 2 {
			d.Tree = 0
		}
	}
	if a := p.tree(d.Tree); a != nil {
		if plain, c := p.costOf(1), a.cost(); plain > 0 && c > 0 {
			d.Candidate, d.ExpectedTau, d.CostSteps = bs, a.expected(), c/plain
		}
		return d
	}
	switch d.Code {
	case reasonBest:
		d.Candidate = bs
	case reasonFallbackAR:
		d.Candidate, _ = p.best(2)
	}
	if plain := p.costOf(1); d.Candidate > 1 && plain > 0 {
		if c := p.costOf(d.Candidate); c > 0 {
			d.ExpectedTau, d.CostSteps = p.expected(d.Candidate), c/plain
		}
	}
	return d
}

// expected returns E[committed tokens | bs] = 1 + Σ_{k<bs} Π_{j≤k} r_j(bs).
func (p *depthPolicy) expected(bs int) float64 {
	e, chain, r := 1.0, 1.0, priorAcceptance
	for k := 1; k < bs; k++ {
		r = p.slotRate(bs, k, r)
		chain *= r
		e += chain
	}
	return e
}

// plan returns the block size the policy wants and why; limit is only consulted to tell whether the largest
// block can be explored now.
func (p *depthPolicy) plan(limit int) (int, int, string) {
	// A tree runs on its own in a batched round (the batched forward takes chains), delaying every other
	// sequence by a whole forward: trees are weighed only while the generation runs alone.
	if len(p.trees) == 0 || p.treesOff || p.maxBS <= 1 || !p.verify[0].ok || p.measured(1, +1, p.draft) == 0 || p.batchPrices() {
		bs, why := p.planChain(limit, nil)
		return bs, 0, why
	}
	// Trees: each budget is explored once (as the largest block is, outside the probe budget), then the best
	// measured tree competes with the best chain; probes take the other arms in turn.
	if b := p.unexploredTree(); b > 0 && limit >= p.maxBS {
		p.lastProbe = p.rounds
		return p.maxBS, b, reasonExplore
	}
	p.probeRate = 0
	chain, chainRate := p.best(1)
	tree, treeRate := p.bestTree(0)
	probeDue := p.rounds-p.lastProbe >= p.probeInterval()
	if tree == 0 || treeRate <= chainRate*(1+1e-9) {
		// A chain (or plain decoding) is the choice. A probe that would measure a speculative chain measures
		// the best tree instead where it promises more (the arm whose measurement may change the choice), and
		// every third probe re-measures it whatever it promises.
		if probeDue && tree > 0 && limit >= p.maxBS && (p.probes%3 == 2 || p.treeLeads(chain, treeRate)) &&
			p.tryProbe(p.maxBS, p.treeProbeLoss(tree, chainRate), chainRate, 1) {
			return p.maxBS, tree, reasonProbe
		}
		bs, why := p.planChain(limit, &choice{chain, chainRate})
		return bs, 0, why
	}
	// A tree is the choice. Probes alternate between the best chain (the best speculative one when plain
	// decoding is), plain decoding, and the runner-up tree; plain decoding first whenever it went stale.
	if probeDue {
		if p.plainStale() {
			// Take plain decoding's turn, so that the turns go on from it (the runner-up tree next).
			p.probes += (1 - p.probes%3 + 3) % 3
			if p.tryProbe(1, 0, treeRate, 1) {
				return 1, 0, reasonProbe
			}
		}
		switch p.probes % 3 {
		case 0:
			if chain < 2 {
				chain, _ = p.best(2)
			}
			if chain > 1 && p.tryProbe(chain, p.probeLoss(chain, treeRate), treeRate, 1) {
				return chain, 0, reasonProbe
			}
			p.probes++ // the turn passes on, so that a chain the budget holds back cannot hold plain decoding back too
		case 1:
			if p.tryProbe(1, 0, treeRate, 1) {
				return 1, 0, reasonProbe
			}
		default:
			if other, _ := p.bestTree(tree); other > 0 && p.tryProbe(p.maxBS, p.treeProbeLoss(other, treeRate), treeRate, 1) {
				return p.maxBS, other, reasonProbe
			}
			p.probes++ // nothing to probe in this turn: the next one is due at once
		}
	}
	return p.maxBS, tree, reasonBest
}

// tryProbe starts a probe of block size bs (1: plain decoding) and reports true when its expected loss (already
// weighed by the sequences it delays) still fits the budget, or when it probes a stale plain step (plainStale);
// rate is the displaced choice's expected tokens per ns and weight how many sequences the probe delays.
func (p *depthPolicy) tryProbe(bs int, loss, rate, weight float64) bool {
	if !(bs == 1 && p.plainStale()) && p.spent+loss > p.budget*p.elapsed {
		return false
	}
	p.probes++
	p.lastProbe = p.rounds
	p.probeRate, p.probeWeight = rate, weight
	return true
}

// plainStale reports whether plain decoding was last measured staleProbes probe intervals ago or longer: its
// probe then runs whatever the probes have spent. The baseline every choice is weighed against must not stay
// what a burst of contention made it (a plain step measured under a burst makes every speculative size look
// cheap beside it, and the speculation it then picks may lose what the budget was there to bound), yet
// refreshing it costs a plain step in the rounds where speculation pays most, so not every probe interval.
func (p *depthPolicy) plainStale() bool {
	// Not in a generation's first round: it is a warm-up, not a measurement (observe), and a forced probe there
	// would leave plain decoding as stale as before.
	return p.genRounds > 0 && p.rounds-p.lastPlain >= staleProbes*p.probeInterval()
}

// treeLeads reports whether the chains' next probe would measure a speculative block (falling back, or the
// runner-up's turn while a chain is the choice) and a tree of rate treeRate promises more than that block.
func (p *depthPolicy) treeLeads(chain int, treeRate float64) bool {
	var probe int
	switch {
	case chain == 1:
		probe, _ = p.best(2)
	case p.probes%2 == 1:
		return false // plain decoding's turn
	default:
		probe, _ = p.bestBut(2, chain)
	}
	if probe < 2 {
		return true
	}
	c := p.costOf(probe)
	return c <= 0 || treeRate > p.expected(probe)/c
}

// choice is a block size and its expected rate in tokens per nanosecond (best's answer).
type choice struct {
	bs   int
	rate float64
}

// planChain is the chains' plan: the block size the policy wants and why. known, when not nil, is best(1)'s
// answer for this round, already computed by the caller.
func (p *depthPolicy) planChain(limit int, known *choice) (int, string) {
	p.probeRate = 0
	if p.maxBS <= 1 {
		return 1, reasonFixed
	}
	if !p.verify[0].ok {
		return 1, reasonExplore
	}
	// The exploring round verifies the largest block: first when no speculative size is measured yet (a round
	// cut short by the token budget measures a shorter block instead), then once more, as soon as a
	// generation has room for it, while the largest block has never run.
	if p.measured(1, +1, p.draft) == 0 || !p.draft[p.maxBS-1].ok && limit >= p.maxBS {
		// Not charged to the probe budget: it is the one measurement of the drafter's own regime every
		// policy needs, one round of the largest block per policy (a PolicyMemory keeps it). Charged, a
		// largest block costing many plain steps would hold every probe back for hundreds of rounds, and one
		// unlucky first round would leave a drafter that pays at a shorter size unused that long.
		p.lastProbe = p.rounds
		return p.maxBS, reasonExplore
	}
	if known == nil {
		b, r := p.best(1)
		known = &choice{b, r}
	}
	best, rate := known.bs, known.rate
	if p.rounds-p.lastProbe >= p.probeInterval() {
		// Candidates in order; the first within the budget runs.
		var candidates [2]int
		switch {
		case best == 1:
			candidates[0], _ = p.best(2)
		case p.probes%2 == 1:
			candidates[0] = 1
		default:
			// The runner-up: with acceptance estimated per size, a size the policy does not run keeps the
			// estimate it was last given (or borrows one), so the next most promising size is the one whose
			// measurement may change the choice. Plain decoding when it does not fit the budget, so that the
			// baseline is still refreshed.
			candidates[0], _ = p.bestBut(2, best)
			candidates[1] = 1
		}
		for _, probe := range candidates {
			if probe < 1 || probe == best {
				continue
			}
			// A speculative probe must leave the budget holding after it, not only before it: one probe of a
			// slow block can cost many rounds' worth of time, which would otherwise overshoot the budget on
			// short generations. A plain-decoding probe is not held back by its estimated loss: that estimate
			// may be the stale one the probe is there to correct.
			loss := 0.0
			if probe > 1 {
				loss = p.probeLoss(probe, rate)
			}
			// A probe of a smaller block than the choice (plain decoding while speculating) adds no draft work
			// or rows to the round: it delays nobody else.
			weight := 1.0
			if probe > best {
				weight = p.probeDelays()
			}
			if p.tryProbe(probe, loss*weight, rate, weight) {
				return probe, reasonProbe
			}
		}
	}
	if best == 1 {
		return 1, reasonFallbackAR
	}
	return best, reasonBest
}

// probeDelays is how many sequences a probe of a larger block than the choice delays: 1 alone; in a batched
// round also the others sharing it, who wait for its draft and extra rows. A probe's loss is counted that many times against this
// sequence's budget, so the probes of all the batch's sequences together cost each of them about the budget
// (each sequence's own probes being rarer by probeInterval, but each costing everyone).
func (p *depthPolicy) probeDelays() float64 {
	if !p.batchedNow {
		return 1
	}
	return 1 + p.batchOthers[0]
}

// probeInterval is the least number of rounds between probes. In a batched round a probe's draft and extra
// rows delay every sequence of the batch, so each sequence probes that many times less often (by the tokens
// the others commit per round, about their number): the batch as a whole probes as often as one sequence
// alone would.
func (p *depthPolicy) probeInterval() int {
	if !p.batchedNow {
		return p.probeEvery
	}
	return int(math.Ceil(float64(p.probeEvery) * (1 + p.batchOthers[0])))
}

// best returns the block size of at least from with the highest expected throughput, and that throughput
// in tokens per nanosecond (0 when no size has a cost estimate). In a batched round (batchPrices) the
// throughput compared is the batch's: this sequence's expected tokens over the time of a round in which every
// sequence verifies a block of that size; the rate returned is still this sequence's own (its tokens over its
// own measured cost), which is what the probe budget accounts in.
func (p *depthPolicy) best(from int) (int, float64) { return p.bestBut(from, 0) }

// bestBut is best leaving out block size but.
func (p *depthPolicy) bestBut(from, but int) (int, float64) {
	batched := p.batchPrices()
	p.batchedNow = batched
	bestBS, bestRate, bestOwn := 0, 0.0, 0.0
	for bs := max(from, 1); bs <= p.maxBS; bs++ {
		c := p.costOf(bs)
		if c <= 0 || bs == but {
			continue
		}
		expected := p.expected(bs)
		rate := expected / c
		if batched {
			rate = expected / p.batchNS[bs-1]
		}
		// Strictly better only: ties keep the smaller block, which wastes less work.
		if rate > bestRate*(1+1e-9) {
			bestBS, bestRate, bestOwn = bs, rate, expected/c
		}
	}
	return bestBS, bestOwn
}

// batchPrices fills batchNS and batchOthers from the batch's cost model and reports whether every block
// size has a price (else the generation's own costs decide).
func (p *depthPolicy) batchPrices() bool {
	if p.batch == nil {
		return false
	}
	if len(p.batchNS) != p.maxBS {
		p.batchNS, p.batchOthers = make([]float64, p.maxBS), make([]float64, p.maxBS)
	}
	for bs := 1; bs <= p.maxBS; bs++ {
		ns, others, ok := p.batch.RoundCost(bs)
		if !ok || ns <= 0 {
			return false
		}
		p.batchNS[bs-1], p.batchOthers[bs-1] = ns, others
	}
	return true
}

// probeLoss is the expected time a round of block size bs loses against committing the same expected number of
// tokens at rate (tokens per nanosecond, the current choice's); 0 while either is unmeasured.
func (p *depthPolicy) probeLoss(bs int, rate float64) float64 {
	c := p.costOf(bs)
	if c <= 0 || rate <= 0 {
		return 0
	}
	expected := p.expected(bs)
	return max(0, c-expected/rate)
}

// slotStat holds one draft slot's acceptance statistics.
type slotStat struct {
	pass, tests float64 // recent-window counts (forgetting per round)
	slow        ema     // long-run rate (moving average per test)
}

// slotRate returns r_k(bs) given prev = r_{k-1}(bs) (the prior for k = 1), which it inherits when no run
// size has tested slot k. Every run size s longer than k contributes its statistics of slot k with weight
// sizeWeight(|bs − s|): the recent counts to the counts, the long-run rate to the base they are shrunk to.
func (p *depthPolicy) slotRate(bs, k int, prev float64) float64 {
	var pass, tests, slow, weights float64
	for _, s := range p.run {
		if s <= k {
			continue
		}
		st := &p.sizes[s-1][k-1]
		if !st.slow.ok {
			continue // never tested: its counts are 0 too
		}
		w := p.near[abs(bs-s)]
		pass += w * st.pass
		tests += w * st.tests
		slow += w * st.slow.v
		weights += w
	}
	base := prev
	if weights > 0 {
		base = slow / weights
	}
	return (pass + slowWeight*base) / (tests + slowWeight)
}

// sizeWeight is how much a slot's statistics at a block size d slots away count towards another size's
// estimate: 1 at the size itself, halving every sizeHalving slots. Near sizes draft a slot beside nearly
// the same masks and share their evidence; far ones barely count once a size has its own, and give an
// untested size its estimate until it has.
func sizeWeight(d int) float64 { return math.Exp2(-float64(d) / sizeHalving) }

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// acceptance returns r_j(bs) for draft slot j (1-based) of a bs-slot block.
func (p *depthPolicy) acceptance(bs, j int) float64 {
	r := priorAcceptance
	for k := 1; k <= j; k++ {
		r = p.slotRate(bs, k, r)
	}
	return r
}

// costOf returns the expected round time of bs in nanoseconds (0 when nothing is measured yet).
func (p *depthPolicy) costOf(bs int) float64 {
	v := p.estimate(p.verify, bs, 1, true)
	if bs == 1 || v <= 0 {
		return v
	}
	d := p.estimate(p.draft, bs, 2, true)
	if d <= 0 {
		return 0
	}
	return d + v
}

// estimate returns c's measured value at bs, or one interpolated linearly between the nearest measured sizes
// ≥ from; beyond the measured range it is extrapolated from the two nearest on one side when slope (a larger
// block never costing less than a smaller measured one, a smaller one at least its proportional share), else
// held constant.
func (p *depthPolicy) estimate(c []ema, bs, from int, slope bool) float64 {
	if c[bs-1].ok {
		return c[bs-1].v
	}
	lo, hi := p.measured(bs, -1, c), p.measured(bs, +1, c)
	if lo < from {
		lo = 0
	}
	switch {
	case lo > 0 && hi > 0:
		a, b := c[lo-1].v, c[hi-1].v
		return a + (b-a)*float64(bs-lo)/float64(hi-lo)
	case !slope && lo > 0:
		return c[lo-1].v
	case !slope && hi > 0:
		return c[hi-1].v
	case lo > 0:
		far := p.measured(lo, -1, c)
		if far < from {
			far = 0
		}
		return extrapolate(c, lo, far, bs)
	case hi > 0:
		return extrapolate(c, hi, p.measured(hi, +1, c), bs)
	}
	return 0
}

func extrapolate(c []ema, near, far, bs int) float64 {
	v := c[near-1].v
	est := v
	if far > 0 {
		est = v + (v-c[far-1].v)/float64(near-far)*float64(bs-near)
	}
	if bs > near {
		// A larger block never costs less than a smaller measured one.
		return max(est, v)
	}
	// A smaller block costs at most the larger measured one and at least its proportional share.
	return min(max(est, v*float64(bs)/float64(near)), v)
}

// measured returns the nearest block size strictly beyond bs in direction dir that c has measured, or 0.
func (p *depthPolicy) measured(bs, dir int, c []ema) int {
	for k := bs + dir; k >= 1 && k <= p.maxBS; k += dir {
		if c[k-1].ok {
			return k
		}
	}
	return 0
}

// observe records one finished round: its block size, accepted drafts and measured phase durations (draft is
// the final Draft call, catchUp the context-only calls before it that fed positions of plain rounds).
func (p *depthPolicy) observe(bs, accepted int, draft, catchUp, verify, rollback time.Duration) {
	cold := p.takeCatchUp()
	if bs < 1 || bs > p.maxBS {
		return
	}
	p.account(float64(draft+catchUp+verify+rollback), accepted)
	// Costs are averaged robustly against contention (ema.addTime): one round now and then runs a whole time
	// slice late, and a plain step that slow, averaged in as is, made speculation look cheap beside it for many
	// rounds (TestPolicyHoldsUpUnderContention).
	if bs > 1 {
		p.addDraft(&p.draft[bs-1], float64(draft), cold)
	}
	p.genRounds++
	if bs > 1 || p.genRounds > 1 {
		p.verify[bs-1].addTime(float64(verify+rollback), p.decay, costClip)
	}
	p.forget()
	if bs < 2 {
		if p.genRounds > 1 {
			p.lastPlain = p.rounds // a generation's first round measures nothing (a warm-up)
		}
		return
	}
	if p.sizes[bs-1] == nil {
		p.sizes[bs-1] = make([]slotStat, bs-1)
		i, _ := slices.BinarySearch(p.run, bs)
		p.run = slices.Insert(p.run, i, bs)
	}
	st := p.sizes[bs-1]
	for j := 1; j <= min(accepted+1, bs-1); j++ {
		x := b2f(j <= accepted)
		s := &st[j-1]
		if s.slow.ok {
			s.slow.addWeighted(x, p.decay)
		} else {
			// Halfway from the inherited estimate (the other sizes', or the slot before's): one unlucky
			// first test must not pin the slot at 0 (or 1) until it is tested again, which may take long for
			// a slot just past where the chains stop.
			s.slow = ema{v: (p.acceptance(bs, j) + x) / 2, ok: true}
		}
		s.tests++
		s.pass += x
	}
}

// caughtUp tells the policy how many context rows the drafter took in the round about to be observed (the
// positions committed since it last drafted: a round's worth in a run of speculative rounds, a whole plain
// stretch, or a prompt, after plain decoding). observe and observeTree take it.
func (p *depthPolicy) caughtUp(rows int) { p.fed = rows }

// takeCatchUp reports whether the round being observed caught the drafter up on more than a block's worth of
// context rows, and forgets the count. The drafter projects the context rows it is given into its caches in
// its next drafting call, so that call's time then carries a catch-up (measured on gocoder: 4–10 ms after a
// plain stretch or a prompt, against 0.5 in a run of tree rounds) that a size run round after round does not
// pay: taken as the size's price, it priced the size a probe measured after plain decoding out of the choice.
func (p *depthPolicy) takeCatchUp() bool {
	rows := p.fed
	p.fed = 0
	return rows > p.maxBS
}

// addDraft adds a draft-time sample x to e (ema.addTime), unless the draft caught up (takeCatchUp) and x is no
// cheaper than e's estimate: such a time overstates the size's price, so it may lower an estimate (the first
// one of a size measured only after plain rounds) but never raise it. While the policy falls back, nearly
// every speculative round catches up, so the estimate can only fall then; but a catch-up only ever adds time,
// so it falls towards the warm price, not below it (bar noise), and the rounds after a switch correct it.
func (p *depthPolicy) addDraft(e *ema, x float64, caughtUp bool) {
	if caughtUp && e.ok && x >= e.v {
		return
	}
	e.addTime(x, p.decay, costClip)
}

// account keeps the books of every observed round, chain or tree: the round count, the decode time, and what a
// probe cost beyond the displaced choice committing as many tokens (total nanoseconds, accepted drafts).
func (p *depthPolicy) account(total float64, accepted int) {
	p.rounds++
	p.elapsed += total
	if p.probeRate > 0 {
		p.spent += max(1, p.probeWeight) * max(0, total-float64(accepted+1)/p.probeRate)
		p.probeRate = 0
	}
}

// forget ages every slot's recent-window counts by one round (tested or not).
func (p *depthPolicy) forget() {
	keep := 1 - p.decay/2
	for _, st := range p.sizes {
		for j := range st {
			st[j].pass *= keep
			st[j].tests *= keep
		}
	}
}

// PolicyMemory carries an adaptive policy's state across generations (PolicyConfig.Memory). The zero value is
// empty and ready; it is safe for concurrent use.
type PolicyMemory struct {
	mu sync.Mutex
	p  *depthPolicy
}

// NewPolicyMemory returns an empty memory.
func NewPolicyMemory() *PolicyMemory { return &PolicyMemory{} }

// load returns a copy of the remembered policy when it was for the same largest block, else a fresh one.
func (m *PolicyMemory) load(maxBS int, cfg PolicyConfig) *depthPolicy {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p == nil || m.p.maxBS != maxBS {
		return newDepthPolicy(maxBS, cfg)
	}
	c := m.p.clone()
	c.genRounds = 0
	c.batch = cfg.Batch
	return c
}

// store remembers a copy of p.
func (m *PolicyMemory) store(p *depthPolicy) {
	c := p.clone()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.p = c
}

func (p *depthPolicy) clone() *depthPolicy {
	c := *p
	c.sizes = make([][]slotStat, len(p.sizes))
	for i, st := range p.sizes {
		c.sizes[i] = slices.Clone(st)
	}
	c.run = slices.Clone(p.run)
	c.draft = slices.Clone(p.draft)
	c.verify = slices.Clone(p.verify)
	c.trees = slices.Clone(p.trees)
	c.treesOff = false
	c.probeRate = 0
	c.batch, c.batchNS, c.batchOthers, c.batchedNow = nil, nil, nil, false
	return &c
}
