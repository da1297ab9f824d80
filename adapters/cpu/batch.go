package cpu

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.BatchForwarder = (*Target)(nil)

// ForwardBatch runs several sessions' blocks in one pass (ports.BatchForwarder): the embedding, norms,
// projections, MLPs, experts and LM head run once over every item's rows, so each weight streams once per
// round, and each session's attention, recurrence and tape run on its own state. The kernels give a row's
// result independent of the rows beside it (package kernel's contract, the fast mode's per-row input
// quantization included), so every item's result and state are bit-identical to its solo Forward whatever
// the batch holds.
func (t *Target) ForwardBatch(ctx context.Context, items []ports.BatchItem) ([]ports.BatchResult, error) {
	sessions, err := t.batchSessions(items)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cpu forward batch: %w", err)
	}
	results := make([]ports.BatchResult, len(items))
	// Refusals first, before any work: those items keep their sessions untouched.
	type job struct {
		i, rows int
		s       *Session
		st      *pass
		tapped  []act
		tap     func(int, act)
	}
	var jobs []job
	for i, it := range items {
		s := sessions[i]
		rows, err := s.admit(it.Tokens, it.Opts)
		if err != nil {
			results[i].Err = err
			continue
		}
		jobs = append(jobs, job{i: i, rows: rows, s: s})
	}
	if len(jobs) == 0 {
		return results, nil
	}
	seqs := make([]model.Seq[act, *weight], len(jobs))
	blocks := make([][]ports.Token, len(jobs))
	sizes, rows := make([]int, len(jobs)), make([]int, len(jobs))
	taps, total := false, 0
	for j := range jobs {
		jb := &jobs[j]
		it := &items[jb.i]
		jb.s.mem.reset()
		jb.st = jb.s.begin(len(it.Tokens), it.Opts)
		jb.tapped, jb.tap = jb.s.tapper(it.Opts)
		taps = taps || jb.tap != nil
		seqs[j] = model.Seq[act, *weight]{State: jb.st, Pos: jb.s.pos.N}
		blocks[j], sizes[j], rows[j] = it.Tokens, len(it.Tokens), jb.rows
		total += len(it.Tokens)
	}
	// The rows every item shares live in an arena of the target's (each session's own steps use its own).
	mem := t.batchArena()
	defer t.batch.put(mem)
	// Each layer's buffers in the shared arena go back at its end: the sequences' own state (caches, tapes)
	// lives in their sessions' arenas and copies what it keeps.
	be := ops{pool: t.pool, mem: mem, layers: scoped(total)}
	if be.layers && taps {
		// A layer's output goes back once the next layer has read it unless some sequence's tap keeps it.
		be.tapped = make([]bool, t.m.Arch.Layers)
		for _, jb := range jobs {
			if jb.tap != nil {
				for l, on := range jb.s.tapped {
					be.tapped[l] = be.tapped[l] || on
				}
			}
		}
	}
	var tap func(int, act)
	if taps {
		tap = func(layer int, x act) {
			off := 0
			for _, jb := range jobs {
				if jb.tap != nil {
					jb.tap(layer, be.Rows(x, off, off+len(items[jb.i].Tokens)))
				}
				off += len(items[jb.i].Tokens)
			}
		}
	}
	x, err := model.ForwardBatch(ctx, t.m, be, seqs, blocks, tap)
	if err != nil {
		for _, jb := range jobs {
			if jb.st.touched {
				jb.s.broken = err
			}
		}
		return nil, fmt.Errorf("cpu forward batch: %w", err)
	}
	// Logits and taps are the callers': allocated outside the arenas.
	logits := model.LogitsBatch(t.m, ops{pool: t.pool}, x, sizes, rows).v
	V := t.m.Arch.Vocab
	off := 0
	for _, jb := range jobs {
		it := &items[jb.i]
		lg := logits[off*V : (off+jb.rows)*V : (off+jb.rows)*V]
		off += jb.rows
		res, _, err := jb.s.finish(jb.st, len(it.Tokens), jb.rows, it.Opts, lg, jb.tapped)
		if err == nil && it.Opts.Logits {
			res.Logits = lg
		}
		results[jb.i] = ports.BatchResult{Result: res, Err: err}
	}
	return results, nil
}

// batchSessions checks that every item's session is a distinct session of this target.
func (t *Target) batchSessions(items []ports.BatchItem) ([]*Session, error) {
	return model.ClaimSessions("cpu forward batch", len(items), func(i int) any { return items[i].Session },
		func(v any) (*Session, bool) { s, ok := v.(*Session); return s, ok && s != nil && s.t == t })
}

// batchArena returns a reset arena for a batched pass's shared rows (put back with t.batch.put).
func (t *Target) batchArena() *arena {
	a := t.batch.get()
	a.reset()
	return a
}
