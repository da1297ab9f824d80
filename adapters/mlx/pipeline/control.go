package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
)

// Ping sends a control message round the ring and waits for the last rank's answer: an error (wrapping
// ErrRankLost after the ping timeout) means a rank is gone. Rank 0 only.
func (n *Node) Ping(ctx context.Context) error {
	p := n.p
	if p.Rank != 0 {
		return fmt.Errorf("mlx: Ping runs on a pipeline's rank 0")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.DoWithin(p.Ping, func() error {
		if p.Stopped.Load() {
			return errors.New("mlx: the pipeline is stopped")
		}
		if err := p.SendCtrl(ring.Ctrl{Op: ring.OpPing}); err != nil {
			return err
		}
		if err := p.AwaitAcks(); err != nil {
			return err
		}
		return p.AwaitReply()
	})
}

// Heartbeat pings the pipeline through MLX's ring every period while no other operation ran in it, until
// ctx ends or a ping fails: it keeps workers with an Idle bound alive and checks the ring's own links
// between requests (a lost rank itself is noticed sooner, by the heartbeat channel: see the package doc).
// Rank 0 only.
func (n *Node) Heartbeat(ctx context.Context, period time.Duration) error {
	p := n.p
	if p.Rank != 0 || period <= 0 {
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
		if time.Since(time.Unix(0, p.LastSent.Load())) < period {
			continue
		}
		if err := n.Ping(ctx); err != nil {
			if ctx.Err() != nil || p.Stopped.Load() {
				return nil // stopping, not lost
			}
			return err
		}
	}
}

// Stop tells the workers to leave their loops and returns every rank's timings and stage, gathered with
// MLX's all_gather (rank 0; a broken or already stopped pipeline is left as it is and gives nil), then
// ends the heartbeats. Every rank logs its own.
func (n *Node) Stop() ([]RankStats, error) {
	p := n.p
	if p.Rank != 0 || p.RT.Err() != nil || !p.Stopped.CompareAndSwap(false, true) {
		return nil, nil
	}
	defer n.beats.Close()
	st := n.Stats()
	n.log.Info().Int("rank", 0).Int("forwards", st.Forwards).Dur("compute", st.Compute).
		Dur("wait", st.Wait).Msg("pipeline stage stopped")
	if err := p.Do(func() error { return p.SendCtrl(ring.Ctrl{Op: ring.OpStop}) }); err != nil {
		return nil, err
	}
	return n.gatherStats()
}

// gatherStats is every rank's part of the all_gather of their RankStats (each value as two int32 halves).
func (n *Node) gatherStats() ([]RankStats, error) {
	p := n.p
	st := p.Stats
	stage := p.Stage()
	vals := []int64{int64(st.Forwards), int64(st.Compute), int64(st.Wait), int64(st.Send), int64(stage.Lo), int64(stage.Hi), n.t.WeightBytes(),
		st.SentBytes, int64(st.Batches), int64(st.MicroBatches), int64(st.BatchCompute), int64(st.BatchWait), int64(st.BatchSend)}
	enc := make([]int32, 2*len(vals))
	for i, v := range vals {
		enc[2*i], enc[2*i+1] = int32(uint64(v)>>32), int32(uint32(v))
	}
	var all []int32
	err := p.Do(func() error {
		var err error
		all, err = p.AllGather(enc)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(all) != p.Size*len(enc) {
		return nil, fmt.Errorf("mlx distributed stats: gathered %d values, want %d", len(all), p.Size*len(enc))
	}
	out := make([]RankStats, p.Size)
	for r := range out {
		v := func(i int) int64 {
			j := r*len(enc) + 2*i
			return int64(uint64(uint32(all[j]))<<32 | uint64(uint32(all[j+1])))
		}
		out[r] = RankStats{Rank: r, Lo: int(v(4)), Hi: int(v(5)), WeightBytes: v(6), Stats: Stats{
			Forwards: int(v(0)), Compute: time.Duration(v(1)), Wait: time.Duration(v(2)), Send: time.Duration(v(3)), SentBytes: v(7),
			Batches: int(v(8)), MicroBatches: int(v(9)), BatchCompute: time.Duration(v(10)), BatchWait: time.Duration(v(11)), BatchSend: time.Duration(v(12))}}
	}
	return out, nil
}
