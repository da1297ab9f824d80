package cpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
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

// errClosed is returned by every method of a closed session.
var errClosed = errors.New("cpu: session is closed")

// Session is one sequence's KV caches and recurrent state. It is not safe for concurrent use.
type Session struct {
	m       *model
	taps    []int
	tapSlot map[int][]int // layer → positions in the tap list
	n       int           // positions held by the attention caches (Len)
	rec     int           // position the recurrent layers are at
	attn    []*attnState
	gdn     []*gdnState
	gen     uint64 // Forward counter: a tape is only valid for the Forward that made it
	lastTap *Tape
	replay  bool // a ReplayTape ran since the last Forward
	closed  bool
	broken  error // set when a Forward stopped half-way: the caches no longer match any position
}

func newSession(m *model, tapLayers []int) (*Session, error) {
	s := &Session{m: m, taps: append([]int(nil), tapLayers...), tapSlot: map[int][]int{}}
	for i, l := range tapLayers {
		if l < 0 || l >= m.arch.Layers {
			return nil, fmt.Errorf("tap layer %d outside [0,%d)", l, m.arch.Layers)
		}
		s.tapSlot[l] = append(s.tapSlot[l], i)
	}
	a := &m.arch
	s.attn = make([]*attnState, a.Layers)
	s.gdn = make([]*gdnState, a.Layers)
	for i, k := range a.Kinds {
		if k == ports.LayerAttention {
			s.attn[i] = &attnState{}
			continue
		}
		sz := a.ValueHeads * a.ValueDim * a.KeyDim
		s.gdn[i] = &gdnState{conv: make([]float32, (a.ConvKernel-1)*a.ConvDim()), s: [2][]float32{make([]float32, sz), make([]float32, sz)}}
	}
	return s, nil
}

// Len returns the number of positions held.
func (s *Session) Len() int { return s.n }

func (s *Session) hasRecurrent() bool {
	for _, g := range s.gdn {
		if g != nil {
			return true
		}
	}
	return false
}

// Forward runs tokens at positions Len()..Len()+len(tokens)−1 (see ports.Session).
func (s *Session) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	res, _, err := s.forward(ctx, tokens, opts)
	return res, err
}

// ForwardLogits is Forward that also returns the raw next-token logits of the returned rows (row-major
// [rows, V]; opts.Rows 0 means every position), for reference checks such as `higgs-verify logits`. The slice
// is the caller's.
func (s *Session) ForwardLogits(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, []float32, error) {
	return s.forward(ctx, tokens, opts)
}

// forward is Forward that also returns the logits of the returned rows ([rows, V]).
func (s *Session) forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, []float32, error) {
	fail := func(err error) (ports.ForwardResult, []float32, error) { return ports.ForwardResult{}, nil, err }
	if s.closed {
		return fail(errClosed)
	}
	if s.broken != nil {
		return fail(fmt.Errorf("cpu forward: session unusable after an interrupted forward (%w); close it", s.broken))
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("cpu forward: %w", err))
	}
	m := s.m
	a := &m.arch
	T := len(tokens)
	switch {
	case T == 0:
		return fail(errors.New("cpu forward: no tokens"))
	case opts.Rows < 0:
		return fail(fmt.Errorf("cpu forward: rows %d is negative", opts.Rows))
	case s.n+T > a.ContextLength:
		return fail(fmt.Errorf("cpu forward: %d held + %d new > %d: %w", s.n, T, a.ContextLength, ports.ErrContextFull))
	case s.hasRecurrent() && s.rec != s.n:
		return fail(fmt.Errorf("cpu forward: recurrent state is at position %d but the KV caches at %d (finish the rollback with Restore or ReplayTape)", s.rec, s.n))
	}
	if opts.Sampling != nil {
		if err := opts.Sampling.Validate(); err != nil {
			return fail(fmt.Errorf("cpu forward: %w", err))
		}
	}
	x := make([]float32, T*a.Hidden)
	if err := m.embedTokens(x, tokens); err != nil {
		return fail(fmt.Errorf("cpu forward: %w", err))
	}
	s.gen++
	s.replay = false
	s.lastTap = nil
	var tape *Tape
	if opts.RecordTape && s.hasRecurrent() {
		tape = &Tape{sess: s, gen: s.gen, t: T, start: s.n, layers: make([]*gdnTape, a.Layers)}
	}
	var taps *Taps
	if opts.Taps {
		taps = &Taps{data: make([]float32, T*len(s.taps)*a.Hidden), rows: T, width: len(s.taps) * a.Hidden}
	}
	H := a.Hidden
	h := make([]float32, T*H)
	out := make([]float32, T*H)
	for i := range m.layers {
		if err := ctx.Err(); err != nil {
			if i > 0 {
				s.broken = err
			}
			return fail(fmt.Errorf("cpu forward: layer %d: %w", i, err))
		}
		ly := &m.layers[i]
		kernel.RMSNorm(h, x, ly.inNorm, a.Eps)
		if ly.kind == ports.LayerAttention {
			m.attention(ly.attn, s.attn[i], h, out, T, s.n)
		} else {
			var tp *gdnTape
			if tape != nil {
				tp = &gdnTape{}
				tape.layers[i] = tp
			}
			m.gdn(ly.gdn, s.gdn[i], h, out, T, tp)
		}
		kernel.Add(x, out)
		kernel.RMSNorm(h, x, ly.postNorm, a.Eps)
		if ly.moe != nil {
			m.moe(ly.moe, h, out, T)
		} else {
			ffn(ly.mlp, h, out, T)
		}
		kernel.Add(x, out)
		if taps != nil {
			for _, slot := range s.tapSlot[i] {
				for t := range T {
					copy(taps.data[t*taps.width+slot*H:t*taps.width+(slot+1)*H], x[t*H:(t+1)*H])
				}
			}
		}
	}
	s.n += T
	s.rec = s.n
	rows := T
	if opts.Rows > 0 && opts.Rows < T {
		rows = opts.Rows
	}
	last := x[(T-rows)*H:]
	kernel.RMSNorm(last, last, m.finalNorm, a.Eps)
	logits := make([]float32, rows*a.Vocab)
	m.lmHead.Forward(logits, last, rows)
	res := ports.ForwardResult{Greedy: make([]ports.Token, rows)}
	for r := range rows {
		row := logits[r*a.Vocab : (r+1)*a.Vocab]
		res.Greedy[r] = sampling.Argmax(row)
		if res.Greedy[r] == ports.NoToken {
			// Every logit is NaN (corrupt weights or a numerical blow-up): there is no token to return, and
			// NoToken handed on would be committed and fed back as input.
			return fail(fmt.Errorf("cpu forward: position %d: no finite logit among %d (every logit is NaN)", s.n-rows+r, a.Vocab))
		}
		if opts.Sampling != nil {
			d, err := sampling.New(row, *opts.Sampling)
			if err != nil {
				return fail(fmt.Errorf("cpu forward: position %d: %w", s.n-rows+r, err))
			}
			res.Dists = append(res.Dists, d)
		}
	}
	if taps != nil {
		res.Taps = taps
	}
	if tape != nil {
		s.lastTap = tape
		res.Tape = tape
	}
	return res, logits, nil
}

// TrimKV truncates every attention cache to n positions and sets Len to n.
func (s *Session) TrimKV(n int) error {
	if s.closed {
		return errClosed
	}
	if n < 0 || n > s.n {
		return fmt.Errorf("cpu: trim to %d outside [0,%d]", n, s.n)
	}
	a := &s.m.arch
	w := a.KVHeads * a.HeadDim
	for _, st := range s.attn {
		if st != nil {
			st.k = st.k[:n*w]
			st.v = st.v[:n*w]
		}
	}
	s.n = n
	if !s.hasRecurrent() {
		s.rec = n
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
	if s.closed {
		return nil, errClosed
	}
	if !s.hasRecurrent() {
		return nil, fmt.Errorf("cpu: snapshot: model has no recurrent layers: %w", errors.ErrUnsupported)
	}
	p := &Snapshot{sess: s, pos: s.rec, conv: make([][]float32, len(s.gdn)), ssm: make([][]float32, len(s.gdn))}
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
	if s.closed {
		return errClosed
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
	s.rec = p.pos
	s.replay = true
	return nil
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

// ReplayTape rolls the recurrent layers back to the state after the first n positions of the taped block,
// bit-exact with feeding only those n tokens. n == Len keeps the verify's end state.
func (s *Session) ReplayTape(ctx context.Context, t ports.Tape, n int) error {
	if s.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cpu replay: %w", err)
	}
	tp, ok := t.(*Tape)
	if !ok || tp == nil || tp.sess != s {
		return fmt.Errorf("cpu replay: tape %T was not recorded by this session", t)
	}
	if tp.gen != s.gen || s.lastTap != tp {
		return errors.New("cpu replay: tape is not from the latest Forward of this session")
	}
	if n < 0 || n > tp.t {
		return fmt.Errorf("cpu replay: %d steps outside [0,%d]", n, tp.t)
	}
	if n == tp.t && !s.replay {
		s.rec = tp.start + n
		return nil
	}
	for i, g := range s.gdn {
		if g != nil {
			s.m.replayGDN(g, tp.layers[i], n)
		}
	}
	s.rec = tp.start + n
	s.replay = true
	return nil
}

// Close releases the session's memory.
func (s *Session) Close() error {
	s.closed = true
	s.attn, s.gdn, s.lastTap = nil, nil, nil
	return nil
}

// Taps is the tapped hidden states of one Forward: rows × (len(tapLayers)·H), row-major.
type Taps struct {
	data        []float32
	rows, width int
}

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

// Float32 exposes the matrix without copying (row-major; width = len(tapLayers)·HiddenSize). Read only.
func (t *Taps) Float32() (data []float32, rows, width int) { return t.data, t.rows, t.width }

// embedTokens writes the embedding rows of tokens into dst, rejecting ids outside the vocabulary.
func (m *model) embedTokens(dst []float32, tokens []ports.Token) error {
	H := m.arch.Hidden
	if len(dst) < len(tokens)*H {
		return fmt.Errorf("embed: destination holds %d values, need %d", len(dst), len(tokens)*H)
	}
	for i, tok := range tokens {
		if tok < 0 || int(tok) >= m.arch.Vocab {
			return fmt.Errorf("token %d at index %d outside the vocabulary [0,%d)", tok, i, m.arch.Vocab)
		}
	}
	for i, tok := range tokens {
		m.embed.Row(dst[i*H:(i+1)*H], int(tok))
	}
	return nil
}
