package ops

import (
	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/model"
)

// Tree is a checked verification tree (ports.TreeVerifier, model.Tree) as one pass runs it. A pass with a
// Tree runs the block's rows as the tree's nodes, not as a sequence:
//   - node i sits at position pos+depth(i) (pos: the session's length): its queries and keys are rotated
//     there (the nodes of one depth in one rotation call);
//   - attention: node i sees the cache and its own ancestors (itself included), through an explicit mask;
//     the block's keys and values are appended to the cache in node order (the session compacts them to
//     the kept path, KeepKV);
//   - Gated DeltaNet: node i's convolution reads its ancestors' rows (then the conv buffer's, past a
//     root), and its recurrence starts from its parent's state (the layer's state for a root). The layer's
//     state is left as it was and the pass records, per layer, a tape of the block (Layers) from which
//     ReplayPath rebuilds the state at the end of any root-to-node path with the forward's own ops.
//
// A Tree's index arrays and mask are built on the first graph that asks and cached: use a Tree on one
// graph only.
type Tree struct {
	*model.Tree
	// Layers holds each Gated DeltaNet layer's tape of the block (nil for other layers), filled by the pass.
	Layers []*GDNTape

	order, inverse []int32 // the nodes sorted by depth (stably) and each node's place in that order
	levels         []int   // levels[d]..levels[d+1]−1 are the places of the nodes at depth d
	chain          bool    // node i is at depth i: the block is a plain sequence

	orderA, inverseA arr
	mask             arr
	maskN            int
	conv             map[int]arr
}

// NewTree is the pass's view of the checked tree mt, for a model of layers layers.
func NewTree(mt *model.Tree, layers int) *Tree {
	T := mt.Len()
	t := &Tree{Tree: mt, Layers: make([]*GDNTape, layers), chain: true, conv: map[int]arr{}}
	for i, d := range mt.Depth {
		t.chain = t.chain && d == i
	}
	t.levels = make([]int, mt.MaxDepth+2)
	for _, d := range mt.Depth {
		t.levels[d+1]++
	}
	for d := range mt.MaxDepth + 1 {
		t.levels[d+1] += t.levels[d]
	}
	next := append([]int(nil), t.levels[:mt.MaxDepth+1]...)
	t.order, t.inverse = make([]int32, T), make([]int32, T)
	for i, d := range mt.Depth {
		t.order[next[d]], t.inverse[i] = int32(i), int32(next[d])
		next[d]++
	}
	return t
}

// rope rotates x [1, heads, T, width] with rs, node i at position pos+depth(i).
func (t *Tree) rope(g *graph.Graph, x arr, rs graph.RopeSpec, pos int) arr {
	if t.chain {
		return g.Rope(x, rs, pos)
	}
	if t.orderA == 0 {
		t.orderA = graph.UploadI32(g, t.order, len(t.order))
		t.inverseA = graph.UploadI32(g, t.inverse, len(t.inverse))
	}
	// RoPE advances the position along the sequence axis (−2): the nodes, sorted by depth, move to the
	// batch axis ([T, heads, 1, width]), so that every node of one level turns by that level's position.
	sh := graph.ShapeOf(x)
	xs := g.Transpose(g.Take(x, t.orderA, 2), 2, 1, 0, 3)
	parts := make([]arr, 0, len(t.levels)-1)
	for d := range len(t.levels) - 1 {
		lv := g.Slice(xs, []int{t.levels[d], 0, 0, 0}, []int{t.levels[d+1], sh[1], 1, sh[3]})
		parts = append(parts, g.Rope(lv, rs, pos+d))
	}
	return g.Take(g.Transpose(g.Concat(0, parts...), 2, 1, 0, 3), t.inverseA, 2)
}

// visibility is the [T, n+T] mask of the nodes over n cached keys and the block's keys: every cached key,
// and the node's ancestors and itself.
func (t *Tree) visibility(g *graph.Graph, n int) arr {
	if t.mask != 0 && t.maskN == n {
		return t.mask
	}
	T := len(t.Parents)
	cols := n + T
	m := make([]bool, T*cols)
	for i := range T {
		for c := range n {
			m[i*cols+c] = true
		}
		for _, j := range t.Path(i) {
			m[i*cols+n+j] = true
		}
	}
	t.mask, t.maskN = graph.UploadBool(g, m, T, cols), n
	return t.mask
}

// convRows is the [T] index into X = [conv buffer (kc−1 rows) ; block rows] of the row the convolution's
// tap j reads for each node: along the node's ancestry, and past its root the buffer's rows, as a chain
// reads X[t+j] (model.ConvRow).
func (t *Tree) convRows(g *graph.Graph, j, kc int) arr {
	if a, ok := t.conv[j]; ok {
		return a
	}
	idx := make([]int32, t.Len())
	for i := range idx {
		idx[i] = int32(model.ConvRow(t.Path(i), kc, kc, j))
	}
	a := graph.UploadI32(g, idx, len(idx))
	t.conv[j] = a
	return a
}

// ReplayPath rebuilds a Gated DeltaNet layer's state at the end of path (a root, then each next node a
// child of the one before; not empty) from the layer's tree tape, with the forward's op order (decay,
// then the rank-1 add) so it equals the state the tree pass computed at path's last node bit for bit.
// pathIdx is path uploaded as int32 [len(path)].
func ReplayPath(g *graph.Graph, w *model.DeltaNet[*Weight], tp *GDNTape, path []int, pathIdx arr) (ssm, conv arr) {
	Hv, dv, dk, C, Kc := w.ValueHeads, w.ValueDim, w.KeyDim, w.Channels(), w.ConvKernel
	S := tp.S0
	for _, t := range path {
		at := g.Row(tp.Alpha, t, tp.t, Hv, 1, 1)
		kt := g.Row(tp.Keys, t, tp.t, Hv, 1, dk)
		dt := g.Row(tp.Delta, t, tp.t, Hv, dv, 1)
		S = g.Mul(at, S)
		S = g.Add(S, g.Mul(dt, kt))
	}
	L := len(path)
	X := g.Concat(0, tp.CS0, g.Take(tp.Rows, pathIdx, 0))
	return S, g.Slice(X, []int{L, 0}, []int{L + Kc - 1, C})
}

// KeepKV returns c's arrays (in c.Arrays()'s order) holding the first n positions then the block's rows
// at keep (block rows n+keep[0], n+keep[1], …; keepIdx is keep uploaded as int32): the cache after a tree
// pass of T nodes, compacted to the kept path. heads and dim are the cache's; an 8-bit cache's scales have
// width 1. An empty result (n = 0, nothing kept) is 0.
func KeepKV(g *graph.Graph, c *KVCache, n, T int, keep []int, keepIdx arr, heads, dim int) []arr {
	var out []arr
	for j, h := range c.Arrays() {
		d := dim
		if j >= 2 { // an 8-bit cache's scales: one per position and head
			d = 1
		}
		rows := func(lo, hi int) arr { return g.Slice(*h, []int{0, 0, lo, 0}, []int{1, heads, hi, d}) }
		var x arr
		switch {
		case len(keep) == 0:
			if n > 0 {
				x = rows(0, n)
			}
		case isPrefix(keep):
			x = rows(0, n+len(keep)) // the kept rows are already in place
		default:
			x = g.Take(rows(n, n+T), keepIdx, 2)
			if n > 0 {
				x = g.Concat(2, rows(0, n), x)
			}
		}
		out = append(out, x)
	}
	return out
}

// isPrefix reports whether keep is 0, 1, ….
func isPrefix(keep []int) bool {
	for i, k := range keep {
		if k != i {
			return false
		}
	}
	return true
}
