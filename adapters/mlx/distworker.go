package mlx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/ports"
)

// LoadDistributed joins MLX distributed (the ring backend reads MLX_RANK and MLX_HOSTFILE, as mlx.launch
// sets them) and loads this rank's stage of the target in dir: every rank computes the same split from the
// checkpoint's tensor sizes, so no rank reads another's layers. On rank 0 the result is the model (a
// ports.Target: use Pipeline to hide the abilities a pipeline does not offer); on the others call Serve.
func LoadDistributed(ctx context.Context, dir string, opts LoadOptions, d DistOptions) (*Target, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rt, err := mlxc.Open()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	p, err := join(rt, d)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	t, err := load(rt, dir, opts, p)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", p.rank, err)
	}
	t.log = opts.Logger
	opts.Logger.Info().Int("rank", p.rank).Int("ranks", p.size).Int("first_layer", p.stage().Lo).
		Int("end_layer", p.stage().Hi).Int64("weight_bytes", t.weightBytes).Msg("pipeline stage loaded")
	return t, nil
}

// Serve is a worker's loop (rank > 0): it performs rank 0's control messages on its own stage until rank 0
// stops the pipeline (nil) or ctx ends. MLX's receive cannot be interrupted, so a cancelled Serve returns
// while the MLX thread still waits; the process is expected to exit.
func (t *Target) Serve(ctx context.Context) error {
	p := t.pipe
	if p == nil || p.rank == 0 {
		return fmt.Errorf("mlx: Serve runs on a pipeline's workers (rank > 0)")
	}
	sessions := map[int32]*Session{}
	// held are rank 0's snapshots' and prefixes' counterparts here, by id, until rank 0 drops its own.
	snaps := map[int32]ports.RecurrentSnapshot{}
	prefixes := map[int32]ports.PrefixState{}
	for {
		var c ctrl
		done := make(chan error, 1)
		go func() {
			done <- t.rt.Do(func() error {
				var err error
				if c, err = t.recvCtrl(); err == nil && !p.last() {
					err = t.sendCtrl(c)
				}
				return err
			})
		}()
		if err := waitCtrl(ctx, done, p); err != nil {
			return err
		}
		if t.onCtrl != nil {
			t.onCtrl()
		}
		for _, id := range c.freed {
			delete(snaps, id)
			delete(prefixes, id)
		}
		if c.op == opStop {
			st := p.stats
			t.log.Info().Int("rank", p.rank).Int("forwards", st.Forwards).Dur("compute", st.Compute).
				Dur("wait", st.Wait).Dur("send", st.Send).Msg("pipeline stage stopped")
			if _, err := t.gatherStats(); err != nil {
				return fmt.Errorf("rank %d: stop: %w", p.rank, err)
			}
			return nil
		}
		if c.op == opPing {
			err := t.do(func() error {
				if err := t.ack(); err != nil {
					return err
				}
				if p.last() {
					return t.reply()
				}
				return t.relay()
			})
			if err != nil {
				return fmt.Errorf("rank %d: ping: %w", p.rank, err)
			}
			continue
		}
		s := sessions[c.sess]
		if s == nil && c.op != opNew && c.op != opBatch {
			return fmt.Errorf("rank %d: op %d on unknown session %d", p.rank, c.op, c.sess)
		}
		var err error
		switch c.op {
		case opNew:
			layers := make([]int, len(c.payload))
			for i, l := range c.payload {
				layers[i] = int(l)
			}
			if s, err = t.newSession(layers); err == nil {
				s.id = c.sess
				sessions[c.sess] = s
			}
		case opClose:
			err = s.Close()
			delete(sessions, c.sess)
		case opForward:
			s.gen++
			s.replay = false
			if err = t.rt.Do(func() error { s.dropLast(); return nil }); err == nil {
				var r runResult
				r, err = s.run(ctx, make([]ports.Token, c.a), int(c.b), c.flags&flagTaps != 0, c.flags&flagTape != 0, c.flags&flagLogits != 0)
				if r.tape != nil {
					s.lastTap = r.tape
				}
				if r.taps != 0 {
					s.freeAll([]arr{r.taps})
				}
			}
		case opBatch:
			err = t.serveBatch(ctx, c, sessions)
		case opTrim:
			err = s.TrimKV(int(c.a))
		case opSnapshot:
			var sn ports.RecurrentSnapshot
			if sn, err = s.Snapshot(); err == nil {
				snaps[c.a] = sn
			}
		case opRestore:
			sn, ok := snaps[c.a]
			if !ok {
				err = fmt.Errorf("no snapshot %d", c.a)
			} else {
				err = s.Restore(sn)
			}
		case opExport:
			var ps ports.PrefixState
			if ps, err = s.ExportPrefix(int(c.a)); err == nil {
				prefixes[c.b] = ps
			}
		case opImport:
			ps, ok := prefixes[c.a]
			if !ok {
				err = fmt.Errorf("no prefix %d", c.a)
			} else {
				err = s.ImportPrefix(ps)
			}
		case opReplay:
			if s.lastTap == nil {
				err = fmt.Errorf("replay without a taped forward")
			} else {
				err = s.ReplayTape(ctx, s.lastTap, int(c.a))
			}
		default:
			err = fmt.Errorf("unknown op %d", c.op)
		}
		if err != nil {
			// The pipeline cannot continue with this rank's state out of step: stop, so rank 0 sees the
			// rank lost within its timeout rather than a wrong result.
			return fmt.Errorf("rank %d: op %d on session %d: %w", p.rank, c.op, c.sess, err)
		}
	}
}

// waitCtrl waits for the next control message's receipt, at most p.idle when that is set.
func waitCtrl(ctx context.Context, done <-chan error, p *pipeline) error {
	var idle <-chan time.Time
	if p.idle > 0 {
		tm := time.NewTimer(p.idle)
		defer tm.Stop()
		idle = tm.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-idle:
		return fmt.Errorf("%w: rank %d: nothing from rank 0 for %v", ErrRankLost, p.rank, p.idle)
	case err := <-done:
		if err != nil {
			return fmt.Errorf("rank %d: control: %w", p.rank, err)
		}
		return nil
	}
}

// reply is the last rank's answer to a ping (on the MLX thread).
func (t *Target) reply() error {
	g := newGraph(t.rt, "mlx distributed ping")
	defer g.release()
	g.eval(g.send(uploadI32(g, []int32{int32(t.pipe.rank)}, 1), 0, t.pipe.group))
	return g.err
}

// Ping sends a control message round the ring and waits for the last rank's answer: an error (wrapping
// ErrRankLost after the pipeline's timeout) means a rank is gone. Rank 0 only.
func (t *Target) Ping(ctx context.Context) error {
	p := t.pipe
	if p == nil || p.rank != 0 {
		return fmt.Errorf("mlx: Ping runs on a pipeline's rank 0")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return t.doWithin(p.ping, func() error {
		if p.stopped.Load() {
			return errors.New("mlx: the pipeline is stopped")
		}
		if err := t.sendCtrl(ctrl{op: opPing}); err != nil {
			return err
		}
		if err := t.awaitAcks(); err != nil {
			return err
		}
		g := newGraph(t.rt, "mlx distributed ping")
		defer g.release()
		g.eval(g.recv(mlxc.Int32, p.size-1, p.group, 1))
		return g.err
	})
}

// Heartbeat pings the pipeline every period while no other operation ran in it, until ctx ends or a
// ping fails; it keeps workers with an Idle bound alive and finds a lost rank between requests (Err then
// reports it). Rank 0 only.
func (t *Target) Heartbeat(ctx context.Context, period time.Duration) error {
	p := t.pipe
	if p == nil || p.rank != 0 || period <= 0 {
		return fmt.Errorf("mlx: Heartbeat runs on a pipeline's rank 0 with a positive period")
	}
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		if time.Since(time.Unix(0, p.lastSent.Load())) < period {
			continue
		}
		if err := t.Ping(ctx); err != nil {
			if ctx.Err() != nil || p.stopped.Load() {
				return nil // stopping, not lost
			}
			return err
		}
	}
}

// Stop tells the workers to leave their loops and returns every rank's timings and stage, gathered with
// MLX's all_gather (rank 0; a broken or already stopped pipeline is left as it is and gives nil). Every
// rank logs its own.
func (t *Target) Stop() ([]RankStats, error) {
	if t.pipe == nil || t.pipe.rank != 0 || t.rt.Err() != nil || !t.pipe.stopped.CompareAndSwap(false, true) {
		return nil, nil
	}
	st := t.Stats()
	t.log.Info().Int("rank", 0).Int("forwards", st.Forwards).Dur("compute", st.Compute).
		Dur("wait", st.Wait).Msg("pipeline stage stopped")
	if err := t.do(func() error { return t.sendCtrl(ctrl{op: opStop}) }); err != nil {
		return nil, err
	}
	return t.gatherStats()
}

// RankStats is one rank's stage, weights and PipelineStats.
type RankStats struct {
	Rank        int   `json:"rank"`
	Lo          int   `json:"first_layer"`
	Hi          int   `json:"end_layer"`
	WeightBytes int64 `json:"weight_bytes"`
	PipelineStats
}

// gatherStats is every rank's part of the all_gather of their RankStats (each value as two int32 halves).
func (t *Target) gatherStats() ([]RankStats, error) {
	p := t.pipe
	st := p.stats
	vals := []int64{int64(st.Forwards), int64(st.Compute), int64(st.Wait), int64(st.Send), int64(p.stage().Lo), int64(p.stage().Hi), t.weightBytes,
		st.SentBytes, int64(st.Batches), int64(st.MicroBatches), int64(st.BatchCompute), int64(st.BatchWait), int64(st.BatchSend)}
	enc := make([]int32, 2*len(vals))
	for i, v := range vals {
		enc[2*i], enc[2*i+1] = int32(uint64(v)>>32), int32(uint32(v))
	}
	var all []int32
	err := t.do(func() error {
		g := newGraph(t.rt, "mlx distributed stats")
		defer g.release()
		var r arr
		x := uploadI32(g, enc, len(enc))
		if g.err == nil {
			r = g.done("distributed_all_gather", mlxc.DistributedAllGather(&r, x, p.group, t.rt.CPUStream()), r)
		}
		g.eval(r)
		all = g.readI32(r)
		return g.err
	})
	if err != nil {
		return nil, err
	}
	if len(all) != p.size*len(enc) {
		return nil, fmt.Errorf("mlx distributed stats: gathered %d values, want %d", len(all), p.size*len(enc))
	}
	out := make([]RankStats, p.size)
	for r := range out {
		v := func(i int) int64 {
			j := r*len(enc) + 2*i
			return int64(uint64(uint32(all[j]))<<32 | uint64(uint32(all[j+1])))
		}
		out[r] = RankStats{Rank: r, Lo: int(v(4)), Hi: int(v(5)), WeightBytes: v(6), PipelineStats: PipelineStats{
			Forwards: int(v(0)), Compute: time.Duration(v(1)), Wait: time.Duration(v(2)), Send: time.Duration(v(3)), SentBytes: v(7),
			Batches: int(v(8)), MicroBatches: int(v(9)), BatchCompute: time.Duration(v(10)), BatchWait: time.Duration(v(11)), BatchSend: time.Duration(v(12))}}
	}
	return out, nil
}
