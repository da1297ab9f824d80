package model

import (
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// Tree is the shape of a verification tree (ports.TreeVerifier) that every backend needs: each node's depth
// and its ancestry (root … node), which are the positions it sits at and the block rows it sees.
type Tree struct {
	Parents  []int
	Depth    []int
	MaxDepth int
	// anc holds every node's ancestry, root first, node i's at anc[off[i]:off[i+1]]: parents come before
	// their children, so ancestries are in node order and each is its parent's plus the node.
	anc []int
	off []int
}

// NewTree checks parents (parents[i] in [−1, i)) and returns the tree they describe.
func NewTree(parents []int) (*Tree, error) {
	T := len(parents)
	if T == 0 {
		return nil, errors.New("empty tree")
	}
	t := &Tree{Parents: parents, Depth: make([]int, T), off: make([]int, T+1)}
	for i, p := range parents {
		if p < -1 || p >= i {
			return nil, fmt.Errorf("node %d: parent %d outside [-1,%d) (a parent comes before its child, -1 for a root)", i, p, i)
		}
		if p >= 0 {
			t.Depth[i] = t.Depth[p] + 1
		}
		t.MaxDepth = max(t.MaxDepth, t.Depth[i])
		t.off[i+1] = t.off[i] + t.Depth[i] + 1
	}
	t.anc = make([]int, t.off[T])
	for i, p := range parents {
		a := t.anc[t.off[i]:t.off[i+1]]
		if p >= 0 {
			copy(a, t.Path(p))
		}
		a[len(a)-1] = i
	}
	return t, nil
}

// Len returns the number of nodes.
func (t *Tree) Len() int { return len(t.Parents) }

// Path returns node i's ancestry, root … i (its depth + 1 nodes, in depth order). Callers must not write it.
func (t *Tree) Path(i int) []int { return t.anc[t.off[i]:t.off[i+1]:t.off[i+1]] }

// CheckPath validates a KeepPath argument: empty, or a root followed by a child of each node before.
func (t *Tree) CheckPath(path []int) error {
	for k, p := range path {
		switch {
		case p < 0 || p >= t.Len():
			return fmt.Errorf("path[%d] = %d is not a node of the tree of %d nodes", k, p, t.Len())
		case k == 0 && t.Parents[p] != -1:
			return fmt.Errorf("path[0] = %d is not a root (its parent is %d)", p, t.Parents[p])
		case k > 0 && t.Parents[p] != path[k-1]:
			return fmt.Errorf("path[%d] = %d is not a child of path[%d] = %d (its parent is %d)", k, p, k-1, path[k-1], t.Parents[p])
		}
	}
	return nil
}

// CheckTree validates a ForwardTree of tokens shaped by parents with opts against the session's position, a
// vocabulary of vocab tokens and a context of contextLength positions, and returns the tree: the deepest
// node must fit in the context (node i sits at position N + depth(i)).
func (p Position) CheckTree(tokens []ports.Token, parents []int, opts ports.ForwardOptions, vocab, contextLength int) (*Tree, error) {
	switch {
	case len(tokens) == 0:
		return nil, errors.New("no tokens")
	case len(parents) != len(tokens):
		return nil, fmt.Errorf("%d parents for %d tokens", len(parents), len(tokens))
	case opts.Rows != 0:
		return nil, fmt.Errorf("rows %d: a tree returns one row per node (rows must be 0)", opts.Rows)
	case p.Recurrent && p.Rec != p.N:
		return nil, fmt.Errorf("recurrent state is at position %d but the KV caches at %d (finish the rollback with Restore or ReplayTape)", p.Rec, p.N)
	}
	t, err := NewTree(parents)
	if err != nil {
		return nil, err
	}
	if p.N+t.MaxDepth+1 > contextLength {
		return nil, fmt.Errorf("%d held + a tree of depth %d > %d: %w", p.N, t.MaxDepth+1, contextLength, ports.ErrContextFull)
	}
	if err := CheckTokens(tokens, vocab); err != nil {
		return nil, err
	}
	if opts.Sampling != nil {
		if err := opts.Sampling.Validate(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// ConvRow returns, for a causal conv of kc taps run along path (the block rows of a node's ancestry, or a
// kept path), which row of the window X = [conv state (kc−1 rows); the block's rows] feeds step m of the
// last `want` steps of the sequence [conv state; path's rows]: rows of the conv state first when the path
// is shorter than the window. want = kc gives a node's conv window (its taps in order), want = kc−1 the
// conv state a kept path leaves.
func ConvRow(path []int, kc, want, m int) int {
	idx := kc - 1 + len(path) - want + m // index in [conv state; path's rows]
	if idx < kc-1 {
		return idx
	}
	return kc - 1 + path[idx-(kc-1)]
}
