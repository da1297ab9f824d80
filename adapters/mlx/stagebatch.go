package mlx

import (
	"context"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// Batched rounds across a pipeline. Rank 0 sends one control message (ring.OpBatch: every sequence's session,
// block length, returned rows and flags, and how the round is cut into micro-batches of whole sequences),
// then runs the micro-batches through its stage one after another, sending each one's residual stream on
// as soon as it is computed, so rank k+1 runs micro-batch i while rank k runs i+1. Every worker does the
// same with what it receives. The last rank keeps each micro-batch's greedy ids, logits and taps and
// returns them to rank 0 after the last one: every transfer of a round then flows one way round the ring
// (0 → 1 → … → n−1 → 0). The exception is the per-round acknowledgement (4 bytes, relayed backwards after the
// first micro-batch, so that a timeout names the lost rank): with 3 or more ranks it can be sent while its
// receiver is itself sending the next micro-batch forward, which completes only because the ring backend's
// TCP sockets buffer a message that small. A transport without such buffering would need the
// acknowledgements moved to the end of the round.
//
// A micro-batch's message is one flat array: the stream's rows, then for each sequence that wants taps
// the tap slots of the ranks before (in carriedSlots order) and this rank's own, [T, H·slots] each.

// stageJob is one sequence of a batched round on this rank.
type stageJob struct {
	s       *Session
	tokens  []ports.Token // rank 0 only
	T, rows int
	flags   int32
	// rank 0's outputs
	greedy []int32
	logits []float32
	taps   arr
	tape   *ops.Tape
}

func (j *stageJob) wantTaps() bool { return j.flags&ring.FlagTaps != 0 && j.s.taps.Len() > 0 }

// optFlags is a forward's options as control flags.
func optFlags(o ports.ForwardOptions) int32 {
	var f int32
	if o.Taps {
		f |= ring.FlagTaps
	}
	if o.RecordTape {
		f |= ring.FlagTape
	}
	if o.Logits || o.Sampling != nil {
		f |= ring.FlagLogits
	}
	return f
}

// microBatches cuts sequences of sizes rows into at most m contiguous micro-batches of about rowsEach
// rows (at least one sequence each) and returns how many sequences each holds.
func microBatches(sizes []int, m, rowsEach int) []int32 {
	total := 0
	for _, n := range sizes {
		total += n
	}
	m = min(m, len(sizes), max(1, (total+rowsEach-1)/max(rowsEach, 1)))
	m = max(m, 1)
	var parts []int32
	cnt, acc := 0, 0
	for i, n := range sizes {
		cnt++
		acc += n
		k, left := len(parts)+1, len(sizes)-i-1 // k: the part being filled
		if k < m && left >= m-k && (acc*m >= total*k || left == m-k) {
			parts = append(parts, int32(cnt))
			cnt = 0
		}
	}
	return append(parts, int32(cnt))
}

// runPipeBatch is runBatch on a pipeline's rank 0: the jobs' blocks pass the ring once, in micro-batches.
func (t *Target) runPipeBatch(ctx context.Context, jobs []batchJob) error {
	p := t.ring
	sj := make([]*stageJob, len(jobs))
	sizes := make([]int, len(jobs))
	c := ring.Ctrl{Op: ring.OpBatch, A: int32(len(jobs))}
	for i, jb := range jobs {
		sj[i] = &stageJob{s: jb.s, tokens: jb.item.Tokens, T: len(jb.item.Tokens), rows: jb.rows, flags: optFlags(jb.item.Opts)}
		sizes[i] = sj[i].T
		c.Payload = append(c.Payload, jb.s.id, int32(sj[i].T), int32(jb.rows), sj[i].flags)
		jb.s.gen++
		jb.s.replay = false
	}
	parts := microBatches(sizes, p.Size, p.MicroRows)
	c.B = int32(len(parts))
	c.Payload = append(c.Payload, parts...)
	err := t.do(func() error {
		if t.closed {
			return errTargetClosed
		}
		for _, j := range sj {
			j.s.dropLast()
		}
		if err := t.ring.SendCtrl(c); err != nil {
			return err
		}
		// The workers run the round now: cancelling it on rank 0 alone would leave them waiting.
		if err := t.stageRound(context.WithoutCancel(ctx), sj, parts); err != nil {
			// Part of the round ran on some ranks and the next control message would be read as its data:
			// the pipeline cannot go on, so it is marked lost (503, /health degraded) rather than left out of
			// step. A timeout has already done this; Fail keeps the first error.
			err = fmt.Errorf("%w: rank 0: batched round failed after the workers began it: %v", ring.ErrRankLost, err)
			t.rt.Fail(err)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, j := range sj {
		jobs[i].greedy, jobs[i].logits, jobs[i].taps, jobs[i].tape = j.greedy, j.logits, j.taps, j.tape
	}
	return nil
}

// serveBatch is a worker's part of an ring.OpBatch round.
func (t *Target) serveBatch(ctx context.Context, c ring.Ctrl, sessions map[int32]*Session) error {
	n := int(c.A)
	if len(c.Payload) != 4*n+int(c.B) {
		return fmt.Errorf("batch message of %d values for %d sequences in %d micro-batches", len(c.Payload), n, c.B)
	}
	sj := make([]*stageJob, n)
	for i := range sj {
		v := c.Payload[4*i : 4*i+4]
		s := sessions[v[0]]
		if s == nil {
			return fmt.Errorf("batch on unknown session %d", v[0])
		}
		sj[i] = &stageJob{s: s, T: int(v[1]), rows: int(v[2]), flags: v[3]}
		s.gen++
		s.replay = false
	}
	parts := c.Payload[4*n:]
	return t.do(func() error {
		for _, j := range sj {
			j.s.dropLast()
		}
		if err := t.stageRound(ctx, sj, parts); err != nil {
			return err
		}
		for _, j := range sj {
			j.s.lastTap = j.tape // replayed by a later ring.OpReplay on its session
		}
		return nil
	})
}

// mbOut is what the last rank keeps of a micro-batch until the round's answer, and rank 0 of its own taps.
type mbOut struct {
	ids, lg arr
	taps    []arr // per job of the micro-batch (0: none)
}

// stageRound runs a batched round's micro-batches through this rank's stage and finishes the round (rank 0
// receives the answers, the last rank sends them, the others relay the acknowledgements). On the MLX
// thread; every job's session advances by its block.
func (t *Target) stageRound(ctx context.Context, jobs []*stageJob, parts []int32) error {
	p := t.ring
	roundLogits := false
	for _, j := range jobs {
		roundLogits = roundLogits || j.flags&ring.FlagLogits != 0
	}
	var kept []arr // arrays held across the micro-batches' graphs, freed at the end
	defer func() {
		for _, a := range kept {
			if a != 0 {
				mlxc.ArrayFree(a)
			}
		}
	}()
	outs := make([]mbOut, len(parts))
	lo := 0
	for k, cnt := range parts {
		mb := jobs[lo : lo+int(cnt)]
		lo += int(cnt)
		o, err := t.stageMicro(ctx, mb, k == 0, roundLogits)
		outs[k] = o
		kept = append(append(kept, o.ids, o.lg), o.taps...)
		if err != nil {
			return err
		}
	}
	p.Stats.Batches++
	p.Stats.MicroBatches += len(parts)
	switch {
	case p.Rank == 0:
		t0 := time.Now()
		defer func() { p.Stats.BatchWait += time.Since(t0) }()
		return t.receiveRound(jobs, parts, outs)
	case p.Last():
		t0 := time.Now()
		defer func() { p.Stats.BatchSend += time.Since(t0) }()
		g := graph.New(t.rt, "mlx pipeline batch answer")
		defer g.Release()
		var ids, lg, taps []arr
		for _, o := range outs {
			ids = append(ids, o.ids)
			if o.lg != 0 {
				lg = append(lg, o.lg)
			}
			for _, a := range o.taps {
				if a != 0 {
					taps = append(taps, a)
				}
			}
		}
		for _, part := range [][]arr{ids, lg, taps} {
			if len(part) == 0 {
				continue
			}
			msg := part[0]
			if len(part) > 1 {
				msg = g.Concat(0, part...)
			}
			g.Eval(g.Send(msg, 0, p.Group))
			p.Stats.SentBytes += graph.ArrBytes(msg)
		}
		return g.Err
	default:
		t0 := time.Now()
		defer func() { p.Stats.BatchSend += time.Since(t0) }()
		return t.ring.Relay()
	}
}

// stageMicro runs one micro-batch through this rank's stage: it receives the micro-batch's stream (and the
// taps carried so far) from the rank before (rank 0 embeds its tokens), runs the stage's layers on every
// sequence's rows and state, adopts the new state, and passes the stream on (the last rank computes the
// greedy ids, and the logits when the round wants them, and keeps them). The first micro-batch's compute
// is acknowledged before its stream goes on (ack): a send to a rank that died never completes (MLX's ring
// neither fails nor times out), so a later acknowledgement would name this rank for its successor's loss.
// It is one function because the receive, compute, acknowledge and send steps must keep their order on the
// ring; each is a short block.
func (t *Target) stageMicro(ctx context.Context, mb []*stageJob, firstMB, roundLogits bool) (mbOut, error) {
	p := t.ring
	m := t.m
	H := m.Arch.Hidden
	g := graph.New(t.rt, "mlx pipeline batch")
	defer g.Release()
	be := ops.Backend{G: g, DT: t.dt}
	n := len(mb)
	sizes, rows := make([]int, n), make([]int, n)
	own := make([][][]int, n)
	carriedIn := make([]int, n) // tap slots arriving with each sequence's rows
	R := 0
	for j, jb := range mb {
		sizes[j], rows[j] = jb.T, jb.rows
		R += jb.T
		own[j] = tapOrder(jb.s.taps.Layers(), p.Stages)
		if jb.wantTaps() {
			carriedIn[j] = len(carriedSlots(own[j], p.Rank))
		}
	}
	var x ops.Act
	carried := make([]ops.Act, n)
	if p.Rank == 0 {
		var toks []ports.Token
		for _, jb := range mb {
			toks = append(toks, jb.tokens...)
		}
		x = be.Embed(m.Embed, toks)
	} else {
		w := R * H
		for j, jb := range mb {
			w += jb.T * H * carriedIn[j]
		}
		p.Waiting.Store(int32(p.Rank - 1))
		in := g.Recv(t.dt, p.Rank-1, p.Group, w)
		tw := time.Now()
		g.Eval(in)
		p.Stats.BatchWait += time.Since(tw)
		x = ops.Act{A: g.Reshape(g.Slice(in, []int{0}, []int{R * H}), R, H), R: R, C: H}
		off := R * H
		for j, jb := range mb {
			if c := carriedIn[j]; c > 0 {
				sz := jb.T * H * c
				carried[j] = ops.Act{A: g.Reshape(g.Slice(in, []int{off}, []int{off + sz}), jb.T, H*c), R: jb.T, C: H * c}
				off += sz
			}
		}
	}
	olds := make([][]arr, n)
	passes := make([]*ops.Pass, n)
	seqs := make([]model.Seq[ops.Act, *ops.Weight], n)
	tapRows := make([][]ops.Act, n)
	taps := make([]func(int, ops.Act), n)
	for j, jb := range mb {
		s := jb.s
		olds[j] = s.st.handles()
		passes[j] = &ops.Pass{O: be, KV: s.st.kv, GDN: s.st.gdn}
		if jb.flags&ring.FlagTape != 0 && s.pos.Recurrent {
			passes[j].Tape = &ops.Tape{TapeHeader: model.TapeHeader{Session: s, Forward: s.gen, Length: jb.T, Start: s.pos.N}, Sess: s, Layers: make([]*ops.GDNTape, m.Arch.Layers)}
		}
		seqs[j] = model.Seq[ops.Act, *ops.Weight]{State: passes[j], Pos: s.pos.N, Rows: jb.T}
		if jb.wantTaps() {
			tapRows[j], taps[j] = model.Collect[ops.Act](s.taps)
		}
	}
	restore := func() {
		for j, jb := range mb {
			jb.s.st.restoreHandles(olds[j])
		}
	}
	tap := func(layer int, x ops.Act) {
		off := 0
		for j := range mb {
			if taps[j] != nil {
				taps[j](layer, be.Rows(x, off, off+sizes[j]))
			}
			off += sizes[j]
		}
	}
	x, err := model.ForwardBatchStage(ctx, m, be, seqs, x, t.Stage(), tap)
	if err != nil {
		restore()
		return mbOut{}, fmt.Errorf("mlx forward batch: %w", err)
	}
	// tapOut is what leaves this rank of sequence j's taps: those carried in and this rank's own slots (on
	// rank 0 its own only, which stay here), [T, H·slots].
	tapOut := func(j int) arr {
		if !mb[j].wantTaps() {
			return 0
		}
		var parts []arr
		if carried[j].A != 0 {
			parts = append(parts, carried[j].A)
		}
		for _, slot := range own[j][p.Rank] {
			parts = append(parts, tapRows[j][slot].A)
		}
		switch len(parts) {
		case 0:
			return 0
		case 1:
			return parts[0]
		}
		return g.Concat(1, parts...)
	}
	flat := func(a arr) arr {
		if a == 0 || g.Err != nil {
			return 0
		}
		return g.Reshape(a, int(mlxc.ArraySize(a)))
	}
	res := mbOut{taps: make([]arr, n)}
	var fwd arr
	switch {
	case p.Rank == 0:
		for j := range mb {
			res.taps[j] = tapOut(j)
		}
		fwd = g.Send(flat(x.A), 1, p.Group)
	case !p.Last():
		msg := []arr{flat(x.A)}
		for j := range mb {
			if a := tapOut(j); a != 0 {
				msg = append(msg, flat(a))
			}
		}
		w := msg[0]
		if len(msg) > 1 {
			w = g.Concat(0, msg...)
		}
		fwd = g.Send(w, p.Rank+1, p.Group)
	default:
		lg := be.F32(model.LogitsBatch(m, be, x, sizes, rows).A)
		res.ids = g.Astype(g.Argmax(lg, -1), mlxc.Int32)
		if roundLogits {
			res.lg = lg
		}
		for j := range mb {
			if a := tapOut(j); a != 0 {
				res.taps[j] = flat(a)
			}
		}
	}
	var state []arr
	for j, jb := range mb {
		state = append(state, jb.s.st.handles()...)
		if tp := passes[j].Tape; tp != nil {
			for _, l := range tp.Layers {
				if l != nil {
					state = append(state, l.Alpha, l.Delta, l.Keys, l.Rows)
				}
			}
		}
	}
	results := append(append([]arr{res.ids, res.lg}, res.taps...), state...)
	tc := time.Now()
	g.Eval(results...)
	p.Stats.BatchCompute += time.Since(tc)
	if g.Err != nil {
		restore()
		return mbOut{}, g.Err
	}
	g.KeepAll(results)
	for j, jb := range mb {
		keepOld := map[arr]bool{}
		if tp := passes[j].Tape; tp != nil {
			for _, l := range tp.Layers {
				if l != nil {
					keepOld[l.S0], keepOld[l.CS0] = true, true
				}
			}
		}
		for _, h := range olds[j] {
			if h != 0 && !keepOld[h] {
				mlxc.ArrayFree(h)
			}
		}
		jb.tape = passes[j].Tape
		jb.s.pos.N += jb.T
		jb.s.pos.Rec = jb.s.pos.N
	}
	if firstMB {
		if err := t.ring.Ack(); err != nil {
			return res, err
		}
	}
	if fwd != 0 {
		ts := time.Now()
		g.Eval(fwd)
		p.Stats.SentBytes += graph.ArrBytes(fwd)
		p.Stats.BatchSend += time.Since(ts)
	}
	return res, g.Err
}

// receiveRound is rank 0's end of a batched round: the workers' acknowledgements, then the last rank's
// greedy ids, logits and taps of every sequence (in job order), shared out to the jobs; each job's taps
// join rank 0's own slots and the others' in slot order.
func (t *Target) receiveRound(jobs []*stageJob, parts []int32, outs []mbOut) error {
	p := t.ring
	a := &t.m.Arch
	H := a.Hidden
	if err := t.ring.AwaitAcks(); err != nil {
		return err
	}
	g := graph.New(t.rt, "mlx pipeline batch answer")
	defer g.Release()
	total, tapW, wantLogits := 0, 0, false
	for _, j := range jobs {
		total += j.rows
		wantLogits = wantLogits || j.flags&ring.FlagLogits != 0
		if j.wantTaps() {
			tapW += j.T * H * len(carriedSlots(tapOrder(j.s.taps.Layers(), p.Stages), p.Size))
		}
	}
	ids := g.Recv(mlxc.Int32, p.Size-1, p.Group, total)
	g.Eval(ids)
	greedy := g.ReadI32(ids)
	var logits []float32
	if wantLogits {
		lg := g.Recv(mlxc.Float32, p.Size-1, p.Group, total, a.Vocab)
		g.Eval(lg)
		logits = g.ReadF32(lg)
	}
	var got arr
	if tapW > 0 {
		got = g.Recv(t.dt, p.Size-1, p.Group, tapW)
		g.Eval(got)
	}
	if g.Err != nil {
		return g.Err
	}
	var tapArrs []arr
	off, toff, i := 0, 0, 0
	for k, cnt := range parts {
		for jj := range int(cnt) {
			j := jobs[i]
			i++
			j.greedy = greedy[off : off+j.rows : off+j.rows]
			if logits != nil {
				j.logits = logits[off*a.Vocab : (off+j.rows)*a.Vocab : (off+j.rows)*a.Vocab]
			}
			off += j.rows
			if !j.wantTaps() {
				continue
			}
			own := tapOrder(j.s.taps.Layers(), p.Stages)
			others := carriedSlots(own, p.Size)
			slots := make([]arr, j.s.taps.Len())
			for c, slot := range own[0] {
				slots[slot] = g.Slice(outs[k].taps[jj], []int{0, c * H}, []int{j.T, (c + 1) * H})
			}
			if len(others) > 0 {
				w := H * len(others)
				mine := g.Reshape(g.Slice(got, []int{toff}, []int{toff + j.T*w}), j.T, w)
				toff += j.T * w
				for c, slot := range others {
					slots[slot] = g.Slice(mine, []int{0, c * H}, []int{j.T, (c + 1) * H})
				}
			}
			j.taps = slots[0]
			if len(slots) > 1 {
				j.taps = g.Concat(1, slots...)
			}
			tapArrs = append(tapArrs, j.taps)
		}
	}
	g.Eval(tapArrs...)
	if g.Err != nil {
		for _, j := range jobs {
			j.taps = 0
		}
		return g.Err
	}
	g.KeepAll(tapArrs)
	return nil
}
