package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
)

// Serve is a worker's loop (rank > 0): it performs rank 0's control messages on its own stage until rank 0
// stops the pipeline (nil) or ctx ends. MLX's receive cannot be interrupted, so a cancelled Serve returns
// while the MLX thread still waits; the process is expected to exit.
func (n *Node) Serve(ctx context.Context) error {
	p := n.p
	w, err := n.t.Worker()
	if err != nil {
		return err
	}
	for {
		var c ring.Ctrl
		done := make(chan error, 1)
		go func() {
			done <- p.RT.Do(func() error {
				var err error
				if c, err = p.RecvCtrl(); err == nil && !p.Last() {
					err = p.SendCtrl(c)
				}
				return err
			})
		}()
		if err := waitCtrl(ctx, done, p); err != nil {
			return err
		}
		if n.onCtrl != nil {
			n.onCtrl()
		}
		w.Forget(c.Freed)
		switch c.Op {
		case ring.OpStop:
			st := p.Stats
			n.log.Info().Int("rank", p.Rank).Int("forwards", st.Forwards).Dur("compute", st.Compute).
				Dur("wait", st.Wait).Dur("send", st.Send).Msg("pipeline stage stopped")
			if _, err := n.gatherStats(); err != nil {
				return fmt.Errorf("rank %d: stop: %w", p.Rank, err)
			}
			n.beats.Close()
			return nil
		case ring.OpPing:
			err := p.Do(func() error {
				if err := p.Ack(); err != nil {
					return err
				}
				if p.Last() {
					return p.Reply()
				}
				return p.Relay()
			})
			if err != nil {
				return fmt.Errorf("rank %d: ping: %w", p.Rank, err)
			}
		default:
			if err := w.Do(ctx, c); err != nil {
				// The pipeline cannot continue with this rank's state out of step: stop, so rank 0 sees the
				// rank lost within its timeout rather than a wrong result.
				return fmt.Errorf("rank %d: %w", p.Rank, err)
			}
		}
	}
}

// waitCtrl waits for the next control message's receipt, at most p.Idle when that is set.
func waitCtrl(ctx context.Context, done <-chan error, p *ring.Peer) error {
	var idle <-chan time.Time
	if p.Idle > 0 {
		tm := time.NewTimer(p.Idle)
		defer tm.Stop()
		idle = tm.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-idle:
		return fmt.Errorf("%w: rank %d: nothing from rank 0 for %v", ErrRankLost, p.Rank, p.Idle)
	case err := <-done:
		if err != nil {
			return fmt.Errorf("rank %d: control: %w", p.Rank, err)
		}
		return nil
	}
}
