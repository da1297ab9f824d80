package mlx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/ports"
)

// arr is an MLX array handle. The zero value is the null array.
type arr = mlxc.Array

// A session has every optional ability the speculative decoder and the reference checks look for.
var _ interface {
	ports.Session
	ports.TapeReplayer
	ports.TreeVerifier
} = (*Session)(nil)

var errClosed = errors.New("mlx: session is closed")

// Session is one sequence's KV caches and recurrent state as MLX arrays. It is not safe for concurrent use.
//
// Array ownership: the session owns its state handles; a Forward's taps and tape own theirs until the next
// Forward (as ports documents); detached taps and snapshots own theirs until they become unreachable (a
// runtime cleanup queues them for the MLX thread), because the ports give them no Close of their own.
type Session struct {
	t       *Target
	taps    model.TapSlots
	pos     model.Position
	st      sessState
	gen     uint64
	lastTap *ops.Tape
	taped   *Taps
	replay  bool
	// tree is the verification tree ForwardTree left for KeepPath (nil when none); pathTaps the taps
	// KeepPath returned (freed with the next Forward's, as taped).
	tree     *pendingTree
	pathTaps *Taps
	closed   bool
	// id names the session to the pipeline's workers (0 when not distributed).
	id int32
	// hidden makes run read back the final-normed hidden rows in place of the logits (and no greedy ids):
	// set only on the private session of Target.LastHidden.
	hidden bool
	// prof accumulates where Forward's time goes (graph building and binding calls on the Go side vs MLX's
	// evaluation), for the overhead benchmarks.
	prof profile
}

type profile struct {
	build, eval, read time.Duration
	forwards          int
}

// sessState is the per-layer state a forward pass reads and replaces.
type sessState struct {
	kv  []*ops.KVCache
	gdn []*ops.GDNState
}

func (t *Target) newSession(tapLayers []int) (*Session, error) {
	a := &t.m.Arch
	taps, err := model.NewTapSlots(tapLayers, a.Layers)
	if err != nil {
		return nil, err
	}
	s := &Session{t: t, taps: taps}
	s.st.kv = make([]*ops.KVCache, a.Layers)
	s.st.gdn = make([]*ops.GDNState, a.Layers)
	s.pos.Recurrent = t.info.HasRecurrent()
	if t.ring != nil && t.ring.Rank == 0 {
		s.id = t.ring.NewID()
		layers := make([]int32, len(tapLayers))
		for i, l := range tapLayers {
			layers[i] = int32(l)
		}
		if err := s.broadcast(ring.Ctrl{Op: ring.OpNew, Payload: layers}); err != nil {
			return nil, err
		}
	}
	stage := t.Stage()
	err = t.rt.Do(func() error {
		if t.closed {
			return errTargetClosed
		}
		g := graph.New(t.rt, "mlx new session")
		defer g.Release()
		var all []arr
		for i, k := range a.Kinds {
			if !stage.Has(i) {
				continue // another rank's layer
			}
			if k == ports.LayerAttention {
				s.st.kv[i] = &ops.KVCache{Q8: t.kvBits == 8}
				continue
			}
			gs := &ops.GDNState{Conv: g.Zeros(mlxc.Float32, a.ConvKernel-1, a.ConvDim()), SSM: g.Zeros(mlxc.Float32, 1, a.ValueHeads, a.ValueDim, a.KeyDim)}
			s.st.gdn[i] = gs
			all = append(all, gs.Conv, gs.SSM)
		}
		g.Eval(all...)
		if g.Err != nil {
			return g.Err
		}
		for _, x := range all {
			g.Keep(x)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Len returns the number of positions held.
func (s *Session) Len() int { return s.pos.N }

// Forward runs tokens at positions Len().. (see ports.Session).
func (s *Session) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	res, logits, err := s.forward(ctx, tokens, opts)
	if err == nil && opts.Logits {
		res.Logits = logits
	}
	return res, err
}

// forward is Forward that also returns the logits of the returned rows ([rows, V]) when opts asks for raw
// logits or distributions.
func (s *Session) forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, []float32, error) {
	fail := func(err error) (ports.ForwardResult, []float32, error) { return ports.ForwardResult{}, nil, err }
	if err := s.usable(); err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("mlx forward: %w", err))
	}
	a := &s.t.m.Arch
	T := len(tokens)
	rows, err := s.pos.CheckForward(tokens, opts, a.Vocab, a.ContextLength)
	if err != nil {
		return fail(fmt.Errorf("mlx forward: %w", err))
	}
	wantLogits := opts.Logits || opts.Sampling != nil
	s.gen++
	s.replay = false
	if err := s.t.rt.Do(func() error { s.dropLast(); return nil }); err != nil {
		return fail(err)
	}
	// Long blocks (prefill) run in chunks so one lazy graph stays bounded (the GDN recurrence is unrolled
	// per position); a taped block is never chunked (verify blocks are short).
	chunk := T
	if !opts.RecordTape && T > maxChunk {
		chunk = maxChunk
	}
	var greedy []int32
	var logits []float32
	var tape *ops.Tape
	var tapParts []arr
	for lo := 0; lo < T; lo += chunk {
		if err := ctx.Err(); err != nil {
			s.freeAll(tapParts)
			return fail(fmt.Errorf("mlx forward: %w", err))
		}
		hi := min(T, lo+chunk)
		// The rows of this chunk among the block's last `rows`; a chunk with none still computes one row,
		// which is discarded.
		want := max(0, hi-max(lo, T-rows))
		r, err := s.run(ctx, tokens[lo:hi], max(want, 1), opts.Taps, opts.RecordTape, wantLogits && want > 0, nil)
		if err != nil {
			s.freeAll(tapParts)
			return fail(err)
		}
		if want > 0 {
			greedy = append(greedy, r.greedy...)
			logits = append(logits, r.logits...)
		}
		if r.taps != 0 {
			tapParts = append(tapParts, r.taps)
		}
		tape = r.tape
	}
	var tapArr arr
	if opts.Taps && len(tapParts) > 0 {
		tapArr = tapParts[0]
		if len(tapParts) > 1 {
			err := s.t.rt.Do(func() error {
				g := graph.New(s.t.rt, "mlx forward taps")
				defer g.Release()
				all := g.Concat(0, tapParts...)
				g.Eval(all)
				if g.Err != nil {
					return g.Err
				}
				tapArr = g.Keep(all)
				return nil
			})
			s.freeAll(tapParts)
			if err != nil {
				return fail(err)
			}
		}
	}
	return s.finish(T, rows, opts, greedy, logits, tapArr, tape)
}

// finish builds a Forward's result of T positions from its returned rows' greedy ids and logits (when
// read), its taps array [T, width] (0 for none; the session owns it from here on) and its tape.
func (s *Session) finish(T, rows int, opts ports.ForwardOptions, greedy []int32, logits []float32, tapArr arr, tape *ops.Tape) (ports.ForwardResult, []float32, error) {
	fail := func(err error) (ports.ForwardResult, []float32, error) { return ports.ForwardResult{}, nil, err }
	a := &s.t.m.Arch
	var taps *Taps
	if opts.Taps {
		taps = &Taps{sess: s, rows: T}
		if tapArr != 0 {
			taps.width = s.taps.Len() * a.Hidden
			taps.a = tapArr
		}
	}
	// The session owns this Forward's taps and tape from here on (the next Forward frees them), even when a
	// distribution below cannot be built.
	if taps != nil {
		s.taped = taps
	}
	if tape != nil {
		s.lastTap = tape
	}
	res := ports.ForwardResult{Greedy: make([]ports.Token, rows)}
	copy(res.Greedy, greedy)
	if opts.Sampling != nil {
		for r := range rows {
			d, err := sampling.New(logits[r*a.Vocab:(r+1)*a.Vocab], *opts.Sampling)
			if err != nil {
				return fail(fmt.Errorf("mlx forward: position %d: %w", s.pos.N-rows+r, err))
			}
			res.Dists = append(res.Dists, d)
		}
	}
	if taps != nil {
		res.Taps = taps
	}
	if tape != nil {
		res.Tape = tape
	}
	return res, logits, nil
}

// maxChunk is the longest block one graph evaluates (longer blocks run in chunks).
var maxChunk = 256

func (s *Session) freeAll(hs []arr) {
	_ = s.t.rt.Do(func() error {
		for _, h := range hs {
			mlxc.ArrayFree(h)
		}
		return nil
	})
}

// runResult is one chunk's output: its returned rows' greedy ids (and logits when asked), its taps [T,width]
// (owned by the caller) and its tape.
type runResult struct {
	greedy []int32
	logits []float32
	taps   arr
	tape   *ops.Tape
}

// run evaluates one chunk of tokens at positions Len().. as one lazy graph and advances the session. Only
// the greedy ids (and logits when wantLogits) are read back. With a tree the tokens are its nodes
// (ForwardTree): the pass records the tree's tape in tree.Layers and the session does not advance.
// It is one function because it builds one lazy graph: every part adds nodes to the same graph, which is
// evaluated once at the end.
func (s *Session) run(ctx context.Context, tokens []ports.Token, rows int, wantTaps, wantTape, wantLogits bool, tree *ops.Tree) (runResult, error) {
	m := s.t.m
	T := len(tokens)
	var res runResult
	err := s.t.do(func() error {
		if s.t.closed {
			return errTargetClosed
		}
		if p := s.t.ring; p != nil && p.Rank == 0 {
			c := ring.Ctrl{Op: ring.OpForward, Sess: s.id, A: int32(T), B: int32(rows)}
			if tree != nil {
				c.Op, c.Payload = ring.OpTree, int32s(tree.Parents)
			}
			for _, f := range []struct {
				on bool
				fl int32
			}{{wantTaps, ring.FlagTaps}, {wantTape, ring.FlagTape}, {wantLogits, ring.FlagLogits}} {
				if f.on {
					c.Flags |= f.fl
				}
			}
			if err := s.t.ring.SendCtrl(c); err != nil {
				return err
			}
			// The workers run this chunk now: cancelling it on rank 0 alone would leave them waiting.
			ctx = context.WithoutCancel(ctx)
		}
		t0 := time.Now()
		g := graph.New(s.t.rt, "mlx forward")
		defer g.Release()
		be := ops.Backend{G: g, DT: s.t.dt}
		old := s.st.handles()
		st := &ops.Pass{O: be, KV: s.st.kv, GDN: s.st.gdn, Tree: tree}
		if wantTape && s.pos.Recurrent && tree == nil {
			st.Tape = &ops.Tape{TapeHeader: model.TapeHeader{Session: s, Forward: s.gen, Length: T, Start: s.pos.N}, Sess: s, Layers: make([]*ops.GDNTape, m.Arch.Layers)}
		}
		tapRows, tap := model.Collect[ops.Act](s.taps)
		p := s.t.ring
		var x, carried ops.Act
		var own, carriedIn []int
		if p == nil || p.Rank == 0 {
			x = be.Embed(m.Embed, tokens)
		} else {
			own = tapOrder(s.taps.Layers(), p.Stages)[p.Rank]
			carriedIn = carriedSlots(tapOrder(s.taps.Layers(), p.Stages), p.Rank)
			w := m.Arch.Hidden * (1 + len(carriedIn)*btoi(wantTaps))
			p.Waiting.Store(int32(p.Rank - 1))
			in := ops.Act{A: g.Recv(s.t.dt, p.Rank-1, p.Group, T, w), R: T, C: w}
			// Received in an evaluation of its own, so the stage's time splits into waiting for its input
			// (the ranks before it and the hop) and its own layers.
			tw := time.Now()
			g.Eval(in.A)
			p.Stats.Wait += time.Since(tw)
			x = be.Split(in, 1, m.Arch.Hidden, w-m.Arch.Hidden)[0]
			if w > m.Arch.Hidden {
				carried = be.Split(in, 1, m.Arch.Hidden, w-m.Arch.Hidden)[1]
			}
		}
		x, err := model.ForwardStage(ctx, m, be, st, x, s.pos.N, s.t.Stage(), tap)
		if err != nil {
			s.st.restoreHandles(old)
			return fmt.Errorf("mlx forward: %w", err)
		}
		var tapArr arr
		var ids, lg, fwd arr
		var outs []arr
		var wire []arr // what travels on (a worker's carried and own taps)
		if p != nil && p.Rank > 0 && wantTaps {
			if carried.A != 0 {
				wire = append(wire, carried.A)
			}
			for _, slot := range own {
				wire = append(wire, tapRows[slot].A)
			}
		}
		switch {
		case p != nil && !p.Last():
			// Pass the stream (and the taps carried so far) to the next rank.
			out := append([]arr{x.A}, wire...)
			msg := out[0]
			if len(out) > 1 {
				msg = g.Concat(1, out...)
			}
			fwd = g.Send(msg, p.Rank+1, p.Group)
		case s.hidden:
			lg = be.F32(model.Hidden(m, be, x, T-rows, T).A)
			outs = append(outs, lg)
		default:
			lg = be.F32(model.Logits(m, be, x, T-rows, T).A)
			ids = g.Astype(g.Argmax(lg, -1), mlxc.Int32)
			outs = append(outs, ids, lg)
		}
		nLocal := len(outs)
		outs = append(outs, s.st.handles()...)
		var tapLocal []arr // rank 0's own tap rows, joined with the others' after the exchange
		if (p == nil || p.Rank == 0) && wantTaps && s.taps.Len() > 0 {
			if p == nil {
				tapArr = be.Concat(tapRows...).A
				outs = append(outs, tapArr)
			} else {
				for _, slot := range tapOrder(s.taps.Layers(), p.Stages)[0] {
					tapLocal = append(tapLocal, tapRows[slot].A)
				}
			}
		}
		tape := st.Tape
		if tape != nil {
			for _, tp := range tape.Layers {
				if tp != nil {
					outs = append(outs, tp.Alpha, tp.Delta, tp.Keys, tp.Rows)
				}
			}
		}
		if tree != nil {
			for _, tp := range tree.Layers {
				if tp != nil {
					outs = append(outs, tp.Alpha, tp.Delta, tp.Keys, tp.Rows)
				}
			}
		}
		t1 := time.Now()
		g.Eval(append(outs, tapLocal...)...)
		if p != nil {
			p.Stats.Forwards++
			p.Stats.Compute += time.Since(t1)
			ids, lg, tapArr = s.exchange(g, T, rows, wantTaps, wantLogits, ids, lg, fwd, wire, tapRows)
			outs = outs[nLocal:]
			if tapArr != 0 {
				outs = append(outs, tapArr)
			}
		} else {
			outs = outs[nLocal:]
		}
		t2 := time.Now()
		if ids != 0 {
			res.greedy = g.ReadI32(ids)
		}
		if wantLogits && lg != 0 {
			res.logits = g.ReadF32(lg)
		}
		s.prof.build += t1.Sub(t0)
		s.prof.eval += t2.Sub(t1)
		s.prof.forwards++
		defer func() { s.prof.read += time.Since(t2) }()
		if g.Err != nil {
			// The session state is unspecified after an error (ports); keep the old handles valid.
			s.st.restoreHandles(old)
			return g.Err
		}
		// Adopt every evaluated output but the greedy ids and logits (the new state, the taps, the tape's
		// arrays) in one pass; free the old handles except those a tape now owns (S₀, cs₀) and those still
		// the state (a tree's recurrent layers keep theirs).
		g.KeepAll(outs)
		keepOld := map[arr]bool{}
		for _, h := range s.st.handles() {
			keepOld[h] = true
		}
		if tape != nil {
			for _, tp := range tape.Layers {
				if tp != nil {
					keepOld[tp.S0], keepOld[tp.CS0] = true, true
				}
			}
		}
		for _, h := range old {
			if h != 0 && !keepOld[h] {
				mlxc.ArrayFree(h)
			}
		}
		res.taps = tapArr
		res.tape = tape
		return nil
	})
	if err != nil {
		return runResult{}, err
	}
	if tree == nil {
		s.pos.N += T
		s.pos.Rec = s.pos.N
	}
	return res, nil
}

// dropLast frees the previous Forward's taps and tape (on the MLX thread).
func (s *Session) dropLast() {
	if s.taped != nil {
		if s.taped.a != 0 {
			mlxc.ArrayFree(s.taped.a)
		}
		s.taped.a, s.taped = 0, nil
	}
	if s.pathTaps != nil {
		if s.pathTaps.a != 0 {
			mlxc.ArrayFree(s.pathTaps.a)
		}
		s.pathTaps.a, s.pathTaps = 0, nil
	}
	if s.lastTap != nil {
		freeTape(s.lastTap)
		s.lastTap = nil
	}
}

// handles lists every state handle (attention K/V, GDN conv/ssm) in a fixed order.
func (st *sessState) handles() []arr {
	var out []arr
	for _, a := range st.kv {
		if a != nil {
			for _, h := range a.Arrays() {
				out = append(out, *h)
			}
		}
	}
	for _, g := range st.gdn {
		if g != nil {
			out = append(out, g.Conv, g.SSM)
		}
	}
	return out
}

func (st *sessState) restoreHandles(h []arr) {
	i := 0
	for _, a := range st.kv {
		if a != nil {
			for _, p := range a.Arrays() {
				*p = h[i]
				i++
			}
		}
	}
	for _, g := range st.gdn {
		if g != nil {
			g.Conv, g.SSM = h[i], h[i+1]
			i += 2
		}
	}
}

// TrimKV truncates every attention cache to n positions and sets Len to n.
func (s *Session) TrimKV(n int) error {
	if err := s.usable(); err != nil {
		return err
	}
	if n < 0 || n > s.pos.N {
		return fmt.Errorf("mlx: trim to %d outside [0,%d]", n, s.pos.N)
	}
	if err := s.broadcast(ring.Ctrl{Op: ring.OpTrim, A: int32(n)}); err != nil {
		return err
	}
	if n < s.pos.N {
		a := &s.t.m.Arch
		err := s.t.rt.Do(func() error {
			g := graph.New(s.t.rt, "mlx trim")
			defer g.Release()
			type cut struct {
				st   *ops.KVCache
				arrs []arr // the trimmed arrays, in st.Arrays()'s order
			}
			var cs []cut
			for _, st := range s.st.kv {
				if st == nil || st.K == 0 {
					continue
				}
				c := cut{st: st}
				for j, h := range st.Arrays() {
					var x arr
					if n > 0 {
						dim := a.HeadDim
						if j >= 2 { // an 8-bit cache's scales: one per position and head
							dim = 1
						}
						x = g.Slice(*h, []int{0, 0, 0, 0}, []int{1, a.KVHeads, n, dim})
					}
					c.arrs = append(c.arrs, x)
				}
				cs = append(cs, c)
			}
			if g.Err != nil {
				return g.Err
			}
			for _, c := range cs {
				for j, h := range c.st.Arrays() {
					mlxc.ArrayFree(*h)
					*h = g.Keep(c.arrs[j])
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return s.pos.Trim(n)
}

// Close releases the session's arrays.
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.t.rt.Err() != nil {
		return nil // the pipeline is broken: the MLX thread is blocked, and the process goes with it
	}
	if err := s.broadcast(ring.Ctrl{Op: ring.OpClose}); err != nil {
		return err
	}
	return s.t.rt.Do(func() error {
		s.dropLast()
		s.dropTreeTape()
		s.tree = nil
		for _, h := range s.st.handles() {
			if h != 0 {
				mlxc.ArrayFree(h)
			}
		}
		s.st = sessState{}
		return nil
	})
}
