package speculative

import (
	"math"
	"time"
)

// treeArm is the adaptive policy's account of verification trees of one node budget (TreeConfig): a tree
// round drafts the largest block with each slot's top candidates and verifies at most budget nodes, so its
// price and its yield are measured per budget, like a chain's per block size. Acceptance is not modelled
// per slot here: a tree's accepted length depends on where the candidates sit in each slot's ranking, which
// the per-round average captures directly.
type treeArm struct {
	budget   int
	accepted mean // drafts accepted per round (the bonus not counted)
	draft    ema  // the final draft call, nanoseconds
	verify   ema  // the tree's forward and keeping its path, nanoseconds
}

// The tree arms' statistics. A tree's accepted length varies widely from round to round (on gocoder one round
// may accept 1 drafted token of a tree whose mean is 2.15), by as much as the margin by which a tree pays
// over plain decoding (5–12% there), so the policy keeps each arm's yield as an average over many rounds with
// its standard error, and lets that error decide how far it explores and how firmly it keeps a tree.
const (
	// treeDecayShare is the share of the policy's decay by which an arm's yield average decays per round
	// (a window of about 160 rounds, averaged evenly until then): one round is one sample, where a chain
	// round tests each of its slots.
	treeDecayShare = 1.0 / 16
	// treeDoubt is how many standard errors up an arm's yield may be for the policy to explore or probe it.
	treeDoubt = 2
	// treeHold is how many standard errors up the yield of the tree that is the choice is taken when
	// weighing it against the others: the choice is left for a better estimate, not for its own noise.
	treeHold = 1.5
	// treeExploreMax is how many rounds at most an arm is explored for (unexploredTree); past it, probes
	// measure it.
	treeExploreMax = 16
	// treeSpreadPrior is how many samples the prior spread of an arm's yield counts for (mean.spread).
	treeSpreadPrior = 2
	// treeSlack and treeShift are the cumulative-sum test's slack and threshold (mean.add), in standard
	// deviations of one round's yield: a shift of one and a half deviations (a tree accepting 2.1 drafts a
	// round on code, 0.3 on chat) is found within about seven rounds, while a stationary yield's noise passes
	// the threshold about once in thousands of rounds.
	treeSlack = 0.75
	treeShift = 5
	// treeRestart is how many samples an average restarted by the shift test starts from (its last ones).
	treeRestart = 5
)

// mean is a moving average whose first samples are averaged evenly: the k-th of the first 1/decay samples
// weighs 1/k, later ones decay (an exponential moving average without the bias of its first sample, which an
// ema takes outright, so that one unlucky first round judged an arm). A long window tells a tree that pays by
// a few percent from one that does not, but would take a hundred rounds to follow a new regime (a tree that
// paid on code meets chat): a two-sided cumulative-sum test watches the samples' deviations from the average
// (beyond treeSlack standard deviations each), and when either sum passes treeShift standard deviations the
// yield has shifted, and the average starts again from its last treeRestart samples.
type mean struct {
	v        float64
	sq       float64 // the samples' mean squared deviation from v, averaged alike
	n        int     // samples so far (since the last restart)
	eff      float64 // effective sample count: n, then (2−decay)/decay once the average decays
	last     [treeRestart]float64
	up, down float64 // the cumulative sums of deviations above and below v
}

// add takes sample x; decay is the long average's.
func (m *mean) add(x, decay float64) {
	copy(m.last[1:], m.last[:])
	m.last[0] = x
	if sd := math.Sqrt(m.sq); m.n >= 2*treeRestart && sd > 0 {
		m.up = max(0, m.up+x-m.v-treeSlack*sd)
		m.down = max(0, m.down+m.v-x-treeSlack*sd)
		if max(m.up, m.down) > treeShift*sd {
			m.v, m.n, m.eff, m.up, m.down = 0, treeRestart, treeRestart, 0, 0
			for _, y := range m.last {
				m.v += y / treeRestart
			}
			return
		}
	}
	m.n++
	w := max(1/float64(m.n), decay)
	d := x - m.v
	m.v += w * d
	m.sq = (1 - w) * (m.sq + w*d*d)
	m.eff = min(float64(m.n), (2-decay)/decay)
}

// spread is the average's standard error (0 before any sample). The samples' own spread is blended with a
// prior one of treeSpreadPrior pseudo-samples, (1+v)², about what a tree's accepted length varies by from
// round to round: two unlucky rounds that both accepted nothing have no spread of their own, and taken alone
// would rule the tree out for good.
func (m *mean) spread() float64 {
	if m.n == 0 {
		return 0
	}
	prior := (1 + m.v) * (1 + m.v)
	v := (m.sq*float64(m.n) + prior*treeSpreadPrior) / (float64(m.n) + treeSpreadPrior)
	return math.Sqrt(v / m.eff)
}

// enableTrees gives the policy tree arms of these budgets (ascending), keeping the measurements of a
// remembered policy that had the same ones.
func (p *depthPolicy) enableTrees(budgets []int) {
	p.treesOff = false
	same := len(p.trees) == len(budgets)
	for i := 0; same && i < len(budgets); i++ {
		same = p.trees[i].budget == budgets[i]
	}
	if same {
		return
	}
	p.trees = make([]treeArm, len(budgets))
	for i, b := range budgets {
		p.trees[i].budget = b
	}
}

// disableTrees keeps the policy off trees for this generation (its sessions cannot verify them) without
// forgetting what a remembered policy measured of them.
func (p *depthPolicy) disableTrees() { p.treesOff = true }

// cost returns a round of arm's expected time in nanoseconds (0 while unmeasured).
func (a *treeArm) cost() float64 {
	if !a.verify.ok || !a.draft.ok {
		return 0
	}
	return a.draft.v + a.verify.v
}

// expected returns a round of arm's expected committed tokens.
func (a *treeArm) expected() float64 { return 1 + a.accepted.v }

// unexploredTree returns the tree budget to explore next (0: none), and whether it was never measured: an arm
// never measured, the smaller budget first; then, among the arms with fewer than treeExploreMax rounds whose
// yield treeDoubt standard errors up would beat rate (the choice's), the one measured least, the smaller
// budget first (the cheaper round). A tree clearly below the choice thus leaves exploring after a round or
// two, while one near it gets the rounds that tell; the choice itself may be among them, a tree chosen on a
// few rounds' evidence then running as exploring rounds, weighed like probes, until it has them. An average
// the shift test started again (mean.add) holds few rounds, so its tree is explored again.
func (p *depthPolicy) unexploredTree(rate float64) (int, bool) {
	for i := range p.trees {
		if p.trees[i].accepted.n == 0 {
			return p.trees[i].budget, true
		}
	}
	next, fewest := 0, treeExploreMax
	for i := range p.trees {
		a := &p.trees[i]
		c := a.cost()
		if a.accepted.n >= fewest || c <= 0 {
			continue
		}
		if (a.expected()+treeDoubt*a.accepted.spread())/c >= rate {
			next, fewest = a.budget, a.accepted.n
		}
	}
	return next, false
}

// bestTree returns the measured tree budget with the highest expected rate other than but (0: none) and
// that rate in tokens per nanosecond. The tree that is the policy's current choice is given the benefit of
// its estimate's doubt (its yield treeHold standard errors up): a tree's yield varies so much from round to
// round that a short run of poor rounds pulls its estimate below plain decoding's now and then even where
// the tree pays by 10%, and a tree left then waits for rare probes to be chosen again. Run while it is the
// choice, its estimate settles on its true yield, so a tree that does not pay is still left.
func (p *depthPolicy) bestTree(but int) (int, float64) { return p.treeBy(but, false) }

// promisingTree is bestTree with every tree given the benefit of its estimate's doubt: the tree to probe,
// which may be one whose few rounds were unlucky rather than the one whose estimate is highest, and its
// optimistic rate.
func (p *depthPolicy) promisingTree(but int) (int, float64) { return p.treeBy(but, true) }

func (p *depthPolicy) treeBy(but int, optimistic bool) (int, float64) {
	best, rate := 0, 0.0
	for i := range p.trees {
		a := &p.trees[i]
		if c := a.cost(); c > 0 && a.budget != but {
			e := a.expected()
			switch {
			case optimistic:
				e += treeDoubt * a.accepted.spread()
			case p.choice.tree == a.budget:
				e += treeHold * a.accepted.spread()
			}
			if r := e / c; r > rate*(1+1e-9) {
				best, rate = a.budget, r
			}
		}
	}
	return best, rate
}

// tree returns the arm of budget b (nil when there is none).
func (p *depthPolicy) tree(b int) *treeArm {
	for i := range p.trees {
		if p.trees[i].budget == b {
			return &p.trees[i]
		}
	}
	return nil
}

// treeProbeLoss is probeLoss for a tree of budget b.
func (p *depthPolicy) treeProbeLoss(b int, rate float64) float64 {
	a := p.tree(b)
	if a == nil || a.cost() <= 0 || rate <= 0 {
		return 0
	}
	return max(0, a.cost()-a.expected()/rate)
}

// observeTree records one finished tree round of budget b over a block of bs: accepted drafts, the final
// draft call, the context catch-up before it, and the tree's verify with keeping its path. It keeps the
// probe budget's books as observe does. The arm measures trees over the largest block only: a round the
// token budget cut to a shorter block drafts fewer slots and verifies a shallower tree, and taken as the
// arm's price (a much cheaper time replaces the average outright, ema.addTime) and yield it would misstate
// both for the rounds to come.
func (p *depthPolicy) observeTree(b, bs, accepted int, draft, catchUp, verify time.Duration) {
	a := p.tree(b)
	if a == nil {
		return
	}
	p.account(float64(draft+catchUp+verify), accepted)
	p.genRounds++
	if bs >= p.maxBS {
		a.draft.addTime(float64(draft), p.decay, costClip)
		a.verify.addTime(float64(verify), p.decay, costClip)
		a.accepted.add(float64(accepted), p.decay*treeDecayShare)
	}
	p.forget()
}
