package mlx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// A target loaded as one stage of a pipeline (LoadStage; package pipeline joins the group and runs the
// processes). Every rank runs its stage's layers (model.Stage, cut by memory with model.SplitStages) and
// passes the residual stream to the next rank with MLX send/recv; the ring backend only connects
// neighbours, so everything flows one way round the ring: rank 0 → 1 → … → n−1 → 0. On rank 0 every
// session operation first sends one control message down the ring (broadcast; the workers perform it with
// a Worker), so every rank runs the same session operations in the same order on its own layers' state.
// The last rank returns the greedy ids (the logits when asked) and the taps of the workers' tapped layers
// to rank 0, which runs the drafter: taps end where the drafter runs, and rank 0 is where the domain asks
// for them, so no second hop is needed. The wire protocol (control messages, acknowledgements, timeouts)
// is internal/ring's.

// errPipelined refuses the abilities a pipelined target does not offer yet.
var errPipelined = fmt.Errorf("mlx: not available on a target split across processes: %w", errors.ErrUnsupported)

// LoadStage loads p's stage of the target in dir (p joined the group; package pipeline makes it): every
// rank computes the same split from the checkpoint's tensor sizes (stored in p.Stages), so no rank reads
// another's layers.
func LoadStage(ctx context.Context, dir string, opts LoadOptions, p *ring.Peer) (*Target, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rt, err := mlxc.Open()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return load(rt, dir, opts, p)
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
	if t.ring == nil {
		return t.rt.Do(f)
	}
	return t.ring.Do(f)
}

// Stage is the layers this process holds.
func (t *Target) Stage() model.Stage {
	if t.ring == nil {
		return model.Stage{Lo: 0, Hi: t.m.Arch.Layers}
	}
	return t.ring.Stage()
}

// WeightBytes is the memory the loaded weights hold on this process.
func (t *Target) WeightBytes() int64 { return t.weightBytes }

// Err is the error that broke the pipeline (wrapping pipeline.ErrRankLost), or nil.
func (t *Target) Err() error { return t.rt.Err() }

// broadcast sends a control message from rank 0 down the ring (a no-op when not distributed or on a
// worker, which passes messages on in its loop).
func (s *Session) broadcast(c ring.Ctrl) error {
	t := s.t
	if t.ring == nil || t.ring.Rank != 0 {
		return nil
	}
	c.Sess = s.id
	return t.do(func() error { return t.ring.SendCtrl(c) })
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
func (s *Session) exchange(g *graph.Graph, T, rows int, wantTaps, wantLogits bool, ids, lg, fwd arr, wire []arr, tapRows []ops.Act) (arr, arr, arr) {
	p := s.t.ring
	a := &s.t.m.Arch
	own := tapOrder(s.taps.Layers(), p.Stages)
	others := carriedSlots(own, p.Size)
	t0 := time.Now()
	send := func(x arr, dst int) {
		g.Eval(g.Send(x, dst, p.Group))
		p.Stats.SentBytes += graph.ArrBytes(x)
	}
	switch {
	case p.Rank == 0:
		g.Eval(fwd)
		p.Stats.SentBytes += graph.ArrBytes(fwd)
		t1 := time.Now()
		p.Stats.Send += t1.Sub(t0)
		defer func() { p.Stats.Wait += time.Since(t1) }()
		if err := s.t.ring.AwaitAcks(); err != nil {
			g.Fail(err)
			return 0, 0, 0
		}
		ids = g.Recv(mlxc.Int32, p.Size-1, p.Group, rows)
		g.Eval(ids)
		if wantLogits {
			lg = g.Recv(mlxc.Float32, p.Size-1, p.Group, rows, a.Vocab)
			g.Eval(lg)
		}
		var tapArr arr
		if wantTaps && s.taps.Len() > 0 {
			var got arr
			if len(others) > 0 {
				got = g.Recv(s.t.dt, p.Size-1, p.Group, T, a.Hidden*len(others))
				g.Eval(got)
			}
			parts := make([]arr, s.taps.Len())
			for _, slot := range own[0] {
				parts[slot] = tapRows[slot].A
			}
			for j, slot := range others {
				parts[slot] = g.Slice(got, []int{0, j * a.Hidden}, []int{T, (j + 1) * a.Hidden})
			}
			tapArr = parts[0]
			if len(parts) > 1 {
				tapArr = g.Concat(1, parts...)
			}
			g.Eval(tapArr)
		}
		return ids, lg, tapArr
	case p.Last():
		defer func() { p.Stats.Send += time.Since(t0) }()
		if err := s.t.ring.Ack(); err != nil {
			g.Fail(err)
			return 0, 0, 0
		}
		send(ids, 0)
		if wantLogits {
			send(lg, 0)
		}
		if wantTaps && len(wire) > 0 {
			msg := wire[0]
			if len(wire) > 1 {
				msg = g.Concat(1, wire...)
			}
			send(msg, 0)
		}
	default:
		defer func() { p.Stats.Send += time.Since(t0) }()
		if err := s.t.ring.Ack(); err != nil {
			g.Fail(err)
			return 0, 0, 0
		}
		g.Eval(fwd)
		p.Stats.SentBytes += graph.ArrBytes(fwd)
		if err := s.t.ring.Relay(); err != nil {
			g.Fail(err)
		}
	}
	return 0, 0, 0
}
