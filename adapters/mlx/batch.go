package mlx

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.BatchForwarder = (*Target)(nil)

// ForwardBatch runs several sessions' blocks as one lazy graph (ports.BatchForwarder): the row-wise ops take
// every item's rows stacked, so each weight is read once per round, and each session's attention and
// recurrence read and replace its own state arrays. A block longer than the chunk a solo Forward evaluates
// at once (a long prefill without a tape) runs as that session's own Forward, chunked exactly as alone.
//
// Exactness: MLX's matrix products may round differently for different row counts (as between a verify
// block and token-by-token decoding), so an item's logits, taps and state are not guaranteed bit-identical
// to its solo Forward's. Measured on MLX's CPU backend (Linux, OpenBLAS, porttest.BatchSuite): bit-identical
// on the 64-wide test fixtures (float and 4-bit, dense and hybrid) and on a 4-bit 512-wide hybrid, up to
// 5.4e-6 apart in the logits of a float 512-wide dense model; Metal is not measured. The suite runs here
// with a tolerance of 1e-4; a greedy token may then differ only where two logits are that close.
func (t *Target) ForwardBatch(ctx context.Context, items []ports.BatchItem) ([]ports.BatchResult, error) {
	if t.ring != nil && t.ring.Rank != 0 {
		return nil, fmt.Errorf("mlx forward batch: %w", errPipelined)
	}
	sessions, err := model.ClaimSessions("mlx forward batch", len(items), func(i int) any { return items[i].Session },
		func(v any) (*Session, bool) { s, ok := v.(*Session); return s, ok && s != nil && s.t == t })
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mlx forward batch: %w", err)
	}
	results := make([]ports.BatchResult, len(items))
	var jobs []batchJob
	var long []int
	a := &t.m.Arch
	for i, it := range items {
		s := sessions[i]
		if err := s.usable(); err != nil {
			results[i].Err = err
			continue
		}
		rows, err := s.pos.CheckForward(it.Tokens, it.Opts, a.Vocab, a.ContextLength)
		if err != nil {
			results[i].Err = fmt.Errorf("mlx forward: %w", err)
			continue
		}
		if !it.Opts.RecordTape && len(it.Tokens) > maxChunk {
			long = append(long, i)
			continue
		}
		jobs = append(jobs, batchJob{i: i, s: s, rows: rows, item: &items[i]})
	}
	if len(jobs) > 0 {
		run := t.runBatch
		if t.ring != nil {
			run = t.runPipeBatch // stagebatch.go: the round passes the ring once, in micro-batches
		}
		if err := run(ctx, jobs); err != nil {
			return nil, err
		}
		for _, jb := range jobs {
			res, logits, err := jb.s.finish(len(jb.item.Tokens), jb.rows, jb.item.Opts, jb.greedy, jb.logits, jb.taps, jb.tape)
			if err == nil && jb.item.Opts.Logits {
				res.Logits = logits
			}
			results[jb.i] = ports.BatchResult{Result: res, Err: err}
		}
	}
	for _, i := range long {
		res, err := sessions[i].Forward(ctx, items[i].Tokens, items[i].Opts)
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		results[i] = ports.BatchResult{Result: res, Err: err}
	}
	return results, nil
}

// batchJob is one admitted item of a batched forward and, after the graph ran, its outputs.
type batchJob struct {
	i, rows int
	s       *Session
	item    *ports.BatchItem
	greedy  []int32
	logits  []float32
	taps    arr
	tape    *ops.Tape
}

// runBatch evaluates the jobs' blocks as one graph and advances their sessions, as run does for one chunk.
// On an error every session keeps its previous state handles.
func (t *Target) runBatch(ctx context.Context, jobs []batchJob) error {
	m := t.m
	V := m.Arch.Vocab
	for _, jb := range jobs {
		jb.s.gen++
		jb.s.replay = false
	}
	return t.rt.Do(func() error {
		if t.closed {
			return errTargetClosed
		}
		for _, jb := range jobs {
			jb.s.dropLast()
		}
		g := graph.New(t.rt, "mlx forward batch")
		defer g.Release()
		be := ops.Backend{G: g, DT: t.dt}
		n := len(jobs)
		olds := make([][]arr, n)
		passes := make([]*ops.Pass, n)
		seqs := make([]model.Seq[ops.Act, *ops.Weight], n)
		blocks := make([][]ports.Token, n)
		sizes, rows := make([]int, n), make([]int, n)
		tapRows := make([][]ops.Act, n)
		taps := make([]func(int, ops.Act), n)
		wantLogits, wantTaps := false, false
		for j, jb := range jobs {
			s, it := jb.s, jb.item
			olds[j] = s.st.handles()
			passes[j] = &ops.Pass{O: be, KV: s.st.kv, GDN: s.st.gdn}
			if it.Opts.RecordTape && s.pos.Recurrent {
				passes[j].Tape = &ops.Tape{TapeHeader: model.TapeHeader{Session: s, Forward: s.gen, Length: len(it.Tokens), Start: s.pos.N}, Sess: s, Layers: make([]*ops.GDNTape, m.Arch.Layers)}
			}
			seqs[j] = model.Seq[ops.Act, *ops.Weight]{State: passes[j], Pos: s.pos.N}
			blocks[j], sizes[j], rows[j] = it.Tokens, len(it.Tokens), jb.rows
			if it.Opts.Taps && s.taps.Len() > 0 {
				tapRows[j], taps[j] = model.Collect[ops.Act](s.taps)
				wantTaps = true
			}
			wantLogits = wantLogits || it.Opts.Logits || it.Opts.Sampling != nil
		}
		restore := func() {
			for j, jb := range jobs {
				jb.s.st.restoreHandles(olds[j])
			}
		}
		var tap func(int, ops.Act)
		if wantTaps {
			tap = func(layer int, x ops.Act) {
				off := 0
				for j := range jobs {
					if taps[j] != nil {
						taps[j](layer, be.Rows(x, off, off+sizes[j]))
					}
					off += sizes[j]
				}
			}
		}
		x, err := model.ForwardBatch(ctx, m, be, seqs, blocks, tap)
		if err != nil {
			restore()
			return fmt.Errorf("mlx forward batch: %w", err)
		}
		lg := be.F32(model.LogitsBatch(m, be, x, sizes, rows).A)
		ids := g.Astype(g.Argmax(lg, -1), mlxc.Int32)
		outs := []arr{ids, lg}
		tapArrs := make([]arr, n)
		for j, jb := range jobs {
			outs = append(outs, jb.s.st.handles()...)
			if taps[j] != nil {
				tapArrs[j] = be.Concat(tapRows[j]...).A
				outs = append(outs, tapArrs[j])
			}
			if tp := passes[j].Tape; tp != nil {
				for _, l := range tp.Layers {
					if l != nil {
						outs = append(outs, l.Alpha, l.Delta, l.Keys, l.Rows)
					}
				}
			}
		}
		g.Eval(outs...)
		greedy := g.ReadI32(ids)
		var logits []float32
		if wantLogits {
			logits = g.ReadF32(lg)
		}
		if g.Err != nil {
			restore()
			return g.Err
		}
		g.KeepAll(outs[2:])
		off := 0
		for j := range jobs {
			jb := &jobs[j]
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
			jb.greedy = greedy[off : off+jb.rows : off+jb.rows]
			if logits != nil {
				jb.logits = logits[off*V : (off+jb.rows)*V : (off+jb.rows)*V]
			}
			off += jb.rows
			jb.taps, jb.tape = tapArrs[j], passes[j].Tape
			jb.s.pos.N += sizes[j]
			jb.s.pos.Rec = jb.s.pos.N
		}
		return nil
	})
}
