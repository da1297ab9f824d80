package mlx

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// Pipeline parallelism over MLX distributed. Every rank runs its stage's layers (model.Stage, cut by memory
// with model.SplitStages) and passes the residual stream to the next rank with mlx send/recv; the ring
// backend only connects neighbours, so everything flows one way round the ring: rank 0 → 1 → … → n−1 → 0.
// Rank 0 holds the domain, the drafter and HTTP; before every operation it sends one control message down
// the ring (each worker passes it on before acting), so every rank runs the same session operations in the
// same order on its own layers' state. The last rank returns the greedy ids (the logits when asked) and the
// taps of the workers' tapped layers to rank 0, which runs the drafter: taps end where the drafter runs, and
// rank 0 is where the domain asks for them, so no second hop is needed.

// EnvRank and EnvHostfile are MLX's own conventions (mlx.launch sets them; the ring backend reads them):
// this process's rank and a JSON list, in rank order, of each rank's "ip:port" addresses.
const (
	EnvRank     = "MLX_RANK"
	EnvHostfile = "MLX_HOSTFILE"
)

// ErrRankLost is wrapped by every error of a distributed target after a rank stopped answering: MLX's
// receive cannot time out, so the MLX thread of rank 0 stays blocked and the process must be restarted.
// It wraps ports.ErrBackendLost, so in-flight and later requests fail with 503 and the error's text, which
// names the rank.
var ErrRankLost = fmt.Errorf("mlx distributed: rank lost: %w", ports.ErrBackendLost)

// errPipelined refuses the abilities a pipelined target does not offer yet.
var errPipelined = fmt.Errorf("mlx: not available on a target split across processes: %w", errors.ErrUnsupported)

// DistOptions configures a distributed target.
type DistOptions struct {
	// Backend is MLX's distributed backend ("ring", "jaccl", "mpi"; "" lets MLX choose).
	Backend string
	// JoinTimeout bounds the wait for every rank to connect (0: one minute).
	JoinTimeout time.Duration
	// DrafterHead loads the LM head on rank 0 as well (beside the last rank's), for a DFlash drafter there:
	// the drafter shares the target's embedding and head, and the embedding is rank 0's already.
	DrafterHead bool
	// PingTimeout bounds a ping's round trip (0: ten seconds): a ping runs only while the pipeline is
	// idle, so it needs no room for a long prefill.
	PingTimeout time.Duration
	// Idle makes a worker give up when rank 0 has sent nothing for that long (0: wait for ever); rank 0
	// keeps an idle pipeline alive with Heartbeat at a shorter period.
	Idle time.Duration
	// Timeout bounds one round trip of the pipeline (a chunk's forward on every rank, or a control message
	// answered; 0: two minutes).
	Timeout time.Duration
	// MicroBatchRows is the rows a micro-batch of a batched round aims at (0: 32): a round of R rows is cut
	// into min(ranks, ⌈R/MicroBatchRows⌉, its sequences) micro-batches of whole sequences, so rank k+1 runs
	// micro-batch i while rank k runs i+1. Each micro-batch reads the stage's weights again, so rounds of
	// few rows (decoding) pass whole: cutting them would cost every rank more than the overlap saves.
	MicroBatchRows int
}

// RankFromEnv reads MLX_RANK (and checks that MLX_HOSTFILE is set, for the ring backend's sake).
func RankFromEnv() (int, error) {
	r, err := strconv.Atoi(os.Getenv(EnvRank))
	if err != nil || r < 0 {
		return 0, fmt.Errorf("mlx distributed: %s=%q is not a rank (mlx.launch sets it)", EnvRank, os.Getenv(EnvRank))
	}
	return r, nil
}

// pipeline is a target's place in a distributed pipeline.
type pipeline struct {
	group      mlxc.Group
	rank, size int
	stages     []model.Stage
	timeout    time.Duration
	head       bool          // rank 0 holds the LM head too (DistOptions.DrafterHead)
	idle, ping time.Duration // DistOptions.Idle, PingTimeout
	lastSent   atomic.Int64  // unix nanoseconds of rank 0's latest control message
	stopped    atomic.Bool   // rank 0 sent opStop
	stats      PipelineStats // MLX thread only
	microRows  int           // DistOptions.MicroBatchRows
	// waiting is the rank this one waits on now (for the timeout's message): on rank 0 the rank whose
	// acknowledgement is due, or size when every worker acknowledged and the last rank's answer is due.
	waiting atomic.Int32
	mu      sync.Mutex
	nextID  int32
	freed   []int32 // snapshot ids rank 0 dropped, sent to the workers with the next control message
}

func (p *pipeline) stage() model.Stage {
	st := p.stages[p.rank]
	st.Head = p.rank == 0 && p.head
	return st
}
func (p *pipeline) last() bool { return p.rank == p.size-1 }

// newID numbers sessions and snapshots (rank 0 only).
func (p *pipeline) newID() int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextID++
	return p.nextID
}

// drop queues the id of a snapshot or prefix rank 0 no longer holds, for the workers to free theirs.
func (p *pipeline) drop(id int32) {
	p.mu.Lock()
	p.freed = append(p.freed, id)
	p.mu.Unlock()
}

// join initialises MLX distributed within d: a rank that never joins fails every rank's load.
func join(rt *mlxc.Runtime, o DistOptions) (*pipeline, error) {
	d := o.JoinTimeout
	if d <= 0 {
		d = time.Minute
	}
	if os.Getenv(EnvHostfile) == "" && (o.Backend == "" || o.Backend == "ring") {
		return nil, fmt.Errorf("mlx distributed: %s is not set (a JSON list of each rank's \"ip:port\" addresses, as mlx.launch writes)", EnvHostfile)
	}
	// MLX's ring sends on plain sockets from its own threads: a send to a rank that died raises SIGPIPE,
	// which would end this process without a word. Ignored, the send fails with EPIPE instead, and the
	// round's timeout reports the lost rank.
	signal.Ignore(syscall.SIGPIPE)
	p := &pipeline{timeout: o.Timeout, head: o.DrafterHead, idle: o.Idle, ping: cmp.Or(o.PingTimeout, 10*time.Second),
		microRows: cmp.Or(o.MicroBatchRows, 32)}
	if p.timeout <= 0 {
		p.timeout = 2 * time.Minute
	}
	err := rt.DoWithin(d, func() error {
		return fmt.Errorf("%w: not every rank joined within %v (hostfile %s)", ErrRankLost, d, os.Getenv(EnvHostfile))
	}, func() error {
		if !mlxc.DistributedAvailable(o.Backend) {
			return fmt.Errorf("%w: this libmlxc has no distributed backend %q", ErrUnavailable, o.Backend)
		}
		var bk *byte
		if o.Backend != "" {
			bk = mlxc.CString(o.Backend)
		}
		g := mlxc.DistributedGroupNew()
		if err := rt.Check(mlxc.DistributedInit(&g, true, bk)); err != nil {
			return fmt.Errorf("mlx distributed init: %w", err)
		}
		p.group = g
		p.rank, p.size = int(mlxc.DistributedGroupRank(g)), int(mlxc.DistributedGroupSize(g))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if p.size < 2 {
		return nil, fmt.Errorf("mlx distributed: the group has %d rank; a pipeline needs 2 or more", p.size)
	}
	return p, nil
}

// stageBytes sizes each layer of a checkpoint (its stored bytes), and the embedding's and head's, without
// reading any tensor's data.
func stageBytes(dir string, layers int) (layer []int64, first, last int64, err error) {
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, 0, 0, err
	}
	defer st.Close()
	layer = make([]int64, layers)
	for _, n := range st.Names() {
		c, keep := hfmodel.NormaliseName(n)
		if !keep {
			continue
		}
		t, err := st.Tensor(n)
		if err != nil {
			return nil, 0, 0, err
		}
		b := int64(len(t.Data))
		switch i := model.TensorStage(c); {
		case i >= layers:
			return nil, 0, 0, fmt.Errorf("tensor %q: layer %d of %d", n, i, layers)
		case i >= 0:
			layer[i] += b
		case i == -2:
			last += b
		default:
			first += b
		}
	}
	return layer, first, last, nil
}

// do runs f on the MLX thread, bounded by the pipeline's timeout when f waits on other ranks.
func (t *Target) do(f func() error) error {
	if t.pipe == nil {
		return t.rt.Do(f)
	}
	return t.doWithin(t.pipe.timeout, f)
}

// doWithin is do bounded by d.
func (t *Target) doWithin(d time.Duration, f func() error) error {
	p := t.pipe
	return t.rt.DoWithin(d, func() error { return p.lost(d) }, f)
}

// lost is the error of a round that did not finish within d, naming the rank it waited on. With 3 or more
// ranks every worker acknowledges its part of each round to rank 0 (ack, relay), so rank 0 knows how far
// the round got: the first rank whose acknowledgement is missing stopped (or its link did).
func (p *pipeline) lost(d time.Duration) error {
	w := int(p.waiting.Load())
	switch {
	case p.rank > 0 && w > p.rank:
		return fmt.Errorf("%w: rank %d: no acknowledgement from rank %d within %v", ErrRankLost, p.rank, w, d)
	case p.rank > 0:
		return fmt.Errorf("%w: rank %d: no message from rank %d within %v", ErrRankLost, p.rank, p.rank-1, d)
	case p.size == 2 || w <= 1:
		return fmt.Errorf("%w: no answer from rank 1 within %v", ErrRankLost, d)
	case w >= p.size:
		return fmt.Errorf("%w: no answer from rank %d within %v (every worker acknowledged its part of the round)", ErrRankLost, p.size-1, d)
	default:
		return fmt.Errorf("%w: no answer from rank %d within %v (ranks 1..%d acknowledged their part of the round)", ErrRankLost, w, d, w-1)
	}
}

// ack is worker r's acknowledgement of its part of a round (its layers computed), sent towards rank 0 by
// way of rank r−1; relay then passes on those of the ranks after it. Only with 3 or more ranks: with 2,
// rank 1's answer is the acknowledgement. On the MLX thread.
func (t *Target) ack() error {
	p := t.pipe
	if p.size < 3 || p.rank == 0 {
		return nil
	}
	g := newGraph(t.rt, "mlx distributed ack")
	defer g.release()
	g.eval(g.send(uploadI32(g, []int32{int32(p.rank)}, 1), p.rank-1, p.group))
	return g.err
}

// relay passes the acknowledgements of ranks r+1..n−1 from rank r+1 on to rank r−1 (worker r).
func (t *Target) relay() error {
	p := t.pipe
	if p.size < 3 || p.rank == 0 || p.last() {
		return nil
	}
	defer p.waiting.Store(int32(p.rank - 1))
	for q := p.rank + 1; q < p.size; q++ {
		p.waiting.Store(int32(q))
		g := newGraph(t.rt, "mlx distributed ack")
		a := g.recv(mlxc.Int32, p.rank+1, p.group, 1)
		g.eval(a)
		g.eval(g.send(a, p.rank-1, p.group))
		err := g.err
		g.release()
		if err != nil {
			return err
		}
	}
	return nil
}

// awaitAcks receives every worker's acknowledgement of the round, in rank order (rank 0, 3 or more ranks),
// and leaves waiting at size: the last rank's answer is next.
func (t *Target) awaitAcks() error {
	p := t.pipe
	defer p.waiting.Store(int32(p.size))
	if p.size < 3 {
		return nil
	}
	for q := 1; q < p.size; q++ {
		p.waiting.Store(int32(q))
		g := newGraph(t.rt, "mlx distributed ack")
		a := g.recv(mlxc.Int32, 1, p.group, 1)
		g.eval(a)
		v := g.readI32(a)
		err := g.err
		g.release()
		if err != nil {
			return err
		}
		if len(v) != 1 || int(v[0]) != q {
			return fmt.Errorf("mlx distributed: acknowledgement %v where rank %d's was due", v, q)
		}
	}
	return nil
}

// PipelineStats is where a rank's forward rounds spent their time: Compute its own layers, Wait its input
// (on a worker: the ranks before it and the hop; on rank 0: the results coming back round the ring, i.e.
// every worker's compute and every hop, and the workers' acknowledgements), Send passing its output on (the
// stream to the next rank; the last rank's answers to rank 0; the acknowledgements relayed): the transfer
// as its sender sees it. SentBytes counts the activations, taps and answers sent. The Batch fields are
// the same for batched rounds (ForwardBatch), cut into MicroBatches micro-batches in all.
type PipelineStats struct {
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

// Stats returns this rank's pipeline timings so far (the zero value when not distributed). Call it
// between operations, not during one.
func (t *Target) Stats() PipelineStats {
	if t.pipe == nil {
		return PipelineStats{}
	}
	var st PipelineStats
	_ = t.rt.Do(func() error { st = t.pipe.stats; return nil })
	return st
}

// Rank is this process's rank in the pipeline (0 when not distributed).
func (t *Target) Rank() int {
	if t.pipe == nil {
		return 0
	}
	return t.pipe.rank
}

// Ranks is the pipeline's size (1 when not distributed).
func (t *Target) Ranks() int {
	if t.pipe == nil {
		return 1
	}
	return t.pipe.size
}

// Stage is the layers this process holds.
func (t *Target) Stage() model.Stage {
	if t.pipe == nil {
		return model.Stage{Lo: 0, Hi: t.m.Arch.Layers}
	}
	return t.pipe.stage()
}

// WeightBytes is the memory the loaded weights hold on this process.
func (t *Target) WeightBytes() int64 { return t.weightBytes }

// Err is the error that broke the pipeline (wrapping ErrRankLost), or nil.
func (t *Target) Err() error { return t.rt.Err() }

// send and recv are MLX distributed's point-to-point ops on the CPU stream (the only one implementing them).
func (g *graph) send(x arr, dst int, grp mlxc.Group) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("distributed_send", mlxc.DistributedSend(&r, x, int32(dst), grp, g.rt.CPUStream()), r)
}

func (g *graph) recv(dt mlxc.Dtype, src int, grp mlxc.Group, shape ...int) arr {
	if g.err != nil {
		return 0
	}
	sh := i32s(shape)
	var r arr
	return g.done("distributed_recv", mlxc.DistributedRecv(&r, &sh[0], uintptr(len(sh)), dt, int32(src), grp, g.rt.CPUStream()), r)
}

// Control messages: rank 0 sends one before every session operation; each worker passes it on to the next
// (the last keeps it) and then performs it. Header: op, session id, three arguments, flags, the payload's
// length and how many freed snapshot ids follow it.
const (
	opNew int32 = iota + 1
	opClose
	opForward
	opTrim
	opSnapshot
	opRestore
	opReplay
	opPing
	opStop
	opExport
	opImport
	opBatch
)

const (
	flagTaps int32 = 1 << iota
	flagTape
	flagLogits
)

const ctrlLen = 8

type ctrl struct {
	op, sess, a, b, c, flags int32
	payload, freed           []int32
}

// sendCtrl sends c to the next rank (on the MLX thread); rank 0 adds the snapshot ids dropped since.
func (t *Target) sendCtrl(c ctrl) error {
	p := t.pipe
	if p.rank == 0 {
		p.mu.Lock()
		c.freed, p.freed = p.freed, nil
		p.mu.Unlock()
		p.lastSent.Store(time.Now().UnixNano())
		p.waiting.Store(1)
	}
	g := newGraph(t.rt, "mlx distributed control")
	defer g.release()
	h := []int32{c.op, c.sess, c.a, c.b, c.c, c.flags, int32(len(c.payload)), int32(len(c.freed))}
	g.eval(g.send(uploadI32(g, h, ctrlLen), p.rank+1, p.group))
	if body := append(append([]int32(nil), c.payload...), c.freed...); len(body) > 0 {
		g.eval(g.send(uploadI32(g, body, len(body)), p.rank+1, p.group))
	}
	return g.err
}

// recvCtrl receives the next control message from the previous rank (on the MLX thread).
func (t *Target) recvCtrl() (ctrl, error) {
	p := t.pipe
	g := newGraph(t.rt, "mlx distributed control")
	defer g.release()
	h := g.recv(mlxc.Int32, p.rank-1, p.group, ctrlLen)
	g.eval(h)
	hv := g.readI32(h)
	if g.err != nil {
		return ctrl{}, g.err
	}
	c := ctrl{op: hv[0], sess: hv[1], a: hv[2], b: hv[3], c: hv[4], flags: hv[5]}
	if n := int(hv[6] + hv[7]); n > 0 {
		b := g.recv(mlxc.Int32, p.rank-1, p.group, n)
		g.eval(b)
		body := g.readI32(b)
		if g.err != nil {
			return ctrl{}, g.err
		}
		c.payload, c.freed = body[:hv[6]], body[hv[6]:]
	}
	return c, nil
}

// broadcast sends a control message from rank 0 down the ring (a no-op when not distributed or on a
// worker, which passes messages on in its loop).
func (s *Session) broadcast(c ctrl) error {
	t := s.t
	if t.pipe == nil || t.pipe.rank != 0 {
		return nil
	}
	c.sess = s.id
	return t.do(func() error { return t.sendCtrl(c) })
}

// tapOrder is where each tap slot's rows travel: the stage holding its layer. carried[r] lists, in wire
// order, the slots of stages 1..r−1 (rank 0 keeps its own taps), own[r] the slots stage r adds.
func tapOrder(layers []int, stages []model.Stage) (own [][]int) {
	own = make([][]int, len(stages))
	for r, st := range stages {
		for slot, l := range layers {
			if st.Has(l) {
				own[r] = append(own[r], slot)
			}
		}
	}
	return own
}

// carriedSlots is the wire order of the tap slots that reach rank r (from ranks 1..r−1).
func carriedSlots(own [][]int, r int) []int {
	var out []int
	for q := 1; q < r; q++ {
		out = append(out, own[q]...)
	}
	return out
}

var _ ports.Target = (*Target)(nil)

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// exchange finishes a pipeline round after this rank's own graph was evaluated: a rank before the last
// sends its output fwd on; the last rank returns the greedy ids, the logits when asked and the workers'
// taps to rank 0, which receives them (in that order, one evaluation each, so sends and receives pair up
// whatever order MLX would schedule them in) and joins the taps in slot order; with 3 or more ranks the
// workers' acknowledgements travel back first (ack, relay, awaitAcks). It returns rank 0's ids, logits and
// taps (0 elsewhere) and accounts the time in the rank's stats.
func (s *Session) exchange(g *graph, T, rows int, wantTaps, wantLogits bool, ids, lg, fwd arr, wire []arr, tapRows []act) (arr, arr, arr) {
	p := s.t.pipe
	a := &s.t.m.Arch
	own := tapOrder(s.taps.Layers(), p.stages)
	others := carriedSlots(own, p.size)
	t0 := time.Now()
	send := func(x arr, dst int) {
		g.eval(g.send(x, dst, p.group))
		p.stats.SentBytes += arrBytes(x)
	}
	switch {
	case p.rank == 0:
		g.eval(fwd)
		p.stats.SentBytes += arrBytes(fwd)
		t1 := time.Now()
		p.stats.Send += t1.Sub(t0)
		defer func() { p.stats.Wait += time.Since(t1) }()
		if err := s.t.awaitAcks(); err != nil {
			g.fail(err)
			return 0, 0, 0
		}
		ids = g.recv(mlxc.Int32, p.size-1, p.group, rows)
		g.eval(ids)
		if wantLogits {
			lg = g.recv(mlxc.Float32, p.size-1, p.group, rows, a.Vocab)
			g.eval(lg)
		}
		var tapArr arr
		if wantTaps && s.taps.Len() > 0 {
			var got arr
			if len(others) > 0 {
				got = g.recv(s.t.dt, p.size-1, p.group, T, a.Hidden*len(others))
				g.eval(got)
			}
			parts := make([]arr, s.taps.Len())
			for _, slot := range own[0] {
				parts[slot] = tapRows[slot].a
			}
			for j, slot := range others {
				parts[slot] = g.slice(got, []int{0, j * a.Hidden}, []int{T, (j + 1) * a.Hidden})
			}
			tapArr = parts[0]
			if len(parts) > 1 {
				tapArr = g.concat(1, parts...)
			}
			g.eval(tapArr)
		}
		return ids, lg, tapArr
	case p.last():
		defer func() { p.stats.Send += time.Since(t0) }()
		if err := s.t.ack(); err != nil {
			g.fail(err)
			return 0, 0, 0
		}
		send(ids, 0)
		if wantLogits {
			send(lg, 0)
		}
		if wantTaps && len(wire) > 0 {
			msg := wire[0]
			if len(wire) > 1 {
				msg = g.concat(1, wire...)
			}
			send(msg, 0)
		}
	default:
		defer func() { p.stats.Send += time.Since(t0) }()
		if err := s.t.ack(); err != nil {
			g.fail(err)
			return 0, 0, 0
		}
		g.eval(fwd)
		p.stats.SentBytes += arrBytes(fwd)
		if err := s.t.relay(); err != nil {
			g.fail(err)
		}
	}
	return 0, 0, 0
}
