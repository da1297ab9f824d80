package speculative

import "time"

// treeArm is the adaptive policy's account of verification trees of one node budget (TreeConfig): a tree
// round drafts the largest block with each slot's top candidates and verifies at most budget nodes, so its
// price and its yield are measured per budget, like a chain's per block size. Acceptance is not modelled
// per slot here: a tree's accepted length depends on where the candidates sit in each slot's ranking, which
// the per-round average captures directly.
type treeArm struct {
	budget   int
	accepted ema // drafts accepted per round (the bonus not counted)
	draft    ema // the final draft call, nanoseconds
	verify   ema // the tree's forward and keeping its path, nanoseconds
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

// unexploredTree returns the smallest tree budget never measured (0: none), which the policy explores
// once, as it does the largest chain block, after the chains' first measurements.
func (p *depthPolicy) unexploredTree() int {
	for i := range p.trees {
		if !p.trees[i].verify.ok {
			return p.trees[i].budget
		}
	}
	return 0
}

// bestTree returns the measured tree budget with the highest expected rate other than but (0: none) and
// that rate in tokens per nanosecond.
func (p *depthPolicy) bestTree(but int) (int, float64) {
	best, rate := 0, 0.0
	for i := range p.trees {
		a := &p.trees[i]
		if c := a.cost(); c > 0 && a.budget != but {
			if r := a.expected() / c; r > rate*(1+1e-9) {
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
	cold := p.takeCatchUp()
	a := p.tree(b)
	if a == nil {
		return
	}
	p.account(float64(draft+catchUp+verify), accepted)
	p.genRounds++
	if bs >= p.maxBS {
		p.addDraft(&a.draft, float64(draft), cold)
		a.verify.addTime(float64(verify), p.decay, costClip)
		a.accepted.addWeighted(float64(accepted), p.decay)
	}
	p.forget()
}
