package mlx

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/ports"
)

// Worker performs rank 0's control messages on a worker's stage (rank > 0): it holds the sessions rank 0
// opened, and the counterparts of rank 0's snapshots and prefixes by id until rank 0 drops its own.
// Package pipeline's worker loop receives the messages and passes each to Do. Not safe for concurrent use.
type Worker struct {
	t        *Target
	sessions map[int32]*Session
	snaps    map[int32]ports.RecurrentSnapshot
	prefixes map[int32]ports.PrefixState
}

// Worker returns the performer of a worker's control messages; an error on rank 0 or outside a pipeline.
func (t *Target) Worker() (*Worker, error) {
	if t.ring == nil || t.ring.Rank == 0 {
		return nil, fmt.Errorf("mlx: a Worker runs on a pipeline's workers (rank > 0)")
	}
	return &Worker{t: t, sessions: map[int32]*Session{}, snaps: map[int32]ports.RecurrentSnapshot{},
		prefixes: map[int32]ports.PrefixState{}}, nil
}

// Forget drops this rank's counterparts of the snapshots and prefixes rank 0 dropped (a message's Freed).
func (w *Worker) Forget(ids []int32) {
	for _, id := range ids {
		delete(w.snaps, id)
		delete(w.prefixes, id)
	}
}

// Do performs one session operation of rank 0's (every op but OpPing and OpStop, which are the loop's) on
// this rank's layers' state. An error leaves this rank's state out of step with rank 0's: the pipeline
// cannot continue.
func (w *Worker) Do(ctx context.Context, c ring.Ctrl) error {
	t := w.t
	s := w.sessions[c.Sess]
	if s == nil && c.Op != ring.OpNew && c.Op != ring.OpBatch {
		return fmt.Errorf("op %d on unknown session %d", c.Op, c.Sess)
	}
	var err error
	switch c.Op {
	case ring.OpNew:
		layers := make([]int, len(c.Payload))
		for i, l := range c.Payload {
			layers[i] = int(l)
		}
		if s, err = t.newSession(layers); err == nil {
			s.id = c.Sess
			w.sessions[c.Sess] = s
		}
	case ring.OpClose:
		err = s.Close()
		delete(w.sessions, c.Sess)
	case ring.OpForward:
		s.gen++
		s.replay = false
		if err = t.rt.Do(func() error { s.dropLast(); return nil }); err == nil {
			var r runResult
			r, err = s.run(ctx, make([]ports.Token, c.A), int(c.B), c.Flags&ring.FlagTaps != 0, c.Flags&ring.FlagTape != 0, c.Flags&ring.FlagLogits != 0, nil)
			if r.tape != nil {
				s.lastTap = r.tape
			}
			if r.taps != 0 {
				s.freeAll([]arr{r.taps})
			}
		}
	case ring.OpTree:
		err = s.workTree(ctx, c)
	case ring.OpKeepPath:
		_, err = s.KeepPath(ctx, ints(c.Payload))
	case ring.OpBatch:
		err = t.serveBatch(ctx, c, w.sessions)
	case ring.OpTrim:
		err = s.TrimKV(int(c.A))
	case ring.OpSnapshot:
		var sn ports.RecurrentSnapshot
		if sn, err = s.Snapshot(); err == nil {
			w.snaps[c.A] = sn
		}
	case ring.OpRestore:
		sn, ok := w.snaps[c.A]
		if !ok {
			err = fmt.Errorf("no snapshot %d", c.A)
		} else {
			err = s.Restore(sn)
		}
	case ring.OpExport:
		var ps ports.PrefixState
		if ps, err = s.ExportPrefix(int(c.A)); err == nil {
			w.prefixes[c.B] = ps
		}
	case ring.OpImport:
		ps, ok := w.prefixes[c.A]
		if !ok {
			err = fmt.Errorf("no prefix %d", c.A)
		} else {
			err = s.ImportPrefix(ps)
		}
	case ring.OpReplay:
		if s.lastTap == nil {
			err = fmt.Errorf("replay without a taped forward")
		} else {
			err = s.ReplayTape(ctx, s.lastTap, int(c.A))
		}
	default:
		err = fmt.Errorf("unknown op %d", c.Op)
	}
	if err != nil {
		return fmt.Errorf("op %d on session %d: %w", c.Op, c.Sess, err)
	}
	return nil
}
