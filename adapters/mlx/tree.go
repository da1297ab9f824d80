package mlx

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/ports"
)

// Tree verification (ports.TreeVerifier) runs the tree's nodes as one block through the ordinary layers
// with ops.Pass.Tree set: per-node positions for RoPE, an ancestor mask for attention, and the Gated
// DeltaNet recurrence along each node's ancestry. The attention caches take every node's keys and values
// (in node order); the recurrent layers keep their state and a tape of the block. KeepPath then compacts
// the caches to the kept path and replays the tape along it (ops.ReplayPath), which needs no per-node copy
// of the recurrent state: only the block's decays, innovations, keys and raw rows are kept.

// errTreePending refuses every session call but KeepPath and Close between ForwardTree and KeepPath.
var errTreePending = errors.New("mlx: a verification tree is pending: only KeepPath or Close may follow ForwardTree")

// pendingTree is what ForwardTree leaves for KeepPath.
type pendingTree struct {
	tree *ops.Tree
	taps bool // ForwardTree asked for taps (s.taped holds every node's)
}

// usable refuses a call on a closed session or one holding a tree.
func (s *Session) usable() error {
	switch {
	case s.closed:
		return errClosed
	case s.tree != nil:
		return errTreePending
	}
	return nil
}

// ForwardTree runs tokens as the nodes of the tree parents describes (see ports.TreeVerifier). On a
// target split across a pipeline every rank runs the tree on its own layers (ring.OpTree).
func (s *Session) ForwardTree(ctx context.Context, tokens []ports.Token, parents []int, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	fail := func(err error) (ports.ForwardResult, error) {
		return ports.ForwardResult{}, fmt.Errorf("mlx forward tree: %w", err)
	}
	if err := s.usable(); err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	a := &s.t.m.Arch
	mt, err := s.pos.CheckTree(tokens, append([]int(nil), parents...), opts, a.Vocab, a.ContextLength)
	if err != nil {
		return fail(err)
	}
	T := len(tokens)
	wantLogits := opts.Logits || opts.Sampling != nil
	s.gen++
	s.replay = false
	if err := s.t.rt.Do(func() error { s.dropLast(); return nil }); err != nil {
		return fail(err)
	}
	tr := ops.NewTree(mt, a.Layers)
	r, err := s.run(ctx, tokens, T, opts.Taps, false, wantLogits, tr)
	if err != nil {
		return fail(err)
	}
	s.tree = &pendingTree{tree: tr, taps: opts.Taps}
	res := ports.ForwardResult{Greedy: make([]ports.Token, T)}
	copy(res.Greedy, r.greedy)
	if opts.Taps {
		taps := &Taps{sess: s, rows: T}
		if r.taps != 0 {
			taps.a, taps.width = r.taps, s.taps.Len()*a.Hidden
		}
		s.taped, res.Taps = taps, taps
	}
	if opts.Sampling != nil {
		for i := range T {
			d, err := sampling.New(r.logits[i*a.Vocab:(i+1)*a.Vocab], *opts.Sampling)
			if err != nil {
				return fail(fmt.Errorf("node %d: %w", i, err))
			}
			res.Dists = append(res.Dists, d)
		}
	}
	if opts.Logits {
		res.Logits = r.logits
	}
	return res, nil
}

// workTree is a worker's part of rank 0's ForwardTree (c: ring.OpTree), on this rank's layers.
func (s *Session) workTree(ctx context.Context, c ring.Ctrl) error {
	mt, err := model.NewTree(ints(c.Payload))
	if err != nil {
		return err
	}
	s.gen++
	s.replay = false
	if err := s.t.rt.Do(func() error { s.dropLast(); return nil }); err != nil {
		return err
	}
	tr := ops.NewTree(mt, s.t.m.Arch.Layers)
	r, err := s.run(ctx, make([]ports.Token, c.A), int(c.B), c.Flags&ring.FlagTaps != 0, false, c.Flags&ring.FlagLogits != 0, tr)
	if err != nil {
		return err
	}
	if r.taps != 0 {
		s.freeAll([]arr{r.taps})
	}
	s.tree = &pendingTree{tree: tr}
	return nil
}

func int32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func ints(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// KeepPath keeps the nodes of path and drops the rest of the pending tree (see ports.TreeVerifier): the
// attention caches keep the path's rows at positions Len()..Len()+len(path)−1 and every recurrent layer
// replays its tape along the path.
func (s *Session) KeepPath(ctx context.Context, path []int) (ports.Taps, error) {
	fail := func(err error) (ports.Taps, error) { return nil, fmt.Errorf("mlx keep path: %w", err) }
	switch {
	case s.closed:
		return fail(errClosed)
	case s.tree == nil:
		return fail(errors.New("no tree is pending (KeepPath follows ForwardTree)"))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	pt := s.tree
	tr := pt.tree
	if err := tr.CheckPath(path); err != nil {
		return fail(err)
	}
	if err := s.broadcast(ring.Ctrl{Op: ring.OpKeepPath, Payload: int32s(path)}); err != nil {
		return fail(err)
	}
	a := &s.t.m.Arch
	n, T, L := s.pos.N, len(tr.Parents), len(path)
	var kept *Taps
	if pt.taps {
		kept = &Taps{sess: s, rows: L}
	}
	err := s.t.rt.Do(func() error {
		if s.t.closed {
			return errTargetClosed
		}
		g := graph.New(s.t.rt, "mlx keep path")
		defer g.Release()
		var idx arr
		if L > 0 {
			p32 := make([]int32, L)
			for k, v := range path {
				p32[k] = int32(v)
			}
			idx = graph.UploadI32(g, p32, L)
		}
		type kvUpd struct {
			c    *ops.KVCache
			arrs []arr
		}
		type gdnUpd struct {
			st        *ops.GDNState
			ssm, conv arr
		}
		var kvs []kvUpd
		var gdns []gdnUpd
		var outs []arr
		for _, c := range s.st.kv {
			if c == nil || c.K == 0 {
				continue
			}
			u := kvUpd{c, ops.KeepKV(g, c, n, T, path, idx, a.KVHeads, a.HeadDim)}
			kvs = append(kvs, u)
			for _, x := range u.arrs {
				if x != 0 {
					outs = append(outs, x)
				}
			}
		}
		if L > 0 {
			for i, st := range s.st.gdn {
				if st == nil {
					continue
				}
				ssm, conv := ops.ReplayPath(g, s.t.m.Layers[i].GDN, tr.Layers[i], path, idx)
				gdns = append(gdns, gdnUpd{st, ssm, conv})
				outs = append(outs, ssm, conv)
			}
		}
		var tapArr arr
		if kept != nil && L > 0 && s.taped != nil && s.taped.a != 0 {
			tapArr = g.Take(s.taped.a, idx, 0)
			outs = append(outs, tapArr)
		}
		g.Eval(outs...)
		if g.Err != nil {
			return g.Err
		}
		g.KeepAll(outs)
		for _, u := range kvs {
			for j, h := range u.c.Arrays() {
				mlxc.ArrayFree(*h)
				*h = u.arrs[j]
			}
		}
		for _, u := range gdns {
			mlxc.ArrayFree(u.st.SSM)
			mlxc.ArrayFree(u.st.Conv)
			u.st.SSM, u.st.Conv = u.ssm, u.conv
		}
		s.dropTreeTape()
		if kept != nil {
			if s.taped != nil {
				kept.width = s.taped.width
			}
			kept.a, s.pathTaps = tapArr, kept
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	s.tree = nil
	s.pos.N += L
	s.pos.Rec = s.pos.N
	if kept == nil {
		return nil, nil
	}
	return kept, nil
}

// dropTreeTape frees the pending tree's tape arrays but the recurrent state they started from (the
// session's own state until KeepPath replaces it); on the MLX thread.
func (s *Session) dropTreeTape() {
	if s.tree == nil {
		return
	}
	for _, tp := range s.tree.tree.Layers {
		if tp == nil {
			continue
		}
		for _, h := range []arr{tp.Alpha, tp.Delta, tp.Keys, tp.Rows} {
			if h != 0 {
				mlxc.ArrayFree(h)
			}
		}
	}
	s.tree.tree.Layers = nil
}
