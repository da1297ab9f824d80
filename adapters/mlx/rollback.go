package mlx

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// Snapshot holds handles to every recurrent layer's (immutable) state arrays at one position.
type Snapshot struct {
	sess *Session
	pos  int
	id   int32 // names the workers' copies in a pipeline (0 when not distributed)
	conv []arr
	ssm  []arr
}

// Position returns the session length the snapshot was taken at.
func (p *Snapshot) Position() int { return p.pos }

// Snapshot copies the recurrent state (see ports.Session). A model without recurrent layers has nothing to
// snapshot: the error wraps errors.ErrUnsupported, which the speculative decoder reads as "TrimKV alone".
func (s *Session) Snapshot() (ports.RecurrentSnapshot, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if !s.pos.Recurrent {
		return nil, fmt.Errorf("mlx: snapshot: model has no recurrent layers: %w", errors.ErrUnsupported)
	}
	p := &Snapshot{sess: s, pos: s.pos.Rec, conv: make([]arr, len(s.st.gdn)), ssm: make([]arr, len(s.st.gdn))}
	if pp := s.t.ring; pp != nil && pp.Rank == 0 {
		p.id = pp.NewID()
		if err := s.broadcast(ring.Ctrl{Op: ring.OpSnapshot, A: p.id}); err != nil {
			return nil, fmt.Errorf("mlx: snapshot: %w", err)
		}
		// The workers drop their copy once this one is unreachable (told with the next message).
		runtime.AddCleanup(p, func(id int32) { pp.Drop(id) }, p.id)
	}
	err := s.t.rt.Do(func() error {
		for i, g := range s.st.gdn {
			if g == nil {
				continue
			}
			var err error
			if p.conv[i], err = graph.Dup(s.t.rt, g.Conv); err != nil {
				return err
			}
			if p.ssm[i], err = graph.Dup(s.t.rt, g.SSM); err != nil {
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
	if err := s.usable(); err != nil {
		return err
	}
	p, ok := rs.(*Snapshot)
	if !ok || p == nil || p.sess != s {
		return fmt.Errorf("mlx: restore: snapshot %T was not taken from this session", rs)
	}
	if err := s.broadcast(ring.Ctrl{Op: ring.OpRestore, A: p.id}); err != nil {
		return fmt.Errorf("mlx: restore: %w", err)
	}
	err := s.t.rt.Do(func() error {
		for i, g := range s.st.gdn {
			if g == nil {
				continue
			}
			c, err := graph.Dup(s.t.rt, p.conv[i])
			if err != nil {
				return err
			}
			ss, err := graph.Dup(s.t.rt, p.ssm[i])
			if err != nil {
				mlxc.ArrayFree(c)
				return err
			}
			s.freeState(g.Conv)
			s.freeState(g.SSM)
			g.Conv, g.SSM = c, ss
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mlx: restore: %w", err)
	}
	s.pos.Rec = p.pos
	s.replay = true
	return nil
}

// freeState frees a state handle unless the latest tape holds it as S₀ / cs₀.
func (s *Session) freeState(h arr) {
	if s.lastTap != nil {
		for _, tp := range s.lastTap.Layers {
			if tp != nil && (tp.S0 == h || tp.CS0 == h) {
				return
			}
		}
	}
	mlxc.ArrayFree(h)
}

var _ ports.RecurrentSnapshot = (*Snapshot)(nil)

// freeTape releases the tape's arrays, including S₀/cs₀ unless the session still uses them as its state.
func freeTape(tp *ops.Tape) {
	live := map[arr]bool{}
	for _, h := range tp.Sess.(*Session).st.handles() {
		live[h] = true
	}
	for _, l := range tp.Layers {
		if l == nil {
			continue
		}
		for _, h := range []arr{l.Alpha, l.Delta, l.Keys, l.Rows, l.S0, l.CS0} {
			if h != 0 && !live[h] {
				mlxc.ArrayFree(h)
			}
		}
	}
	tp.Layers = nil
}

// ReplayTape rolls the recurrent layers back to the state after the first n positions of the taped block
// (bit-exact with the MLX forward: same ops, same order). n == Len keeps the verify's end state.
func (s *Session) ReplayTape(ctx context.Context, t ports.Tape, n int) error {
	if err := s.usable(); err != nil {
		return err
	}
	skip, err := model.CheckReplay(ctx, t, s, s.gen, s.lastTap, n, s.replay)
	if err != nil {
		return fmt.Errorf("mlx replay: %w", err)
	}
	tp := t.(*ops.Tape)
	if err := s.broadcast(ring.Ctrl{Op: ring.OpReplay, A: int32(n)}); err != nil {
		return fmt.Errorf("mlx replay: %w", err)
	}
	if skip {
		s.pos.Rec = tp.Start + n
		return nil
	}
	err = s.t.rt.Do(func() error {
		g := graph.New(s.t.rt, "mlx replay")
		defer g.Release()
		type upd struct {
			st        *ops.GDNState
			ssm, conv arr
		}
		var us []upd
		var outs []arr
		for i, st := range s.st.gdn {
			if st == nil {
				continue
			}
			ssm, conv := ops.Replay(g, s.t.m.Layers[i].GDN, tp.Layers[i], n)
			us = append(us, upd{st, ssm, conv})
			outs = append(outs, ssm, conv)
		}
		g.Eval(outs...)
		if g.Err != nil {
			return g.Err
		}
		for _, u := range us {
			s.freeState(u.st.SSM)
			s.freeState(u.st.Conv)
			u.st.SSM, u.st.Conv = g.Keep(u.ssm), g.Keep(u.conv)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.pos.Rec = tp.Start + n
	s.replay = true
	return nil
}
