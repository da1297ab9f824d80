package speculative

import (
	"container/heap"
	"fmt"
	"math"

	"github.com/higgs-go/higgs/ports"
)

// defaultTreeWidth is TreeConfig.Width's default: candidates per slot.
const defaultTreeWidth = 4

// minProb floors a candidate's probability in the tree's scores, so a zero (or NaN) probability still orders
// the candidates as the drafter listed them instead of tying every path through it at −∞.
const minProb = 1e-30

// TreeConfig configures tree verification: instead of a chain of one guess per slot, the target verifies, in
// one forward, a tree of the drafter's most probable candidates for each slot (ports.TopDrafter) and keeps
// its longest accepted path (ports.TreeVerifier). It needs both abilities — a session behind a constraint or
// log-probabilities has neither, and verifies chains (a batch member's sessions carry them: domain/batch runs
// a tree's calls on their own in the shared round) — and greedy decoding or VerifyMatch (a tree's
// branches are point-mass guesses: the target's own token at each node is followed when a child carries it,
// which is plain decoding's token, so the output is the target's exactly).
type TreeConfig struct {
	// Budget is the most nodes a tree verifies, anchor included (its forward has that many rows); 0 turns
	// trees off. Without the adaptive policy every speculative round verifies a tree of Budget nodes; with it
	// the policy chooses chain or tree, and the budget among the powers of two from 4 up to Budget (and
	// Budget), from measured cost and acceptance.
	Budget int
	// Width is the most candidates a slot contributes (default 4).
	Width int
	// FullDraft drafts a tree's block through every layer on every slot, the drafter's exact proposals. By
	// default a tree's draft is narrow (ports.TopRequest.Narrow): the layers after the first run on the
	// anchor and the slots the tree can reach alone, a fraction of the drafter's work for a small tree, at
	// proposals that are the drafter's approximation (measured on gocoder: the same acceptance). The output
	// is the target's either way.
	FullDraft bool
}

// width returns Width or its default.
func (c TreeConfig) width() int {
	if c.Width == 0 {
		return defaultTreeWidth
	}
	return c.Width
}

// budgets lists the budgets the adaptive policy weighs: the powers of two from 4 below Budget, then Budget.
func (c TreeConfig) budgets() []int {
	var out []int
	for b := 4; b < c.Budget; b *= 2 {
		out = append(out, b)
	}
	if c.Budget >= 2 {
		out = append(out, c.Budget)
	}
	return out
}

func (c TreeConfig) validate() []error {
	var errs []error
	if c.Budget < 0 || c.Budget == 1 {
		errs = append(errs, fmt.Errorf("tree budget %d must be 0 (no trees) or ≥ 2", c.Budget))
	}
	if c.Width < 0 {
		errs = append(errs, fmt.Errorf("tree width %d must be ≥ 1 (0: the default %d)", c.Width, defaultTreeWidth))
	}
	return errs
}

// draftTree is a verification tree: node 0 is the anchor (parent −1, depth 0); node i > 0 carries a candidate
// for slot depth[i], its parent parents[i] < i at the slot before.
type draftTree struct {
	tokens   []ports.Token
	parents  []int
	depth    []int
	children [][]int
}

// buildTree grows a tree from the anchor under budget nodes, best first: a node's score is the product of
// the drafter's probabilities along its path, and the tree holds the budget−1 highest-scoring paths' nodes
// (the score only falls along a path, so a node's parent always scores at least as high and is taken
// first). Slot s's children of any node are top[s−1]'s first width candidates: DFlash drafts every slot of
// a block at once from the anchor and the context, so a slot's candidates do not depend on the path above.
// Ties go to the earlier candidate, then the shallower node.
func buildTree(anchor ports.Token, top [][]ports.Candidate, budget, width int) draftTree {
	t := draftTree{tokens: []ports.Token{anchor}, parents: []int{-1}, depth: []int{0}, children: [][]int{nil}}
	if len(top) == 0 || budget < 2 {
		return t
	}
	logp := func(slot, rank int) float64 {
		// Not max(p, minProb): Go's max returns NaN for a NaN argument, and a NaN score compares neither above
		// nor below any other, which breaks the frontier's order.
		p := top[slot][rank].Prob
		if !(p >= minProb) {
			p = minProb
		}
		return math.Log(p)
	}
	h := &frontier{}
	seq := 0
	push := func(score float64, parent, slot, rank int) {
		if slot < len(top) && rank < min(width, len(top[slot])) {
			heap.Push(h, frontierItem{score: score + logp(slot, rank), parent: parent, slot: slot, rank: rank, seq: seq})
			seq++
		}
	}
	score := []float64{0}
	push(0, 0, 0, 0)
	for len(t.tokens) < budget && h.Len() > 0 {
		it := heap.Pop(h).(frontierItem)
		v := len(t.tokens)
		t.tokens = append(t.tokens, top[it.slot][it.rank].Token)
		t.parents = append(t.parents, it.parent)
		t.depth = append(t.depth, it.slot+1)
		t.children = append(t.children, nil)
		t.children[it.parent] = append(t.children[it.parent], v)
		score = append(score, it.score)
		push(score[it.parent], it.parent, it.slot, it.rank+1) // the next sibling
		push(it.score, v, it.slot+1, 0)                       // the first child
	}
	return t
}

// frontierItem is a candidate node not yet in the tree.
type frontierItem struct {
	score              float64
	parent, slot, rank int
	seq                int // push order: ties go to the earlier push
}

// frontier is a max-heap of frontierItems by score.
type frontier []frontierItem

func (f frontier) Len() int { return len(f) }
func (f frontier) Less(i, j int) bool {
	if f[i].score != f[j].score {
		return f[i].score > f[j].score
	}
	return f[i].seq < f[j].seq
}
func (f frontier) Swap(i, j int) { f[i], f[j] = f[j], f[i] }
func (f *frontier) Push(x any)   { *f = append(*f, x.(frontierItem)) }
func (f *frontier) Pop() any {
	old := *f
	it := old[len(old)-1]
	*f = old[:len(old)-1]
	return it
}

// acceptTree walks the tree from the anchor: at node v the target's token y_v is its greedy token (greedy
// decoding) or its draw with the position's own number (VerifyMatch: dists[v] is the distribution of the
// token at sequence position pos+depth(v)); when a child of v carries y_v the walk moves there, else it stops
// and y_v is the round's bonus token. It returns the accepted path's nodes after the anchor and the bonus.
// Under either rule the token committed at each position is the one plain decoding commits there, whatever
// the tree holds.
func acceptTree(t draftTree, greedy []ports.Token, dists []ports.Distribution, noise ports.PositionRand, pos int) ([]int, ports.Token, error) {
	n := len(t.tokens)
	if noise == nil && len(greedy) != n || noise != nil && len(dists) != n {
		return nil, ports.NoToken, fmt.Errorf("accept tree: %d target rows (%d distributions) for %d nodes", len(greedy), len(dists), n)
	}
	var path []int
	v := 0
	for {
		var y ports.Token
		if noise == nil {
			y = greedy[v]
		} else {
			if dists[v] == nil {
				return nil, ports.NoToken, fmt.Errorf("accept tree: nil distribution at node %d", v)
			}
			if y = dists[v].Sample(noise.Uniform(pos+t.depth[v]), ports.NoToken); y == ports.NoToken {
				return nil, ports.NoToken, fmt.Errorf("accept tree: node %d: target distribution has no mass", v)
			}
		}
		next := -1
		for _, c := range t.children[v] {
			if t.tokens[c] == y {
				next = c
				break
			}
		}
		if next < 0 {
			return path, y, nil
		}
		path = append(path, next)
		v = next
	}
}
