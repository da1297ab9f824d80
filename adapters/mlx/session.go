package mlx

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.Session           = (*Session)(nil)
	_ ports.TapeReplayer      = (*Session)(nil)
	_ ports.Taps              = (*Taps)(nil)
	_ ports.Tape              = (*Tape)(nil)
	_ ports.RecurrentSnapshot = (*Snapshot)(nil)
)

var errClosed = errors.New("mlx: session is closed")

// Session is one sequence's KV caches and recurrent state as MLX arrays. It is not safe for concurrent use.
//
// Array ownership: the session owns its state handles; a Forward's taps and tape own theirs until the next
// Forward (as ports documents); detached taps and snapshots own theirs until they become unreachable (a
// runtime cleanup queues them for the MLX thread), because the ports give them no Close of their own.
type Session struct {
	t       *Target
	taps    []int
	tapSlot map[int][]int
	n, rec  int
	st      sessState
	gen     uint64
	lastTap *Tape
	taped   *Taps
	replay  bool
	closed  bool
	// prof accumulates where Forward's time goes (graph building and binding calls on the Go side vs MLX's
	// evaluation), for the overhead benchmarks.
	prof profile
}

type profile struct {
	build, eval, read time.Duration
	forwards          int
}

func (t *Target) newSession(tapLayers []int) (*Session, error) {
	a := &t.m.arch
	s := &Session{t: t, taps: append([]int(nil), tapLayers...), tapSlot: map[int][]int{}}
	for i, l := range tapLayers {
		if l < 0 || l >= a.Layers {
			return nil, fmt.Errorf("tap layer %d outside [0,%d)", l, a.Layers)
		}
		s.tapSlot[l] = append(s.tapSlot[l], i)
	}
	s.st.attn = make([]*attnState, a.Layers)
	s.st.gdn = make([]*gdnState, a.Layers)
	err := t.rt.Do(func() error {
		if t.closed {
			return errTargetClosed
		}
		g := newGraph(t.rt, "mlx new session")
		defer g.release()
		var all []arr
		for i, k := range a.Kinds {
			if k == ports.LayerAttention {
				s.st.attn[i] = &attnState{}
				continue
			}
			gs := &gdnState{conv: g.zeros(mlxc.Float32, a.ConvKernel-1, a.ConvDim()), ssm: g.zeros(mlxc.Float32, 1, a.ValueHeads, a.ValueDim, a.KeyDim)}
			s.st.gdn[i] = gs
			all = append(all, gs.conv, gs.ssm)
		}
		g.eval(all...)
		if g.err != nil {
			return g.err
		}
		for _, x := range all {
			g.keep(x)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Len returns the number of positions held.
func (s *Session) Len() int { return s.n }

func (s *Session) hasRecurrent() bool { return s.t.info.HasRecurrent() }

// Forward runs tokens at positions Len().. (see ports.Session).
func (s *Session) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	res, _, err := s.forward(ctx, tokens, opts, false)
	return res, err
}

// ForwardLogits is Forward that also returns the next-token logits ([rows, V], row-major) of the returned
// rows (the optional ability higgs-verify's logits and parity commands use).
func (s *Session) ForwardLogits(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, []float32, error) {
	return s.forward(ctx, tokens, opts, true)
}

func (s *Session) forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions, wantLogits bool) (ports.ForwardResult, []float32, error) {
	fail := func(err error) (ports.ForwardResult, []float32, error) { return ports.ForwardResult{}, nil, err }
	if s.closed {
		return fail(errClosed)
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("mlx forward: %w", err))
	}
	m := s.t.m
	a := &m.arch
	T := len(tokens)
	switch {
	case T == 0:
		return fail(errors.New("mlx forward: no tokens"))
	case opts.Rows < 0:
		return fail(fmt.Errorf("mlx forward: rows %d is negative", opts.Rows))
	case s.n+T > a.ContextLength:
		return fail(fmt.Errorf("mlx forward: %d held + %d new > %d: %w", s.n, T, a.ContextLength, ports.ErrContextFull))
	case s.hasRecurrent() && s.rec != s.n:
		return fail(fmt.Errorf("mlx forward: recurrent state is at position %d but the KV caches at %d (finish the rollback with Restore or ReplayTape)", s.rec, s.n))
	}
	for i, tok := range tokens {
		if tok < 0 || int(tok) >= a.Vocab {
			return fail(fmt.Errorf("mlx forward: token %d at index %d outside the vocabulary [0,%d)", tok, i, a.Vocab))
		}
	}
	if opts.Sampling != nil {
		if err := opts.Sampling.Validate(); err != nil {
			return fail(fmt.Errorf("mlx forward: %w", err))
		}
		wantLogits = true
	}
	rows := T
	if opts.Rows > 0 && opts.Rows < T {
		rows = opts.Rows
	}
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
	var tape *Tape
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
		r, err := s.run(tokens[lo:hi], max(want, 1), opts.Taps, opts.RecordTape, wantLogits && want > 0)
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
	var taps *Taps
	if opts.Taps {
		taps = &Taps{sess: s, rows: T}
		if len(tapParts) > 0 {
			taps.width = len(s.taps) * a.Hidden
			taps.a = tapParts[0]
			if len(tapParts) > 1 {
				err := s.t.rt.Do(func() error {
					g := newGraph(s.t.rt, "mlx forward taps")
					defer g.release()
					all := g.concat(0, tapParts...)
					g.eval(all)
					if g.err != nil {
						return g.err
					}
					taps.a = g.keep(all)
					return nil
				})
				s.freeAll(tapParts)
				if err != nil {
					return fail(err)
				}
			}
		}
	}
	res := ports.ForwardResult{Greedy: make([]ports.Token, rows)}
	copy(res.Greedy, greedy)
	if opts.Sampling != nil {
		for r := range rows {
			d, err := sampling.New(logits[r*a.Vocab:(r+1)*a.Vocab], *opts.Sampling)
			if err != nil {
				return fail(fmt.Errorf("mlx forward: position %d: %w", s.n-rows+r, err))
			}
			res.Dists = append(res.Dists, d)
		}
	}
	if taps != nil {
		s.taped = taps
		res.Taps = taps
	}
	if tape != nil {
		s.lastTap = tape
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
	tape   *Tape
}

// run evaluates one chunk of tokens at positions Len().. as one lazy graph and advances the session. Only
// the greedy ids (and logits when wantLogits) are read back.
func (s *Session) run(tokens []ports.Token, rows int, wantTaps, wantTape, wantLogits bool) (runResult, error) {
	m := s.t.m
	a := &m.arch
	T := len(tokens)
	var res runResult
	err := s.t.rt.Do(func() error {
		if s.t.closed {
			return errTargetClosed
		}
		t0 := time.Now()
		g := newGraph(s.t.rt, "mlx forward")
		defer g.release()
		x := m.embedRows(g, uploadI32(g, tokens, T))
		old := s.st.handles()
		var tape *Tape
		if wantTape && s.hasRecurrent() {
			tape = &Tape{sess: s, gen: s.gen, t: T, start: s.n, layers: make([]*gdnTape, a.Layers)}
		}
		tapRows := make([]arr, len(s.taps))
		for i := range m.layers {
			var tp *gdnTape
			if tape != nil && m.layers[i].kind == ports.LayerRecurrent {
				tp = &gdnTape{}
				tape.layers[i] = tp
			}
			x = m.layerForward(g, i, x, T, s.n, &s.st, tp)
			for _, slot := range s.tapSlot[i] {
				tapRows[slot] = x
			}
		}
		var tapArr arr
		if wantTaps && len(s.taps) > 0 {
			tapArr = g.concat(1, tapRows...)
		}
		last := x
		if rows < T {
			last = g.slice(x, []int{T - rows, 0}, []int{T, a.Hidden})
		}
		lg := m.f32(g, m.lmHead.apply(g, g.rmsNorm(last, m.finalNorm, a.Eps)))
		ids := g.astype(g.argmax(lg, -1), mlxc.Int32)
		outs := append([]arr{ids, lg}, s.st.handles()...)
		if tapArr != 0 {
			outs = append(outs, tapArr)
		}
		if tape != nil {
			for _, tp := range tape.layers {
				if tp != nil {
					outs = append(outs, tp.alpha, tp.delta, tp.keys, tp.rows)
				}
			}
		}
		t1 := time.Now()
		g.eval(outs...)
		t2 := time.Now()
		res.greedy = g.readI32(ids)
		if wantLogits {
			res.logits = g.readF32(lg)
		}
		s.prof.build += t1.Sub(t0)
		s.prof.eval += t2.Sub(t1)
		s.prof.forwards++
		defer func() { s.prof.read += time.Since(t2) }()
		if g.err != nil {
			// The session state is unspecified after an error (ports); keep the old handles valid.
			s.st.restoreHandles(old)
			return g.err
		}
		// Adopt every evaluated output but the greedy ids and logits (the new state, the taps, the tape's
		// arrays) in one pass; free the old handles except those a tape now owns (S₀, cs₀).
		g.keepAll(outs[2:])
		keepOld := map[arr]bool{}
		if tape != nil {
			for _, tp := range tape.layers {
				if tp != nil {
					keepOld[tp.s0], keepOld[tp.cs0] = true, true
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
	s.n += T
	s.rec = s.n
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
	if s.lastTap != nil {
		s.lastTap.free()
		s.lastTap = nil
	}
}

// handles lists every state handle (attention K/V, GDN conv/ssm) in a fixed order.
func (st *sessState) handles() []arr {
	var out []arr
	for _, a := range st.attn {
		if a != nil {
			out = append(out, a.k, a.v)
		}
	}
	for _, g := range st.gdn {
		if g != nil {
			out = append(out, g.conv, g.ssm)
		}
	}
	return out
}

func (st *sessState) restoreHandles(h []arr) {
	i := 0
	for _, a := range st.attn {
		if a != nil {
			a.k, a.v = h[i], h[i+1]
			i += 2
		}
	}
	for _, g := range st.gdn {
		if g != nil {
			g.conv, g.ssm = h[i], h[i+1]
			i += 2
		}
	}
}

// TrimKV truncates every attention cache to n positions and sets Len to n.
func (s *Session) TrimKV(n int) error {
	if s.closed {
		return errClosed
	}
	if n < 0 || n > s.n {
		return fmt.Errorf("mlx: trim to %d outside [0,%d]", n, s.n)
	}
	if n < s.n {
		a := &s.t.m.arch
		err := s.t.rt.Do(func() error {
			g := newGraph(s.t.rt, "mlx trim")
			defer g.release()
			type pair struct {
				st   *attnState
				k, v arr
			}
			var ps []pair
			for _, st := range s.st.attn {
				if st == nil || st.k == 0 {
					continue
				}
				p := pair{st: st}
				if n > 0 {
					p.k = g.slice(st.k, []int{0, 0, 0, 0}, []int{1, a.KVHeads, n, a.HeadDim})
					p.v = g.slice(st.v, []int{0, 0, 0, 0}, []int{1, a.KVHeads, n, a.HeadDim})
				}
				ps = append(ps, p)
			}
			if g.err != nil {
				return g.err
			}
			for _, p := range ps {
				mlxc.ArrayFree(p.st.k)
				mlxc.ArrayFree(p.st.v)
				p.st.k, p.st.v = g.keep(p.k), g.keep(p.v)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	s.n = n
	if !s.hasRecurrent() {
		s.rec = n
	}
	return nil
}

// Snapshot holds handles to every recurrent layer's (immutable) state arrays at one position.
type Snapshot struct {
	sess *Session
	pos  int
	conv []arr
	ssm  []arr
}

// Position returns the session length the snapshot was taken at.
func (p *Snapshot) Position() int { return p.pos }

// dup returns a new handle to the same array (MLX arrays are immutable, so this is a snapshot).
func dup(rt *mlxc.Runtime, a arr) (arr, error) {
	var r arr
	if err := rt.Check(mlxc.ArraySet(&r, a)); err != nil {
		return 0, err
	}
	return r, nil
}

// Snapshot copies the recurrent state (see ports.Session). A model without recurrent layers has nothing to
// snapshot: the error wraps errors.ErrUnsupported, which the speculative decoder reads as "TrimKV alone".
func (s *Session) Snapshot() (ports.RecurrentSnapshot, error) {
	if s.closed {
		return nil, errClosed
	}
	if !s.hasRecurrent() {
		return nil, fmt.Errorf("mlx: snapshot: model has no recurrent layers: %w", errors.ErrUnsupported)
	}
	p := &Snapshot{sess: s, pos: s.rec, conv: make([]arr, len(s.st.gdn)), ssm: make([]arr, len(s.st.gdn))}
	err := s.t.rt.Do(func() error {
		for i, g := range s.st.gdn {
			if g == nil {
				continue
			}
			var err error
			if p.conv[i], err = dup(s.t.rt, g.conv); err != nil {
				return err
			}
			if p.ssm[i], err = dup(s.t.rt, g.ssm); err != nil {
				return err
			}
		}
		return nil
	})
	// The snapshot's handles live as long as the snapshot does: the ports give it no Close, and a decoder
	// that snapshots every round must not pin every past state until the session closes.
	hs := append(append([]arr(nil), p.conv...), p.ssm...)
	rt := s.t.rt
	runtime.AddCleanup(p, func(hs []arr) { rt.FreeLater(hs...) }, hs)
	if err != nil {
		return nil, fmt.Errorf("mlx: snapshot: %w", err)
	}
	return p, nil
}

// Restore puts the recurrent layers back to a snapshot of this session; the snapshot stays valid.
func (s *Session) Restore(rs ports.RecurrentSnapshot) error {
	if s.closed {
		return errClosed
	}
	p, ok := rs.(*Snapshot)
	if !ok || p == nil || p.sess != s {
		return fmt.Errorf("mlx: restore: snapshot %T was not taken from this session", rs)
	}
	err := s.t.rt.Do(func() error {
		for i, g := range s.st.gdn {
			if g == nil {
				continue
			}
			c, err := dup(s.t.rt, p.conv[i])
			if err != nil {
				return err
			}
			ss, err := dup(s.t.rt, p.ssm[i])
			if err != nil {
				mlxc.ArrayFree(c)
				return err
			}
			s.freeState(g.conv)
			s.freeState(g.ssm)
			g.conv, g.ssm = c, ss
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mlx: restore: %w", err)
	}
	s.rec = p.pos
	s.replay = true
	return nil
}

// freeState frees a state handle unless the latest tape holds it as S₀ / cs₀.
func (s *Session) freeState(h arr) {
	if s.lastTap != nil {
		for _, tp := range s.lastTap.layers {
			if tp != nil && (tp.s0 == h || tp.cs0 == h) {
				return
			}
		}
	}
	mlxc.ArrayFree(h)
}

// Tape is a block's recurrent record (see ports.Tape); valid until the session's next Forward.
type Tape struct {
	sess   *Session
	gen    uint64
	t      int
	start  int
	layers []*gdnTape
}

// Len returns the number of positions recorded.
func (tp *Tape) Len() int { return tp.t }

// free releases the tape's arrays, including S₀/cs₀ unless the session still uses them as its state.
func (tp *Tape) free() {
	live := map[arr]bool{}
	for _, h := range tp.sess.st.handles() {
		live[h] = true
	}
	for _, l := range tp.layers {
		if l == nil {
			continue
		}
		for _, h := range []arr{l.alpha, l.delta, l.keys, l.rows, l.s0, l.cs0} {
			if h != 0 && !live[h] {
				mlxc.ArrayFree(h)
			}
		}
	}
	tp.layers = nil
}

// ReplayTape rolls the recurrent layers back to the state after the first n positions of the taped block
// (bit-exact with the MLX forward: same ops, same order). n == Len keeps the verify's end state.
func (s *Session) ReplayTape(ctx context.Context, t ports.Tape, n int) error {
	if s.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mlx replay: %w", err)
	}
	tp, ok := t.(*Tape)
	if !ok || tp == nil || tp.sess != s {
		return fmt.Errorf("mlx replay: tape %T was not recorded by this session", t)
	}
	if tp.gen != s.gen || s.lastTap != tp {
		return errors.New("mlx replay: tape is not from the latest Forward of this session")
	}
	if n < 0 || n > tp.t {
		return fmt.Errorf("mlx replay: %d steps outside [0,%d]", n, tp.t)
	}
	if n == tp.t && !s.replay {
		s.rec = tp.start + n
		return nil
	}
	err := s.t.rt.Do(func() error {
		g := newGraph(s.t.rt, "mlx replay")
		defer g.release()
		type upd struct {
			st        *gdnState
			ssm, conv arr
		}
		var us []upd
		var outs []arr
		for i, st := range s.st.gdn {
			if st == nil {
				continue
			}
			ssm, conv := s.t.m.replay(g, tp.layers[i], n)
			us = append(us, upd{st, ssm, conv})
			outs = append(outs, ssm, conv)
		}
		g.eval(outs...)
		if g.err != nil {
			return g.err
		}
		for _, u := range us {
			s.freeState(u.st.ssm)
			s.freeState(u.st.conv)
			u.st.ssm, u.st.conv = g.keep(u.ssm), g.keep(u.conv)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.rec = tp.start + n
	s.replay = true
	return nil
}

// Close releases the session's arrays.
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.t.rt.Do(func() error {
		s.dropLast()
		for _, h := range s.st.handles() {
			if h != 0 {
				mlxc.ArrayFree(h)
			}
		}
		s.st = sessState{}
		return nil
	})
}

// Taps is the tapped hidden states of one Forward: rows × (len(tapLayers)·H), resident in MLX.
type Taps struct {
	sess        *Session
	a           arr
	rows, width int
}

// Rows returns the number of positions.
func (t *Taps) Rows() int { return t.rows }

// Slice returns a view of the first n rows (n is clamped to [0, Rows()]); it shares the receiver's array.
func (t *Taps) Slice(n int) ports.Taps {
	n = min(max(n, 0), t.rows)
	return &Taps{sess: t.sess, a: t.a, rows: n, width: t.width}
}

// Detach returns a handle that stays valid after later Forward calls (owned by the session until Close).
func (t *Taps) Detach() ports.Taps {
	d := &Taps{sess: t.sess, rows: t.rows, width: t.width}
	if t.a == 0 {
		return d
	}
	rt := t.sess.t.rt
	_ = rt.Do(func() error {
		h, err := dup(rt, t.a)
		if err != nil {
			return err
		}
		d.a = h
		return nil
	})
	if d.a != 0 {
		// Freed when the detached copy becomes unreachable (the ports give taps no Close).
		runtime.AddCleanup(d, func(h arr) { rt.FreeLater(h) }, d.a)
	}
	return d
}

// Read copies the first Rows() rows to Go memory (row-major, width = len(tapLayers)·HiddenSize).
func (t *Taps) Read() (data []float32, rows, width int, err error) {
	if t.width == 0 {
		return []float32{}, t.rows, 0, nil
	}
	if t.a == 0 {
		return nil, 0, t.width, errors.New("mlx taps: released (taps are valid until the next Forward unless detached)")
	}
	err = t.sess.t.rt.Do(func() error {
		g := newGraph(t.sess.t.rt, "mlx taps read")
		defer g.release()
		x := t.sess.t.m.f32(g, t.a)
		g.eval(x)
		v := g.readF32(x)
		if g.err != nil {
			return g.err
		}
		data = v[:t.rows*t.width]
		return nil
	})
	return data, t.rows, t.width, err
}

// Float32 is Read in the form the CPU drafter consumes (dflash.FloatTaps); on a read error it returns no
// rows, which the drafter rejects as a row-count mismatch.
func (t *Taps) Float32() (data []float32, rows, width int) {
	d, r, w, err := t.Read()
	if err != nil {
		return nil, 0, w
	}
	return d, r, w
}
