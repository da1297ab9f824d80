package cpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/ports"
)

// A session has every optional ability the speculative decoder and the reference checks look for.
var _ interface {
	ports.Session
	ports.TapeReplayer
	ports.TreeVerifier
} = (*Session)(nil)

// errClosed is returned by every method of a closed session.
var errClosed = errors.New("cpu: session is closed")

// Session is one sequence's KV caches and recurrent state. It is not safe for concurrent use.
type Session struct {
	t       *Target
	taps    model.TapSlots
	tapped  []bool // tappedLayers(taps): the layers whose outputs a Forward with taps keeps (ops.tapped)
	pos     model.Position
	kv      []*kvCache
	gdn     []*gdnState
	gen     uint64 // Forward counter: a tape is only valid for the Forward that made it
	lastTap *Tape
	replay  bool // a ReplayTape ran since the last Forward
	closed  bool
	broken  error        // set when a Forward stopped half-way: the caches no longer match any position
	tree    *pendingTree // a ForwardTree's block, until KeepPath
	mem     arena        // the activations of the latest Forward (and its tape)
}

func newSession(t *Target, tapLayers []int) (*Session, error) {
	a := &t.m.Arch
	taps, err := model.NewTapSlots(tapLayers, a.Layers)
	if err != nil {
		return nil, err
	}
	s := &Session{t: t, taps: taps, tapped: tappedLayers(taps, a.Layers), mem: arena{keep: keepClass}}
	s.kv = make([]*kvCache, a.Layers)
	s.gdn = make([]*gdnState, a.Layers)
	for i, k := range a.Kinds {
		if k == ports.LayerAttention {
			s.kv[i] = newKVCache(t.kvBits, a.HeadDim)
			continue
		}
		s.pos.Recurrent = true
		sz := a.ValueHeads * a.ValueDim * a.KeyDim
		s.gdn[i] = &gdnState{conv: make([]float32, (a.ConvKernel-1)*a.ConvDim()), s: [2][]float32{make([]float32, sz), make([]float32, sz)}}
	}
	return s, nil
}

// Len returns the number of positions held.
func (s *Session) Len() int { return s.pos.N }

// Forward runs tokens at positions Len()..Len()+len(tokens)−1 (see ports.Session).
func (s *Session) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	res, logits, err := s.forward(ctx, tokens, opts)
	if err == nil && opts.Logits {
		res.Logits = logits
	}
	return res, err
}

// forward is Forward that also returns the logits of the returned rows ([rows, V]).
func (s *Session) forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, []float32, error) {
	fail := func(err error) (ports.ForwardResult, []float32, error) { return ports.ForwardResult{}, nil, err }
	rows, err := s.admit(tokens, opts)
	if err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("cpu forward: %w", err))
	}
	m := s.t.m
	T := len(tokens)
	s.mem.reset()
	st := s.begin(T, opts)
	// A tape keeps the recurrence's buffers past their layer; without one, a long pass's layers give their
	// buffers back at their end (scoped).
	be := ops{pool: s.t.pool, mem: &s.mem, layers: scoped(T) && st.tape == nil}
	if opts.Taps {
		be.tapped = s.tapped
	}
	tapped, tap := s.tapper(opts)
	x, err := model.Forward(ctx, m, be, st, be.Embed(m.Embed, tokens), s.pos.N, tap)
	if err != nil {
		if st.touched {
			s.broken = err
		}
		return fail(fmt.Errorf("cpu forward: %w", err))
	}
	// What the caller keeps (logits, taps) is allocated outside the arena.
	logits := model.Logits(m, ops{pool: s.t.pool}, x, T-rows, T).v
	return s.finish(st, T, rows, opts, logits, tapped)
}

// admit checks a Forward of tokens with opts before any work: the session's own refusals (closed, broken,
// an empty block, a token outside the vocabulary, a full context, an unfinished rollback). It returns the
// number of rows to return.
func (s *Session) admit(tokens []ports.Token, opts ports.ForwardOptions) (int, error) {
	if err := s.usable("forward"); err != nil {
		return 0, err
	}
	a := &s.t.m.Arch
	rows, err := s.pos.CheckForward(tokens, opts, a.Vocab, a.ContextLength)
	if err != nil {
		return 0, fmt.Errorf("cpu forward: %w", err)
	}
	return rows, nil
}

// begin starts an admitted Forward of T positions: it invalidates the previous Forward's tape and returns
// the pass over the session's state (recording a tape when asked). The caller resets s.mem before.
func (s *Session) begin(T int, opts ports.ForwardOptions) *pass {
	s.gen++
	s.replay = false
	s.lastTap = nil
	st := &pass{pool: s.t.pool, mem: &s.mem, kv: s.kv, gdn: s.gdn}
	if opts.RecordTape && s.pos.Recurrent {
		st.tape = &Tape{TapeHeader: model.TapeHeader{Session: s, Forward: s.gen, Length: T, Start: s.pos.N}, layers: make([]*gdnTape, s.t.m.Arch.Layers)}
	}
	return st
}

// tapper returns the per-slot outputs the pass fills and the tap callback (nil unless opts asks for taps).
func (s *Session) tapper(opts ports.ForwardOptions) ([]act, func(int, act)) {
	tapped, tap := model.Collect[act](s.taps)
	if !opts.Taps {
		tap = nil
	}
	return tapped, tap
}

// finish completes a Forward of T positions whose layers ran through st: it advances the session and builds
// the result from logits ([rows, V], the caller's) and the tapped layer outputs.
func (s *Session) finish(st *pass, T, rows int, opts ports.ForwardOptions, logits []float32, tapped []act) (ports.ForwardResult, []float32, error) {
	s.pos.N += T
	s.pos.Rec = s.pos.N
	first := s.pos.N - rows
	res, err := s.result(rows, T, opts, logits, tapped, func(r int) int { return first + r })
	if err != nil {
		return ports.ForwardResult{}, nil, err
	}
	if st.tape != nil {
		s.lastTap = st.tape
		res.Tape = st.tape
	}
	return res, logits, nil
}

// result builds a forward's result from logits ([rows, V], the caller's) and the tapped layer outputs of
// its T positions; position(r) is row r's position, for errors.
func (s *Session) result(rows, T int, opts ports.ForwardOptions, logits []float32, tapped []act, position func(int) int) (ports.ForwardResult, error) {
	a := &s.t.m.Arch
	res := ports.ForwardResult{Greedy: make([]ports.Token, rows)}
	// A verify block's argmaxes (a vocabulary each) are split between the workers: run on the caller alone
	// they were a serial stretch while the other workers idled. Each row's argmax is computed alone.
	s.t.pool.For(rows, max(1, 8192/a.Vocab), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			res.Greedy[r] = sampling.Argmax(logits[r*a.Vocab : (r+1)*a.Vocab])
		}
	})
	for r := range rows {
		row := logits[r*a.Vocab : (r+1)*a.Vocab]
		if res.Greedy[r] == ports.NoToken {
			// Every logit is NaN (corrupt weights or a numerical blow-up): there is no token to return, and
			// NoToken handed on would be committed and fed back as input.
			return ports.ForwardResult{}, fmt.Errorf("cpu forward: position %d: no finite logit among %d (every logit is NaN)", position(r), a.Vocab)
		}
		if opts.Sampling != nil {
			d, err := sampling.New(row, *opts.Sampling)
			if err != nil {
				return ports.ForwardResult{}, fmt.Errorf("cpu forward: position %d: %w", position(r), err)
			}
			res.Dists = append(res.Dists, d)
		}
	}
	if opts.Taps {
		taps := &Taps{data: []float32{}, rows: T}
		if len(tapped) > 0 {
			all := ops{pool: s.t.pool}.Concat(tapped...)
			taps.data, taps.width = all.v, all.width()
		}
		res.Taps = taps
	}
	return res, nil
}

// TrimKV truncates every attention cache to n positions and sets Len to n.
func (s *Session) TrimKV(n int) error {
	if err := s.idle("trim"); err != nil {
		return err
	}
	if err := s.pos.Trim(n); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	a := &s.t.m.Arch
	w := a.KVHeads * a.HeadDim
	for _, st := range s.kv {
		if st != nil {
			st.trim(n, w)
		}
	}
	return nil
}

// Snapshot is a copy of every recurrent layer's conv buffer and SSM state at one position.
type Snapshot struct {
	sess *Session
	pos  int
	conv [][]float32
	ssm  [][]float32
}

// Position returns the session length the snapshot was taken at.
func (p *Snapshot) Position() int { return p.pos }

// Snapshot copies the recurrent state (see ports.Session). A model without recurrent layers has nothing to
// snapshot: the error wraps errors.ErrUnsupported, which the speculative decoder reads as "roll back by TrimKV
// alone".
func (s *Session) Snapshot() (ports.RecurrentSnapshot, error) {
	if err := s.idle("snapshot"); err != nil {
		return nil, err
	}
	if !s.pos.Recurrent {
		return nil, fmt.Errorf("cpu: snapshot: model has no recurrent layers: %w", errors.ErrUnsupported)
	}
	p := &Snapshot{sess: s, pos: s.pos.Rec, conv: make([][]float32, len(s.gdn)), ssm: make([][]float32, len(s.gdn))}
	for i, g := range s.gdn {
		if g != nil {
			p.conv[i] = append([]float32(nil), g.conv...)
			p.ssm[i] = append([]float32(nil), g.s[g.cur]...)
		}
	}
	return p, nil
}

// Restore puts the recurrent layers back to a snapshot of this session; the snapshot stays valid.
func (s *Session) Restore(rs ports.RecurrentSnapshot) error {
	if err := s.idle("restore"); err != nil {
		return err
	}
	p, ok := rs.(*Snapshot)
	if !ok || p == nil || p.sess != s {
		return fmt.Errorf("cpu: restore: snapshot %T was not taken from this session", rs)
	}
	for i, g := range s.gdn {
		if g != nil {
			copy(g.conv, p.conv[i])
			// Write into the buffer that is not S₀ of the latest tape, so that tape stays replayable.
			copy(g.s[g.cur], p.ssm[i])
		}
	}
	s.pos.Rec = p.pos
	s.replay = true
	return nil
}

var _ ports.RecurrentSnapshot = (*Snapshot)(nil)

// Tape is a block's recurrent record (see ports.Tape); valid until the session's next Forward.
type Tape struct {
	model.TapeHeader
	layers []*gdnTape
}

var _ ports.Tape = (*Tape)(nil)

// ReplayTape rolls the recurrent layers back to the state after the first n positions of the taped block,
// bit-exact with feeding only those n tokens. n == Len keeps the verify's end state.
func (s *Session) ReplayTape(ctx context.Context, t ports.Tape, n int) error {
	if err := s.idle("replay"); err != nil {
		return err
	}
	skip, err := model.CheckReplay(ctx, t, s, s.gen, s.lastTap, n, s.replay)
	if err != nil {
		return fmt.Errorf("cpu replay: %w", err)
	}
	tp := t.(*Tape)
	if skip {
		s.pos.Rec = tp.Start + n
		return nil
	}
	s.replayGDNs(tp, n, nil)
	s.pos.Rec = tp.Start + n
	s.replay = true
	return nil
}

// Close releases the session's memory.
func (s *Session) Close() error {
	s.closed = true
	s.kv, s.gdn, s.lastTap, s.tree = nil, nil, nil, nil
	s.mem.release()
	s.mem = arena{} // nothing a Forward returned lives in it
	return nil
}

// Taps is the tapped hidden states of one Forward: rows × (len(tapLayers)·H), row-major.
type Taps struct {
	data        []float32
	rows, width int
}

var _ interface {
	ports.Taps
	ports.HostTaps
} = (*Taps)(nil)

// Rows returns the number of positions.
func (t *Taps) Rows() int { return t.rows }

// Slice returns a view of the first n rows (n is clamped to [0, Rows()]).
func (t *Taps) Slice(n int) ports.Taps {
	n = min(max(n, 0), t.rows)
	return &Taps{data: t.data[:n*t.width], rows: n, width: t.width}
}

// Detach returns taps independent of the session. Every Forward writes its taps into a fresh matrix that the
// session never touches again (and readers may not write), so the receiver already outlives later Forward
// calls: copying it would only cost the speculative decoder a copy per round (the whole prompt's on the first).
func (t *Taps) Detach() ports.Taps { return t }

// Host exposes the matrix without copying (see ports.HostTaps).
func (t *Taps) Host() (data []float32, rows, width int, err error) {
	return t.data, t.rows, t.width, nil
}
