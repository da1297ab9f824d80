package mlx

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.BatchDrafter = (*Drafter)(nil)

// DraftBatch drafts for several sessions as one lazy graph (ports.BatchDrafter): every item's context rows
// projected together, every noise block in one pass attending to its own session's cache, the host reads
// (candidates, the selector's projections) once for all items, and DFlash2's walk per item. Exactness is
// ForwardBatch's: equal to the solo calls up to MLX's rounding for other row counts.
// It is one function because every item's part joins one lazy graph that is evaluated once.
func (d *Drafter) DraftBatch(ctx context.Context, items []ports.DraftItem) ([]ports.DraftResult, error) {
	sessions, err := model.ClaimSessions("mlx draft batch", len(items), func(i int) any { return items[i].Session },
		func(v any) (*DraftSession, bool) { s, ok := v.(*DraftSession); return s, ok && s != nil && s.d == d })
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mlx draft batch: %w", err)
	}
	results := make([]ports.DraftResult, len(items))
	type job struct {
		i    int
		s    *DraftSession
		in   draftInput
		toks []ports.Token
		dist []ports.Distribution
	}
	var jobs []job
	for i, it := range items {
		in, err := sessions[i].admit(it.Anchor, it.NewCtx, it.BlockSize, it.Temperature, it.Rand)
		if err != nil {
			results[i].Err = err
			continue
		}
		jobs = append(jobs, job{i: i, s: sessions[i], in: in})
	}
	if len(jobs) == 0 {
		return results, nil
	}
	a := &d.m.Arch
	width := len(a.TapLayers) * a.HiddenSize
	err = d.t.rt.Do(func() error {
		if d.closed || d.t.closed {
			return errors.New("mlx drafter: drafter or target is closed")
		}
		g := graph.New(d.t.rt, "mlx draft batch")
		defer g.Release()
		be := ops.Backend{G: g, DT: d.t.dt}
		// Each pass works on copies of its session's cache handles, adopted after evaluation.
		works := make([][]*ops.KVCache, len(jobs))
		passes := make([]*ops.Pass, len(jobs))
		var ctxSeqs []model.Seq[ops.Act, *ops.Weight]
		var rows []ops.Act
		for j, jb := range jobs {
			works[j] = make([]*ops.KVCache, len(jb.s.kv))
			for l, c := range jb.s.kv {
				works[j][l] = &ops.KVCache{K: c.K, V: c.V}
			}
			passes[j] = &ops.Pass{O: be, KV: works[j]}
			if jb.in.rows > 0 {
				ctxSeqs = append(ctxSeqs, model.Seq[ops.Act, *ops.Weight]{State: passes[j], Pos: jb.s.n, Rows: jb.in.rows})
				rows = append(rows, jb.in.contextRows(g, be, width))
			}
		}
		if len(rows) > 0 {
			f := rows[0]
			if len(rows) > 1 {
				f = be.Join(rows...)
			}
			model.ContextBatch(d.m, be, ctxSeqs, f)
		}
		var blocks []model.DraftSeq[ops.Act, *ops.Weight]
		var drafting []int
		for j, jb := range jobs {
			it := &items[jb.i]
			if it.BlockSize == 1 {
				continue
			}
			b := model.DraftSeq[ops.Act, *ops.Weight]{State: passes[j], Pos: jb.s.n + jb.in.rows, Rows: it.BlockSize - 1,
				Block: model.NoiseBlock(it.Anchor, a.MaskToken, it.BlockSize)}
			if it.Temperature > 0 {
				b.Temperature, b.Rand = it.Temperature, it.Rand
			}
			blocks, drafting = append(blocks, b), append(drafting, j)
		}
		if len(blocks) > 0 {
			_, toks, dists := model.ProposeBatch(d.m, be, blocks)
			for k, j := range drafting {
				jobs[j].toks, jobs[j].dist = toks[k], dists[k]
			}
		}
		var outs []arr
		for _, w := range works {
			for _, c := range w {
				outs = append(outs, c.K, c.V)
			}
		}
		g.Eval(outs...)
		if g.Err != nil {
			return g.Err
		}
		for j, jb := range jobs {
			if jb.in.rows == 0 {
				continue
			}
			for l, c := range jb.s.kv {
				if c.K != 0 {
					mlxc.ArrayFree(c.K)
					mlxc.ArrayFree(c.V)
				}
				c.K, c.V = g.Keep(works[j][l].K), g.Keep(works[j][l].V)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, jb := range jobs {
		jb.s.n += jb.in.rows
		bs := items[jb.i].BlockSize
		if bs == 1 {
			results[jb.i].Proposal = ports.Proposal{Tokens: []ports.Token{}}
			continue
		}
		if len(jb.toks) != bs-1 {
			results[jb.i].Err = fmt.Errorf("mlx drafter: drafted %d tokens for a block of %d", len(jb.toks), bs)
			continue
		}
		results[jb.i].Proposal = ports.Proposal{Tokens: append([]ports.Token(nil), jb.toks...), Dists: jb.dist}
	}
	return results, nil
}
