package cpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// pendingTree is what a ForwardTree leaves for KeepPath: the attention caches hold the tree's rows in node
// order after n0 committed positions, the recurrent layers still hold S₀ (and the conv state before the
// block), and the tape records every node's innovations.
type pendingTree struct {
	tree *model.Tree
	n0   int
	tape *Tape // nil for a model without recurrent layers
	taps *Taps // every node's taps, nil unless asked
}

// errTreePending is returned by every method but KeepPath and Close while a tree is pending.
var errTreePending = errors.New("a verification tree is pending (only KeepPath or Close may follow ForwardTree)")

// idle refuses op on a closed session or one holding a pending tree.
func (s *Session) idle(op string) error {
	switch {
	case s.closed:
		return errClosed
	case s.tree != nil:
		return fmt.Errorf("cpu %s: %w", op, errTreePending)
	}
	return nil
}

// usable is idle that also refuses a session broken by an interrupted forward.
func (s *Session) usable(op string) error {
	if err := s.idle(op); err != nil {
		return err
	}
	if s.broken != nil {
		return fmt.Errorf("cpu %s: session unusable after an interrupted forward (%w); close it", op, s.broken)
	}
	return nil
}

// ForwardTree runs tokens as the nodes of the tree parents describes (see ports.TreeVerifier): every layer
// runs the block's rows once, each row at its depth's position, attending to the cache and its ancestry,
// and recurrent layers along its ancestry, so each row is bit for bit the row a chain Forward of its path
// gives. The attention caches take the rows in node order and the recurrent layers keep S₀ and a tape,
// which KeepPath turns into the state of the kept path.
func (s *Session) ForwardTree(ctx context.Context, tokens []ports.Token, parents []int, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	if err := s.usable("forward tree"); err != nil {
		return ports.ForwardResult{}, err
	}
	a := &s.t.m.Arch
	tree, err := s.pos.CheckTree(tokens, parents, opts, a.Vocab, a.ContextLength)
	if err != nil {
		return ports.ForwardResult{}, fmt.Errorf("cpu forward tree: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return ports.ForwardResult{}, fmt.Errorf("cpu forward tree: %w", err)
	}
	// From here on the caches change: any failure leaves the session unusable.
	fail := func(err error) (ports.ForwardResult, error) {
		s.broken = err
		return ports.ForwardResult{}, err
	}
	m := s.t.m
	T := len(tokens)
	s.mem.reset()
	be := ops{pool: s.t.pool, mem: &s.mem}
	// The tape is always recorded: KeepPath replays the kept path from it.
	st := s.begin(T, ports.ForwardOptions{RecordTape: true})
	st.tree = tree
	tapped, tap := s.tapper(opts)
	x, err := model.Forward(ctx, m, be, st, be.Embed(m.Embed, tokens), s.pos.N, tap)
	if err != nil {
		return fail(fmt.Errorf("cpu forward tree: %w", err))
	}
	logits := model.Logits(m, ops{pool: s.t.pool}, x, 0, T).v
	n0 := s.pos.N
	res, err := s.result(T, T, opts, logits, tapped, func(r int) int { return n0 + tree.Depth[r] })
	if err != nil {
		return fail(err)
	}
	if opts.Logits {
		res.Logits = logits
	}
	s.lastTap = nil // the tree's tape is KeepPath's, not ReplayTape's
	p := &pendingTree{tree: tree, n0: n0, tape: st.tape}
	if res.Taps != nil {
		p.taps = res.Taps.(*Taps)
	}
	s.tree = p
	return res, nil
}

// KeepPath keeps the pending tree's path and drops its other nodes (see ports.TreeVerifier): node path[k]'s
// cached rows move to position n0+k (path[k] ≥ k, so moving in increasing k never overwrites a row still to
// move) and the caches are cut after the path; the recurrent layers replay the tape along the path's rows
// from S₀ and take the path's last conv inputs, the state a chain Forward of the path leaves.
func (s *Session) KeepPath(ctx context.Context, path []int) (ports.Taps, error) {
	if s.closed {
		return nil, errClosed
	}
	p := s.tree
	if p == nil {
		return nil, errors.New("cpu keep path: no verification tree is pending (call ForwardTree first)")
	}
	if err := p.tree.CheckPath(path); err != nil {
		return nil, fmt.Errorf("cpu keep path: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cpu keep path: %w", err)
	}
	a := &s.t.m.Arch
	kvw := a.KVHeads * a.HeadDim
	for _, c := range s.kv {
		if c != nil {
			c.keepPath(p.n0, path, kvw)
		}
	}
	if p.tape != nil {
		s.replayGDNs(p.tape, len(path), path)
	}
	s.tree = nil
	s.pos.N = p.n0 + len(path)
	s.pos.Rec = s.pos.N
	s.gen++ // no tape describes the kept state
	s.replay = false
	if p.taps == nil {
		return nil, nil
	}
	out := &Taps{data: make([]float32, len(path)*p.taps.width), rows: len(path), width: p.taps.width}
	for k, n := range path {
		copy(out.data[k*out.width:(k+1)*out.width], p.taps.data[n*out.width:])
	}
	return out, nil
}

// keepPath moves the rows of a tree's nodes path[k] (held after n0 positions, in node order) to positions
// n0+k and cuts the cache after them. path[k] ≥ k, so rows move down or stay.
func (c *kvCache) keepPath(n0 int, path []int, kvw int) {
	for k, p := range path {
		if p == k {
			continue
		}
		dst, src := n0+k, n0+p
		if c.q8 {
			h := kvw / c.d
			copy(c.k8[dst*kvw:(dst+1)*kvw], c.k8[src*kvw:])
			copy(c.v8[dst*kvw:(dst+1)*kvw], c.v8[src*kvw:])
			copy(c.ks[dst*h:(dst+1)*h], c.ks[src*h:])
			copy(c.vs[dst*h:(dst+1)*h], c.vs[src*h:])
			continue
		}
		copy(c.k[dst*kvw:(dst+1)*kvw], c.k[src*kvw:])
		copy(c.v[dst*kvw:(dst+1)*kvw], c.v[src*kvw:])
	}
	c.trim(n0+len(path), kvw)
}
