package cpu

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.BatchDrafter = (*Drafter)(nil)

// DraftBatch drafts for several sessions in one pass (ports.BatchDrafter): their context rows are projected
// together (in chunks of at most contextChunk rows, as a solo call does) and their noise blocks run as one
// pass whose row-wise products stream the drafter's weights and the LM head once, each block attending to
// its own session's cache. Rows are computed independently of one another by the kernels, so every item's
// proposal and session state are bit-identical to its solo Draft (DraftSampled at Temperature > 0).
func (d *Drafter) DraftBatch(ctx context.Context, items []ports.DraftItem) ([]ports.DraftResult, error) {
	sessions, err := model.ClaimSessions("cpu draft batch", len(items), func(i int) any { return items[i].Session },
		func(v any) (*DraftSession, bool) { s, ok := v.(*DraftSession); return s, ok && s != nil && s.d == d })
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cpu draft batch: %w", err)
	}
	a := &d.m.Arch
	width := len(a.TapLayers) * a.HiddenSize
	results := make([]ports.DraftResult, len(items))
	type job struct {
		i    int
		s    *DraftSession
		rows []float32 // context rows to project: the queued ones, then the new ones
		n    int
	}
	var jobs []job
	for i, it := range items {
		s := sessions[i]
		data, rows, err := s.admit(it.Anchor, it.NewCtx, it.BlockSize, it.Temperature, it.Rand)
		if err != nil {
			results[i].Err = err
			continue
		}
		if it.BlockSize == 1 {
			s.queued = append(s.queued, data...)
			s.nq += rows
			results[i].Proposal = ports.Proposal{Tokens: []ports.Token{}}
			continue
		}
		jb := job{i: i, s: s, rows: data, n: s.nq + rows}
		if s.nq > 0 {
			jb.rows = append(s.queued, data...)
		}
		jobs = append(jobs, jb)
	}
	if len(jobs) == 0 {
		return results, nil
	}
	mem := d.t.batchArena()
	defer d.t.batch.put(mem)
	be := ops{pool: d.t.pool, mem: mem}
	for _, jb := range jobs {
		jb.s.mem.reset()
	}
	// Context rows, every session's in order, in chunks of at most contextChunk rows.
	var seqs []model.Seq[act, *weight]
	chunk := make([]float32, 0, contextChunk*width) // reused: a chunk's rows are only read while it runs
	flush := func() {
		if len(seqs) > 0 {
			model.ContextBatch(d.m, be, seqs, act{chunk, len(chunk) / width})
			seqs, chunk = seqs[:0], chunk[:0]
		}
	}
	for _, jb := range jobs {
		for lo := 0; lo < jb.n; {
			take := min(jb.n-lo, contextChunk-len(chunk)/width)
			chunk = append(chunk, jb.rows[lo*width:(lo+take)*width]...)
			seqs = append(seqs, model.Seq[act, *weight]{State: &pass{pool: d.t.pool, mem: &jb.s.mem, kv: jb.s.kv}, Pos: jb.s.n, Rows: take})
			jb.s.n += take
			lo += take
			if len(chunk)/width == contextChunk {
				flush()
			}
		}
		jb.s.queued, jb.s.nq = jb.s.queued[:0], 0
	}
	flush()
	blocks := make([]model.DraftSeq[act, *weight], len(jobs))
	for j, jb := range jobs {
		it := &items[jb.i]
		blocks[j] = model.DraftSeq[act, *weight]{State: &pass{pool: d.t.pool, mem: &jb.s.mem, kv: jb.s.kv}, Pos: jb.s.n,
			Block: model.NoiseBlock(it.Anchor, a.MaskToken, it.BlockSize), Rows: it.BlockSize - 1}
		if it.Temperature > 0 {
			blocks[j].Temperature, blocks[j].Rand = it.Temperature, it.Rand
		}
	}
	logits, toks, dists := model.ProposeBatch(d.m, be, blocks)
	for j, jb := range jobs {
		jb.s.logits = append(jb.s.logits[:0], logits[j].v...)
		results[jb.i].Proposal = ports.Proposal{Tokens: toks[j], Dists: dists[j]}
	}
	return results, nil
}
