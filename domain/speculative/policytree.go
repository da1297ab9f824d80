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

// treeExploreRounds is how many rounds the policy explores each tree arm for (interleaved, outside the probe
// budget) before weighing it: a tree's accepted length varies from round to round (on gocoder one round may
// accept 1 of a tree whose mean is 2.15), and an arm judged on one unlucky round was ruled out for good, its
// probes being rare.
const treeExploreRounds = 3

// treeDoubt is how many standard errors up a tree's yield may be for the policy to explore or probe it.
const treeDoubt = 2

// treeExploreMax is how many rounds at most an arm whose estimate cannot yet tell whether it pays is explored
// for (unexploredTree).
const treeExploreMax = 16

// treeDecayShare is the share of the policy's decay a tree arm's yield decays by per round it runs: one round
// gives one sample of the accepted length (a chain's slots give one test each), whose spread on a drafter
// like gocoder's is as large as the margin by which a tree pays, so its average must span more rounds to
// tell a tree that pays by 10% from one that does not.
const treeDecayShare = 0.25

// mean is a moving average whose first samples are averaged evenly: the k-th of the first 1/decay samples
// weighs 1/k, later ones decay (an exponential moving average without the bias of its first sample, which an
// ema takes outright).
type mean struct {
	v   float64
	sq  float64 // the samples' mean squared deviation from v, averaged alike
	n   int     // samples so far
	eff float64 // effective sample count: n, then (2−decay)/decay once the average decays
}

func (m *mean) add(x, decay float64) {
	m.n++
	w := max(1/float64(m.n), decay)
	d := x - m.v
	m.v += w * d
	m.sq = (1 - w) * (m.sq + w*d*d)
	m.eff = min(float64(m.n), (2-decay)/decay)
}

// spread is the average's standard error (0 before two samples).
func (m *mean) spread() float64 {
	if m.n < 2 {
		return 0
	}
	return math.Sqrt(m.sq * float64(m.n) / float64(m.n-1) / m.eff)
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

// unexploredTree returns the tree budget to explore next (0: none): the arm measured least, the smaller budget
// first, among those with fewer than treeExploreRounds rounds, then among those with fewer than
// treeExploreMax whose yield one standard error up would beat rate (the best chain's). The arms are thus
// explored in turn, each round of one beside a round of the others, after the chains' first measurements,
// and for as long as their few rounds cannot tell whether they pay: a tree clearly below the chains leaves
// exploring after a few rounds, one near them gets the rounds that tell.
func (p *depthPolicy) unexploredTree(rate float64) int {
	next, fewest := 0, treeExploreRounds
	for i := range p.trees {
		if n := p.trees[i].accepted.n; n < fewest {
			next, fewest = p.trees[i].budget, n
		}
	}
	if next > 0 {
		return next
	}
	fewest = treeExploreMax
	for i := range p.trees {
		a := &p.trees[i]
		if c := a.cost(); a.accepted.n < fewest && c > 0 && (a.expected()+treeDoubt*a.accepted.spread())/c >= rate {
			next, fewest = a.budget, a.accepted.n
		}
	}
	return next
}

// bestTree returns the measured tree budget with the highest expected rate other than but (0: none) and
// that rate in tokens per nanosecond. The tree that is the policy's current choice is given the benefit of
// its estimate's doubt (its yield one standard error up): a tree's yield varies so much from round to round
// that a short run of poor rounds pulls its estimate below plain decoding's now and then even where the tree
// pays by 10%, and a tree left then waits for rare probes to be chosen again. Run while it is the choice, its
// estimate settles on its true yield, so a tree that does not pay is still left within a few rounds.
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
				e += a.accepted.spread()
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
