package speculative

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/higgs-go/higgs/ports"
)

// rollbackProbeEvery is how many recurrent rollbacks pass between re-measurements of the strategy the auto
// cost model is not using, so a strategy that became cheaper is noticed.
const rollbackProbeEvery = 32

// rollbackEMAWeight is the weight of the newest timing in the rollback cost model.
const rollbackEMAWeight = 0.2

// rollbacker carries out the rollback policy described in the package documentation.
type rollbacker struct {
	mode      RollbackMode
	recurrent bool
	replayer  ports.TapeReplayer // nil when the session cannot replay tapes
	canSnap   bool               // Snapshot works on this session
	tapeKnown bool               // Forward has returned a tape when asked
	tapeNone  bool               // Forward returned no tape when asked: the backend does not record tapes

	replay, recompute, snapshot, partial ema
	rollbacks                            int
}

// rollbackPlan is what was prepared before a verify forward.
type rollbackPlan struct {
	recordTape bool
	snap       ports.RecurrentSnapshot
	prefer     RollbackKind
}

// newRollbacker inspects the fresh session and the configuration.
func newRollbacker(cfg Config, sess ports.Session) (*rollbacker, error) {
	r := &rollbacker{mode: cfg.Rollback}
	r.replayer, _ = sess.(ports.TapeReplayer)
	if cfg.LayerKinds != nil {
		r.recurrent = slices.Contains(cfg.LayerKinds, ports.LayerRecurrent)
		if !r.recurrent {
			// Attention-only and known to be: KV trim is the whole rollback, no snapshot probe needed.
			return r, nil
		}
	}
	_, snapErr := sess.Snapshot()
	switch {
	case snapErr == nil:
		r.canSnap = true
	case !errors.Is(snapErr, errors.ErrUnsupported):
		return nil, fmt.Errorf("probe recurrent snapshot: %w", snapErr)
	}
	if cfg.LayerKinds == nil {
		r.recurrent = r.canSnap
	}
	if !r.recurrent {
		return r, nil
	}
	switch {
	case r.mode == RollbackReplay && r.replayer == nil:
		return nil, fmt.Errorf("rollback mode replay: session %T cannot replay tapes: %w", sess, errors.ErrUnsupported)
	case r.mode == RollbackRecompute && !r.canSnap:
		return nil, fmt.Errorf("rollback mode recompute: session cannot snapshot recurrent state: %w", errors.ErrUnsupported)
	case !r.canSnap && r.replayer == nil:
		return nil, fmt.Errorf("recurrent model without snapshot or tape replay cannot roll back: %w", errors.ErrUnsupported)
	}
	return r, nil
}

// prepare readies a rollback of a verify block of bs positions: it decides whether to record a tape and
// takes a snapshot when the plan may need one (its time feeds the cost model).
func (r *rollbacker) prepare(sess ports.Session, bs int, clock ports.Clock) (rollbackPlan, error) {
	if !r.recurrent || bs <= 1 {
		return rollbackPlan{prefer: RollbackKVTrim}, nil
	}
	useTape := r.replayer != nil && !r.tapeNone
	var plan rollbackPlan
	switch r.mode {
	case RollbackReplay:
		plan = rollbackPlan{recordTape: true, prefer: RollbackTapeReplay}
	case RollbackRecompute:
		plan = rollbackPlan{prefer: RollbackSnapshotRecompute}
	default:
		switch {
		case !useTape:
			plan = rollbackPlan{prefer: RollbackSnapshotRecompute}
		case !r.canSnap:
			plan = rollbackPlan{recordTape: true, prefer: RollbackTapeReplay}
		case !r.tapeKnown:
			// Unknown whether the backend records tapes: keep a snapshot as the fallback.
			plan = rollbackPlan{recordTape: true, prefer: RollbackTapeReplay}
			return r.snapshotInto(plan, sess, clock)
		default:
			plan = rollbackPlan{prefer: r.choose()}
			plan.recordTape = plan.prefer == RollbackTapeReplay
		}
	}
	if plan.prefer == RollbackSnapshotRecompute {
		return r.snapshotInto(plan, sess, clock)
	}
	return plan, nil
}

func (r *rollbacker) snapshotInto(plan rollbackPlan, sess ports.Session, clock ports.Clock) (rollbackPlan, error) {
	t0 := clock.Now()
	snap, err := sess.Snapshot()
	if err != nil {
		return plan, fmt.Errorf("snapshot before verify: %w", err)
	}
	r.snapshot.add(float64(clock.Now().Sub(t0)))
	plan.snap = snap
	return plan, nil
}

// choose is the auto cost model: the strategy with the lower expected cost per round, with periodic
// re-measurement of the other one and an initial measurement of each.
func (r *rollbacker) choose() RollbackKind {
	if !r.replay.ok {
		return RollbackTapeReplay
	}
	if !r.recompute.ok {
		return RollbackSnapshotRecompute
	}
	pp := 1.0
	if r.partial.ok {
		pp = r.partial.v
	}
	best, other := RollbackTapeReplay, RollbackSnapshotRecompute
	if r.snapshot.v+pp*r.recompute.v < pp*r.replay.v {
		best, other = other, best
	}
	if r.rollbacks > 0 && r.rollbacks%rollbackProbeEvery == 0 {
		return other
	}
	return best
}

// apply brings the session from preLen+bs positions (after verify) to preLen+n. It returns the rollback
// kind and the taps of the n committed positions (when wantTaps).
func (r *rollbacker) apply(ctx context.Context, sess ports.Session, plan rollbackPlan, fr ports.ForwardResult,
	block []ports.Token, preLen, n int, wantTaps bool) (RollbackKind, ports.Taps, error) {
	bs := len(block)
	if plan.recordTape {
		switch {
		case fr.Tape != nil:
			r.tapeKnown = true
		case r.mode == RollbackReplay:
			return "", nil, fmt.Errorf("rollback mode replay: Forward returned no tape: %w", errors.ErrUnsupported)
		default:
			r.tapeNone = true
		}
	}
	var taps ports.Taps
	if wantTaps {
		if fr.Taps == nil || fr.Taps.Rows() != bs {
			return "", nil, fmt.Errorf("verify returned taps for %d positions, want %d", rowsOf(fr.Taps), bs)
		}
		taps = fr.Taps.Slice(n)
	}
	if r.recurrent && bs > 1 {
		r.partial.add(b2f(n < bs))
	}
	if n == bs {
		return RollbackNone, taps, nil
	}
	if !r.recurrent {
		if err := sess.TrimKV(preLen + n); err != nil {
			return "", nil, fmt.Errorf("trim KV to %d: %w", preLen+n, err)
		}
		return RollbackKVTrim, taps, nil
	}
	r.rollbacks++
	if plan.prefer == RollbackTapeReplay && fr.Tape != nil {
		if err := sess.TrimKV(preLen + n); err != nil {
			return "", nil, fmt.Errorf("trim KV to %d: %w", preLen+n, err)
		}
		if err := r.replayer.ReplayTape(ctx, fr.Tape, n); err != nil {
			return "", nil, fmt.Errorf("replay tape for %d of %d positions: %w", n, bs, err)
		}
		return RollbackTapeReplay, taps, nil
	}
	if plan.snap == nil {
		return "", nil, errors.New("rollback: no tape and no snapshot for a partial accept")
	}
	if err := sess.TrimKV(preLen); err != nil {
		return "", nil, fmt.Errorf("trim KV to %d: %w", preLen, err)
	}
	if err := sess.Restore(plan.snap); err != nil {
		return "", nil, fmt.Errorf("restore recurrent snapshot: %w", err)
	}
	// The re-forward invalidates the verify taps, so the committed taps come from it instead (identical
	// values by causality).
	fr2, err := sess.Forward(ctx, block[:n], ports.ForwardOptions{Rows: 1, Taps: wantTaps})
	if err != nil {
		return "", nil, fmt.Errorf("recompute %d committed positions: %w", n, err)
	}
	if wantTaps {
		if fr2.Taps == nil || fr2.Taps.Rows() != n {
			return "", nil, fmt.Errorf("recompute returned taps for %d positions, want %d", rowsOf(fr2.Taps), n)
		}
		taps = fr2.Taps
	}
	return RollbackSnapshotRecompute, taps, nil
}

// observe feeds the measured duration of a rollback to the cost model.
func (r *rollbacker) observe(kind RollbackKind, d time.Duration) {
	switch kind {
	case RollbackTapeReplay:
		r.replay.add(float64(d))
	case RollbackSnapshotRecompute:
		r.recompute.add(float64(d))
	}
}

// ema is an exponential moving average that starts at its first sample.
type ema struct {
	v  float64
	ok bool
}

func (e *ema) add(x float64) { e.addWeighted(x, rollbackEMAWeight) }

func (e *ema) addWeighted(x, w float64) {
	if !e.ok {
		e.v, e.ok = x, true
		return
	}
	e.v += w * (x - e.v)
}

// addTime averages a measured time robustly against contention, whose noise only ever slows a round down: a
// sample above clip× the average (a round preempted for a whole time slice) counts as clip× the average, so it
// moves the average by at most a factor of 1 + w·(clip−1), while a lasting slow-down is still followed within a
// few rounds; a sample below the average's 1/clip replaces it, since a round that fast shows the average was
// inflated (its first samples taken under a burst) rather than the machine suddenly faster than it can be.
func (e *ema) addTime(x, w, clip float64) {
	switch {
	case !e.ok:
	case x < e.v/clip:
		e.v = x
		return
	default:
		x = min(x, e.v*clip)
	}
	e.addWeighted(x, w)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func rowsOf(t ports.Taps) int {
	if t == nil {
		return 0
	}
	return t.Rows()
}
