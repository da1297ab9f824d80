package portfake

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.Session           = (*Session)(nil)
	_ ports.Session           = (*TapeSession)(nil)
	_ ports.TapeReplayer      = (*TapeSession)(nil)
	_ ports.Taps              = (*Taps)(nil)
	_ ports.Tape              = (*Tape)(nil)
	_ ports.RecurrentSnapshot = (*Snapshot)(nil)
)

// Session is a toy-model sequence with real caches: one token list per attention layer (the "KV cache")
// and one running hash plus position per recurrent layer. Forward refuses to run while the recurrent
// layers and the attention caches disagree on the position, so a missing rollback is an error, not a silent
// divergence. Not safe for concurrent use.
type Session struct {
	m      *Model
	taps   []int
	n      int
	kv     [][]ports.Token
	rec    []recState
	serial uint64 // incremented by every Forward; taps and tapes carry the serial they were made at
	closed bool
	tree   *pendingTree // set by ForwardTree until KeepPath

	calls    []ForwardCall
	counts   Counts
	failAt   int
	failErr  error
	forwards int
}

type recState struct {
	h   uint64
	pos int
}

// TapeSession is a Session that also implements ports.TapeReplayer.
type TapeSession struct {
	*Session
}

// ForwardCall records one Forward call.
type ForwardCall struct {
	// Pos is the position of the first token (Len before the call).
	Pos    int
	Tokens []ports.Token
	Opts   ports.ForwardOptions
	// Batch is the number of items of the ForwardBatch the call ran in (0: a Forward of its own).
	Batch int
	// Tree holds the parents of a ForwardTree call's nodes (nil for Forward).
	Tree []int
}

// Counts tallies the session's rollback-related calls.
type Counts struct {
	Trims, Snapshots, Restores, Replays int
}

// State is a comparable copy of everything a session holds; two sessions fed the same committed tokens have
// equal States.
type State struct {
	Len    int
	KV     [][]ports.Token
	Rec    []uint64
	RecPos []int
}

// Len returns the number of positions held by the attention caches.
func (s *Session) Len() int { return s.n }

// State returns a copy of the session's state.
func (s *Session) State() State {
	st := State{Len: s.n}
	for _, kv := range s.kv {
		st.KV = append(st.KV, slices.Clone(kv))
	}
	for _, r := range s.rec {
		st.Rec = append(st.Rec, r.h)
		st.RecPos = append(st.RecPos, r.pos)
	}
	return st
}

// Calls returns the Forward calls so far.
func (s *Session) Calls() []ForwardCall { return slices.Clone(s.calls) }

// Counts returns the rollback-related call counts.
func (s *Session) Counts() Counts { return s.counts }

// FailForward makes the call-th Forward from now (1 = the next) return err.
func (s *Session) FailForward(call int, err error) {
	s.failAt, s.failErr = s.forwards+call, err
}

// Forward runs tokens at positions Len()..Len()+len(tokens)-1.
func (s *Session) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	res, err := s.forward(ctx, tokens, opts, 0)
	if err == nil && s.m.cfg.ForwardCost != nil {
		s.m.advance(s.m.cfg.ForwardCost(len(tokens)))
	}
	return res, err
}

// forward is Forward without the simulated cost; batch is the size of the batch it runs in (0: alone).
func (s *Session) forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions, batch int) (ports.ForwardResult, error) {
	if err := s.check(); err != nil {
		return ports.ForwardResult{}, err
	}
	if err := s.checkNoTree(); err != nil {
		return ports.ForwardResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return ports.ForwardResult{}, fmt.Errorf("portfake forward: %w", err)
	}
	s.forwards++
	s.calls = append(s.calls, ForwardCall{Pos: s.n, Tokens: slices.Clone(tokens), Opts: opts, Batch: batch})
	if s.forwards == s.failAt {
		return ports.ForwardResult{}, fmt.Errorf("portfake forward %d: %w", s.forwards, s.failErr)
	}
	var errs []error
	if len(tokens) == 0 {
		errs = append(errs, errors.New("empty block"))
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= s.m.cfg.Vocab {
			errs = append(errs, fmt.Errorf("token %d at block slot %d outside vocabulary %d", t, i, s.m.cfg.Vocab))
		}
	}
	if opts.Rows < 0 || opts.Rows > len(tokens) {
		errs = append(errs, fmt.Errorf("rows %d outside [0, %d]", opts.Rows, len(tokens)))
	}
	if opts.Sampling != nil {
		if err := opts.Sampling.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for i, r := range s.rec {
		if r.pos != s.n {
			errs = append(errs, fmt.Errorf("recurrent layer %d is at position %d but the attention caches at %d: roll back before Forward", i, r.pos, s.n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ports.ForwardResult{}, fmt.Errorf("portfake forward: %w", err)
	}
	if s.n+len(tokens) > s.m.cfg.ContextLength {
		return ports.ForwardResult{}, fmt.Errorf("portfake forward of %d at %d (context %d): %w",
			len(tokens), s.n, s.m.cfg.ContextLength, ports.ErrContextFull)
	}
	s.serial++
	rows := opts.Rows
	if rows == 0 {
		rows = len(tokens)
	}
	var res ports.ForwardResult
	var tape *Tape
	if opts.RecordTape && s.m.cfg.Tape && !s.m.cfg.DropTapes && len(s.rec) > 0 {
		tape = &Tape{owner: s, serial: s.serial, pos0: s.n, tokens: slices.Clone(tokens)}
		for _, r := range s.rec {
			tape.h0 = append(tape.h0, r.h)
		}
		res.Tape = tape
	}
	var taps *Taps
	if opts.Taps {
		taps = &Taps{owner: s, serial: s.serial}
	}
	hs := make([]uint64, len(s.rec))
	for i, tok := range tokens {
		pos := s.n
		prev := ports.NoToken
		if len(s.kv) > 0 && pos > 0 {
			prev = s.kv[0][pos-1]
		}
		for l := range s.kv {
			s.kv[l] = append(s.kv[l], tok)
		}
		for l := range s.rec {
			s.rec[l] = recState{h: s.m.recStep(s.rec[l].h, l, tok, pos), pos: pos + 1}
			hs[l] = s.rec[l].h
		}
		s.n++
		key := s.m.key(tok, prev, hs)
		if i >= len(tokens)-rows {
			logits := s.m.logits(key)
			res.Greedy = append(res.Greedy, transform(logits, ports.SamplingParams{}).Argmax())
			if opts.Sampling != nil {
				res.Dists = append(res.Dists, transform(logits, *opts.Sampling))
			}
			if opts.Logits {
				for _, v := range logits {
					res.Logits = append(res.Logits, float32(v))
				}
			}
		}
		if taps != nil {
			row := TapRow{Pos: pos, Token: tok, Values: make([]float32, len(s.taps)*s.m.cfg.TapWidth)}
			for j, l := range s.taps {
				s.m.tapRow(l, key, row.Values[j*s.m.cfg.TapWidth:(j+1)*s.m.cfg.TapWidth])
			}
			taps.rows = append(taps.rows, row)
		}
	}
	if taps != nil {
		res.Taps = taps
	}
	return res, nil
}

// TrimKV truncates the attention caches to n positions.
func (s *Session) TrimKV(n int) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.checkNoTree(); err != nil {
		return err
	}
	if n < 0 || n > s.n {
		return fmt.Errorf("portfake trim to %d outside [0, %d]", n, s.n)
	}
	s.counts.Trims++
	for l := range s.kv {
		s.kv[l] = s.kv[l][:n]
	}
	s.n = n
	return nil
}

// Snapshot copies the recurrent state; attention-only models report errors.ErrUnsupported.
func (s *Session) Snapshot() (ports.RecurrentSnapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.checkNoTree(); err != nil {
		return nil, err
	}
	if len(s.rec) == 0 {
		return nil, fmt.Errorf("portfake: attention-only model has no recurrent state: %w", errors.ErrUnsupported)
	}
	s.counts.Snapshots++
	s.m.advance(s.m.cfg.SnapshotCost)
	return &Snapshot{owner: s, states: slices.Clone(s.rec), pos: s.rec[0].pos}, nil
}

// Restore puts the recurrent layers back to snap.
func (s *Session) Restore(snap ports.RecurrentSnapshot) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.checkNoTree(); err != nil {
		return err
	}
	sn, ok := snap.(*Snapshot)
	if !ok || sn == nil || sn.owner != s {
		return fmt.Errorf("portfake restore: snapshot %T does not come from this session", snap)
	}
	s.counts.Restores++
	s.m.advance(s.m.cfg.RestoreCost)
	copy(s.rec, sn.states)
	return nil
}

// Close releases the session; later calls fail and its handles become invalid.
func (s *Session) Close() error {
	s.closed = true
	return nil
}

func (s *Session) check() error {
	if s.closed {
		return errors.New("portfake: session is closed")
	}
	return nil
}

// ReplayTape rolls the recurrent layers back to the state after the first n positions of tape's block.
func (s *TapeSession) ReplayTape(ctx context.Context, tape ports.Tape, n int) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.checkNoTree(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("portfake replay: %w", err)
	}
	tp, ok := tape.(*Tape)
	switch {
	case !ok || tp == nil || tp.owner != s.Session:
		return fmt.Errorf("portfake replay: tape %T does not come from this session", tape)
	case tp.serial != s.serial:
		return errors.New("portfake replay: tape is not from the latest Forward")
	case n < 0 || n > len(tp.tokens):
		return fmt.Errorf("portfake replay: %d steps outside [0, %d]", n, len(tp.tokens))
	}
	for l := range s.rec {
		if s.rec[l].pos != tp.pos0+len(tp.tokens) {
			return fmt.Errorf("portfake replay: recurrent layer %d at position %d, want the block end %d", l, s.rec[l].pos, tp.pos0+len(tp.tokens))
		}
	}
	s.counts.Replays++
	if s.m.cfg.ReplayCost != nil {
		s.m.advance(s.m.cfg.ReplayCost(n))
	}
	for l := range s.rec {
		h := tp.h0[l]
		for i := range n {
			h = s.m.recStep(h, l, tp.tokens[i], tp.pos0+i)
		}
		s.rec[l] = recState{h: h, pos: tp.pos0 + n}
	}
	return nil
}

// Snapshot is a copy of a session's recurrent state.
type Snapshot struct {
	owner  *Session
	states []recState
	pos    int
}

// Position returns the position the snapshot was taken at.
func (s *Snapshot) Position() int { return s.pos }

// Tape records a block's recurrent inputs and the pre-block state.
type Tape struct {
	owner  *Session
	serial uint64
	pos0   int
	h0     []uint64
	tokens []ports.Token
}

// Len returns the number of positions recorded.
func (t *Tape) Len() int { return len(t.tokens) }

// TapRow is one position's tapped features.
type TapRow struct {
	Pos    int
	Token  ports.Token
	Values []float32
}

// Taps is the toy model's tap matrix. A Taps made by Forward becomes invalid at the session's next Forward
// or Close (as the port allows); Rows reads that fail then report it, which catches a missing Detach.
type Taps struct {
	owner  *Session // nil once detached
	serial uint64
	rows   []TapRow
}

// Rows returns the number of positions.
func (t *Taps) Rows() int { return len(t.rows) }

// Slice returns a view of the first n rows; it panics when n is outside [0, Rows()], a caller bug.
func (t *Taps) Slice(n int) ports.Taps {
	if n < 0 || n > len(t.rows) {
		panic(fmt.Sprintf("portfake: Taps.Slice(%d) outside [0, %d]", n, len(t.rows)))
	}
	return &Taps{owner: t.owner, serial: t.serial, rows: t.rows[:n:n]}
}

// Detach returns a copy that stays valid after later Forward calls.
func (t *Taps) Detach() ports.Taps {
	rows := make([]TapRow, len(t.rows))
	for i, r := range t.rows {
		rows[i] = TapRow{Pos: r.Pos, Token: r.Token, Values: slices.Clone(r.Values)}
	}
	return &Taps{rows: rows}
}

// Valid reports an error when the taps were invalidated by a later Forward or Close of their session.
func (t *Taps) Valid() error {
	if t.owner != nil && (t.owner.closed || t.owner.serial != t.serial) {
		return errors.New("portfake: taps used after a later Forward or Close of their session (missing Detach?)")
	}
	return nil
}

// Values returns a copy of the rows, or an error when the taps are no longer valid.
func (t *Taps) Values() ([]TapRow, error) {
	if err := t.Valid(); err != nil {
		return nil, err
	}
	return t.Detach().(*Taps).rows, nil
}

// SessionOf returns the *Session behind a session opened by Model.NewSession (nil for other types).
func SessionOf(s ports.Session) *Session {
	switch v := s.(type) {
	case *Session:
		return v
	case *TapeSession:
		return v.Session
	}
	return nil
}
