// Package ring is the wire protocol of MLX pipeline parallelism, shared by the two packages that speak it:
// adapters/mlx, whose targets run one stage of a model and pass a forward's stream, taps and answers round
// the ring, and adapters/mlx/pipeline, which joins the group and runs the processes (rank 0's control, the
// workers' loop, pings, stop). It holds this process's place in the ring (Peer), the control messages rank 0
// sends before every session operation, the acknowledgements that let a timeout name the lost rank, the
// timings, and the heartbeats beside the ring that notice a lost rank without waiting for a round (Beats,
// beat.go: plain Go over TCP, never on the MLX thread). Everything else runs on the MLX thread unless a
// comment says otherwise.
//
// The ring backend connects neighbours only, so everything on it flows one way: rank 0 → 1 → … → n−1 → 0;
// the acknowledgements (4 bytes, with 3 or more ranks) are the one exception, relayed backwards rank to
// rank. The heartbeats are not on the ring: every worker has its own TCP connection to rank 0.
package ring

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// ErrRankLost is wrapped by every error of a distributed target after a rank was lost (its heartbeats
// stopped, or a round outlived its timeout): MLX's receive cannot time out, so the MLX thread of rank 0
// stays blocked and the process must be restarted. It wraps ports.ErrBackendLost, so in-flight and later requests fail with 503 and the error's text, which
// names the rank.
var ErrRankLost = fmt.Errorf("mlx distributed: rank lost: %w", ports.ErrBackendLost)

// Peer is this process's place in a pipeline. The exported fields are set once, when the group is joined
// and the stages are cut; Stats and the counters change as rounds run.
type Peer struct {
	RT         *mlxc.Runtime
	Group      mlxc.Group
	Rank, Size int
	// Stages are every rank's layers (model.SplitStages), set by the load.
	Stages []model.Stage
	// Timeout bounds one round trip (a chunk's forward on every rank, or a control message answered).
	Timeout time.Duration
	// Head: rank 0 holds the LM head too, for a DFlash drafter there.
	Head bool
	// Idle and Ping are a worker's bound on silence from rank 0 and a ping's bound on its round trip.
	Idle, Ping time.Duration
	// MicroRows is the rows a micro-batch of a batched round aims at.
	MicroRows int
	// LastSent is the unix nanoseconds of rank 0's latest control message (read by any goroutine).
	LastSent atomic.Int64
	// Stopped: rank 0 sent OpStop.
	Stopped atomic.Bool
	// Stats are this rank's timings (MLX thread only).
	Stats Stats
	// Waiting is the rank this one waits on now (for the timeout's message): on rank 0 the rank whose
	// acknowledgement is due, or Size when every worker acknowledged and the last rank's answer is due.
	Waiting atomic.Int32

	mu     sync.Mutex
	nextID int32
	freed  []int32 // snapshot ids rank 0 dropped, sent to the workers with the next control message
}

// Stage is this rank's layers (rank 0 with the head too when Head is set).
func (p *Peer) Stage() model.Stage {
	st := p.Stages[p.Rank]
	st.Head = p.Rank == 0 && p.Head
	return st
}

// Last reports whether this is the last rank, which computes the logits.
func (p *Peer) Last() bool { return p.Rank == p.Size-1 }

// NewID numbers sessions, snapshots and prefixes (rank 0 only; any goroutine).
func (p *Peer) NewID() int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextID++
	return p.nextID
}

// Drop queues the id of a snapshot or prefix rank 0 no longer holds, for the workers to free theirs (any
// goroutine).
func (p *Peer) Drop(id int32) {
	p.mu.Lock()
	p.freed = append(p.freed, id)
	p.mu.Unlock()
}

// Lost is the error of a round that did not finish within d, naming the rank it waited on. With 3 or more
// ranks every worker acknowledges its part of each round to rank 0 (Ack, Relay), so rank 0 knows how far
// the round got: the first rank whose acknowledgement is missing stopped (or its link did).
func (p *Peer) Lost(d time.Duration) error {
	w := int(p.Waiting.Load())
	switch {
	case p.Rank > 0 && w > p.Rank:
		return fmt.Errorf("%w: rank %d: no acknowledgement from rank %d within %v", ErrRankLost, p.Rank, w, d)
	case p.Rank > 0:
		return fmt.Errorf("%w: rank %d: no message from rank %d within %v", ErrRankLost, p.Rank, p.Rank-1, d)
	case p.Size == 2 || w <= 1:
		return fmt.Errorf("%w: no answer from rank 1 within %v", ErrRankLost, d)
	case w >= p.Size:
		return fmt.Errorf("%w: no answer from rank %d within %v (every worker acknowledged its part of the round)", ErrRankLost, p.Size-1, d)
	default:
		return fmt.Errorf("%w: no answer from rank %d within %v (ranks 1..%d acknowledged their part of the round)", ErrRankLost, w, d, w-1)
	}
}

// Do runs f on the MLX thread bounded by the round timeout: past it the runtime fails with Lost.
func (p *Peer) Do(f func() error) error { return p.DoWithin(p.Timeout, f) }

// DoWithin is Do bounded by d.
func (p *Peer) DoWithin(d time.Duration, f func() error) error {
	return p.RT.DoWithin(d, func() error { return p.Lost(d) }, f)
}

// Ack is worker r's acknowledgement of its part of a round (its layers computed), sent towards rank 0 by
// way of rank r−1; Relay then passes on those of the ranks after it. Only with 3 or more ranks: with 2,
// rank 1's answer is the acknowledgement.
func (p *Peer) Ack() error {
	if p.Size < 3 || p.Rank == 0 {
		return nil
	}
	w := p.wire("mlx distributed ack")
	defer w.release()
	w.send(w.upload(int32(p.Rank)), p.Rank-1)
	return w.err
}

// Relay passes the acknowledgements of ranks r+1..n−1 from rank r+1 on to rank r−1 (worker r).
func (p *Peer) Relay() error {
	if p.Size < 3 || p.Rank == 0 || p.Last() {
		return nil
	}
	defer p.Waiting.Store(int32(p.Rank - 1))
	for q := p.Rank + 1; q < p.Size; q++ {
		p.Waiting.Store(int32(q))
		w := p.wire("mlx distributed ack")
		w.send(w.recv(p.Rank+1, 1), p.Rank-1)
		err := w.err
		w.release()
		if err != nil {
			return err
		}
	}
	return nil
}

// AwaitAcks receives every worker's acknowledgement of the round, in rank order (rank 0, 3 or more ranks),
// and leaves Waiting at Size: the last rank's answer is next.
func (p *Peer) AwaitAcks() error {
	defer p.Waiting.Store(int32(p.Size))
	if p.Size < 3 {
		return nil
	}
	for q := 1; q < p.Size; q++ {
		p.Waiting.Store(int32(q))
		w := p.wire("mlx distributed ack")
		v := w.read(w.recv(1, 1))
		err := w.err
		w.release()
		if err != nil {
			return err
		}
		if len(v) != 1 || int(v[0]) != q {
			return fmt.Errorf("mlx distributed: acknowledgement %v where rank %d's was due", v, q)
		}
	}
	return nil
}

// Stats is where a rank's forward rounds spent their time: Compute its own layers, Wait its input (on a
// worker: the ranks before it and the hop; on rank 0: the results coming back round the ring, i.e. every
// worker's compute and every hop, and the workers' acknowledgements), Send passing its output on (the
// stream to the next rank; the last rank's answers to rank 0; the acknowledgements relayed): the transfer
// as its sender sees it. SentBytes counts the activations, taps and answers sent. The Batch fields are the
// same for batched rounds (ForwardBatch), cut into MicroBatches micro-batches in all.
type Stats struct {
	Forwards  int           `json:"forwards"`
	Compute   time.Duration `json:"compute_ns"`
	Wait      time.Duration `json:"wait_ns"`
	Send      time.Duration `json:"send_ns"`
	SentBytes int64         `json:"sent_bytes"`

	Batches      int           `json:"batches"`
	MicroBatches int           `json:"micro_batches"`
	BatchCompute time.Duration `json:"batch_compute_ns"`
	BatchWait    time.Duration `json:"batch_wait_ns"`
	BatchSend    time.Duration `json:"batch_send_ns"`
}
