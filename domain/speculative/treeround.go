package speculative

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// treeAbility is what a generation verifies trees with: the sessions' abilities and the configuration.
type treeAbility struct {
	sess   ports.TreeVerifier
	draft  ports.TopDrafter
	budget int
	width  int
}

// treeAbility returns the generation's tree ability, or nil when its rounds verify chains: trees off, no
// drafter, a session or drafter without the ability (a constraint's or log-probabilities' decorator; a batch
// member's carries it), or sampling under VerifyResidual, whose rejection rule trees do not keep.
func (g *generation) treeAbility() *treeAbility {
	if g.cfg.Tree.Budget < 2 || g.draft == nil || g.maxBS < 2 {
		return nil
	}
	if !g.cfg.Sampling.Greedy() && g.d.noise == nil {
		return nil
	}
	tv, ok := g.sess.(ports.TreeVerifier)
	if !ok {
		return nil
	}
	td, ok := g.draft.(ports.TopDrafter)
	if !ok {
		return nil
	}
	return &treeAbility{sess: tv, draft: td, budget: g.cfg.Tree.Budget, width: g.cfg.Tree.width()}
}

// treeRound is round for a tree: draft bs slots with each slot's top candidates, build the tree under the
// decision's budget, verify it in one ForwardTree, walk it (acceptTree), keep the accepted path, commit.
func (g *generation) treeRound(ctx context.Context, dec Decision, rs RoundStats, remaining int) (bool, error) {
	clock := g.d.clock
	bs := dec.BlockSize
	preLen := g.sess.Len()
	anchor := g.seq[len(g.seq)-1]

	t0 := clock.Now()
	// A tree of dec.Tree nodes (the anchor one of them) reaches at most dec.Tree−1 slots deep: the drafter
	// proposes no more (the block is still drafted whole, its regime).
	prop, lastCall, err := g.draftBlock(ctx, anchor, bs, ports.TopRequest{K: g.tree.width, Slots: dec.Tree - 1, Narrow: !g.cfg.Tree.FullDraft})
	if err != nil {
		return false, err
	}
	rs.DraftTime = clock.Now().Sub(t0)
	tree := buildTree(anchor, prop.Top, dec.Tree, g.tree.width)
	rs.Block, rs.BlockSize = tree.tokens, len(tree.tokens)
	rs.Tree = &TreeRound{Parents: tree.parents, Slots: bs}

	t0 = clock.Now()
	g.detachPending()
	fr, err := g.tree.sess.ForwardTree(ctx, tree.tokens, tree.parents, ports.ForwardOptions{Taps: true, Sampling: g.samp})
	if err != nil {
		return false, fmt.Errorf("verify tree of %d nodes: %w", len(tree.tokens), err)
	}
	rs.VerifyTime = clock.Now().Sub(t0)

	path, next, err := acceptTree(tree, fr.Greedy, fr.Dists, g.d.noise, len(g.seq))
	if err != nil {
		return false, fmt.Errorf("verify tree of %d nodes: %w", len(tree.tokens), err)
	}
	accepted := make([]ports.Token, len(path))
	for i, v := range path {
		accepted[i] = tree.tokens[v]
	}
	rs.Accepted = len(path)
	rs.Tree.Path = path
	cand, chunk, finish := g.clip(accepted, next, remaining)
	n := len(chunk)
	rs.Committed = n

	// Keep the anchor and the first n−1 accepted nodes: the positions committed this round.
	t0 = clock.Now()
	keep := append([]int{0}, path[:n-1]...)
	taps, err := g.tree.sess.KeepPath(ctx, keep)
	if err != nil {
		return false, fmt.Errorf("keep the accepted path of %d nodes: %w", len(keep), err)
	}
	rs.RollbackTime = clock.Now().Sub(t0)
	rs.Rollback = RollbackTreePath
	if got := g.sess.Len(); got != preLen+n {
		return false, fmt.Errorf("after keeping the accepted path the session holds %d positions, want %d", got, preLen+n)
	}
	if taps == nil || taps.Rows() != n {
		return false, fmt.Errorf("keeping the accepted path returned taps for %d positions, want %d", rowsOf(taps), n)
	}
	g.pending = append(g.pending, pendingTaps{taps: taps})
	if g.policy != nil {
		g.policy.observeTree(dec.Tree, bs, len(path), lastCall, rs.DraftTime-lastCall, rs.VerifyTime+rs.RollbackTime)
	}
	return g.commit(ctx, rs, cand, chunk, finish)
}
