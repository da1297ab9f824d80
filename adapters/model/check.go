package model

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

// CheckTokens refuses ids outside a vocabulary of vocab tokens.
func CheckTokens(tokens []ports.Token, vocab int) error {
	for i, tok := range tokens {
		if tok < 0 || int(tok) >= vocab {
			return fmt.Errorf("token %d at index %d outside the vocabulary [0,%d)", tok, i, vocab)
		}
	}
	return nil
}

// Position is a session's bookkeeping that every backend shares: how many positions the attention caches
// hold (Len) and where the recurrent layers are (they lag behind between a rollback's TrimKV and its Restore
// or ReplayTape).
type Position struct {
	N, Rec    int
	Recurrent bool // the model has recurrent layers
}

// CheckForward validates a Forward of tokens with opts against the session's position, a vocabulary of
// vocab tokens and a context of contextLength positions, and returns the number of rows to return.
func (p Position) CheckForward(tokens []ports.Token, opts ports.ForwardOptions, vocab, contextLength int) (rows int, err error) {
	T := len(tokens)
	switch {
	case T == 0:
		return 0, errors.New("no tokens")
	case opts.Rows < 0:
		return 0, fmt.Errorf("rows %d is negative", opts.Rows)
	case p.N+T > contextLength:
		return 0, fmt.Errorf("%d held + %d new > %d: %w", p.N, T, contextLength, ports.ErrContextFull)
	case p.Recurrent && p.Rec != p.N:
		return 0, fmt.Errorf("recurrent state is at position %d but the KV caches at %d (finish the rollback with Restore or ReplayTape)", p.Rec, p.N)
	}
	if err := CheckTokens(tokens, vocab); err != nil {
		return 0, err
	}
	if opts.Sampling != nil {
		if err := opts.Sampling.Validate(); err != nil {
			return 0, err
		}
	}
	rows = T
	if opts.Rows > 0 && opts.Rows < T {
		rows = opts.Rows
	}
	return rows, nil
}

// Trim validates TrimKV(n) and applies it: Len becomes n, and so does the recurrent position of a model
// without recurrent layers.
func (p *Position) Trim(n int) error {
	if n < 0 || n > p.N {
		return fmt.Errorf("trim to %d outside [0,%d]", n, p.N)
	}
	p.N = n
	if !p.Recurrent {
		p.Rec = n
	}
	return nil
}

// CheckExport validates ExportPrefix(n) (ports.PrefixExporter) against the session's position: a prefix
// of 1..N positions, and on a model with recurrent layers exactly N with every layer there (the recurrent
// state exists only where the session is).
func (p Position) CheckExport(n int) error {
	switch {
	case n < 1 || n > p.N:
		return fmt.Errorf("export prefix %d outside [1,%d]", n, p.N)
	case p.Recurrent && p.Rec != p.N:
		return fmt.Errorf("export prefix: recurrent state is at position %d but the KV caches at %d", p.Rec, p.N)
	case p.Recurrent && n != p.N:
		return fmt.Errorf("export prefix %d: a session with recurrent layers can only export its whole length %d", n, p.N)
	}
	return nil
}

// TapeHeader is what every backend's tape records beside its layers' arrays: the session and the number of
// its Forward call that recorded it, the block's length and its first position.
type TapeHeader struct {
	Session       any
	Forward       uint64
	Length, Start int
}

// Len returns the number of positions recorded.
func (h TapeHeader) Len() int { return h.Length }

// Recorder names the session and Forward call that recorded the tape.
func (h TapeHeader) Recorder() (any, uint64) { return h.Session, h.Forward }

// RecordedTape is what CheckReplay asks of a backend's tape: the session that recorded it and the number of
// that session's Forward call that did.
type RecordedTape interface {
	ports.Tape
	Recorder() (session any, forward uint64)
}

// CheckReplay validates ReplayTape(ctx, t, n) on session, whose latest Forward is number forward and recorded
// latest (nil when it recorded none); replayed says a replay or restore ran since. skip reports that nothing
// is to be replayed: n is the whole block and the recurrent layers still hold its end state.
func CheckReplay(ctx context.Context, t ports.Tape, session any, forward uint64, latest any, n int, replayed bool) (skip bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	rt, ok := t.(RecordedTape)
	if !ok || rt == nil {
		return false, fmt.Errorf("tape %T was not recorded by this session", t)
	}
	owner, gen := rt.Recorder()
	switch {
	case owner != session:
		return false, fmt.Errorf("tape %T was not recorded by this session", t)
	case gen != forward || latest != any(t):
		return false, ErrStaleTape
	case n < 0 || n > t.Len():
		return false, fmt.Errorf("%d steps outside [0,%d]", n, t.Len())
	}
	return n == t.Len() && !replayed, nil
}

// ErrStaleTape is returned by ReplayTape for a tape that is not from the session's latest Forward.
var ErrStaleTape = errors.New("tape is not from the latest Forward of this session")

// PerLayer returns n fresh zero states, one per layer (a session's or a draft session's caches).
func PerLayer[T any](n int) []*T {
	out := make([]*T, n)
	for i := range out {
		out[i] = new(T)
	}
	return out
}

// TapSlots maps a session's tap layers to their slots in its tap matrix (a layer may be tapped twice).
type TapSlots struct {
	layers []int
	slots  map[int][]int
}

// NewTapSlots validates tap layers against a model of n layers.
func NewTapSlots(layers []int, n int) (TapSlots, error) {
	t := TapSlots{layers: slices.Clone(layers), slots: map[int][]int{}}
	for i, l := range layers {
		if l < 0 || l >= n {
			return TapSlots{}, fmt.Errorf("tap layer %d outside [0,%d)", l, n)
		}
		t.slots[l] = append(t.slots[l], i)
	}
	return t, nil
}

// Len is the number of taps.
func (t TapSlots) Len() int { return len(t.layers) }

// Layers is the tapped layer of each slot, in slot order (shared; do not modify).
func (t TapSlots) Layers() []int { return t.layers }

// Collect returns the per-slot outputs a pass fills and the Forward callback that fills them.
func Collect[X any](t TapSlots) (tapped []X, tap func(layer int, x X)) {
	tapped = make([]X, len(t.layers))
	return tapped, func(layer int, x X) {
		for _, slot := range t.slots[layer] {
			tapped[slot] = x
		}
	}
}

// PrefixSize is the memory an exported prefix state holds (ports.PrefixState.Bytes), embedded by every
// backend's states.
type PrefixSize struct{ Size int64 }

// Bytes returns the memory the state holds.
func (s PrefixSize) Bytes() int64 { return s.Size }

// ErrForeignSession is wrapped by ClaimSessions when a batch item's session was not opened by the target or
// drafter asked to run the batch.
var ErrForeignSession = errors.New("session was not opened by this model")

// ClaimSessions is the check every batched call starts with: each of the n items' sessions (at(i)) must be
// one of this model's (own returns the backend's session and whether it belongs), and no session may appear
// twice, since an item advances its session's state. what names the call in errors ("cpu forward batch").
func ClaimSessions[S comparable](what string, n int, at func(i int) any, own func(v any) (S, bool)) ([]S, error) {
	out := make([]S, n)
	seen := make(map[S]int, n)
	for i := range n {
		v := at(i)
		s, ok := own(v)
		if !ok {
			return nil, fmt.Errorf("%s: item %d: %T: %w", what, i, v, ErrForeignSession)
		}
		if j, dup := seen[s]; dup {
			return nil, fmt.Errorf("%s: items %d and %d share one session", what, j, i)
		}
		seen[s] = i
		out[i] = s
	}
	return out, nil
}
