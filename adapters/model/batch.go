package model

import (
	"context"

	"github.com/higgs-go/higgs/ports"
)

// Seq is one sequence of a batched pass: its own state, the position of its first row, and how many
// consecutive rows of the pass's activations are its own (at least one). Sequences follow one another in
// order: sequence i's rows come after those of sequences 0..i−1.
type Seq[X any, W comparable] struct {
	State State[X, W]
	Pos   int
	Rows  int
}

// Batch is the State of several sequences in one pass (continuous batching). Everything row-wise (the
// embedding, norms, projections, gates, MLPs and experts, the LM head) runs once over every sequence's rows,
// so each weight streams once per pass; Batch hands each sequence its own rows for the steps that mix rows
// (attention over its own cache, its recurrence, its cache appends) and stacks their results in order. A
// backend whose row-wise ops give a row's result independent of the rows beside it (the CPU kernels) thus
// gives every sequence the bits of its solo pass. Positions in the specs Batch receives are relative: each
// sequence's Pos is added (the batched passes give 0).
type Batch[X any, W comparable] struct {
	Ops  Ops[X, W]
	Seqs []Seq[X, W]
	// Queries, when non-nil, is how many rows of q each sequence has in Attention (a drafter's last layer
	// queries with the first rows of each block only); nil means Seqs[i].Rows.
	Queries []int
}

var _ State[any, int] = (*Batch[any, int])(nil)

// BatchStates is an optional ability of a backend (found on Batch's Ops): one layer's attention, or Gated
// DeltaNet recurrence, for every sequence of a batch in one go (the CPU backend's workers then take work
// items of all sequences at once instead of splitting each sequence's small job in turn). q, k, v, p, b and
// a hold every sequence's rows in order as Batch receives them; queries is Batch.Queries; spec's Pos is
// relative (each sequence's Pos is to be added). Each sequence's result and state must equal those of its
// own State's Attention or DeltaNet. ok false (a state the backend cannot run so, checked before any work)
// makes Batch run each sequence in turn.
type BatchStates[X any, W comparable] interface {
	AttentionBatch(layer int, seqs []Seq[X, W], queries []int, q, k, v X, spec Attend[W]) (out X, ok bool)
	DeltaNetBatch(layer int, seqs []Seq[X, W], w *DeltaNet[W], p, b, a X) (out X, ok bool)
}

// Attention runs each sequence's attention on its own rows and state.
func (b *Batch[X, W]) Attention(layer int, q, k, v X, spec Attend[W]) X {
	if bs, ok := b.Ops.(BatchStates[X, W]); ok {
		if out, ok := bs.AttentionBatch(layer, b.Seqs, b.Queries, q, k, v, spec); ok {
			return out
		}
	}
	out := make([]X, len(b.Seqs))
	qo, ko := 0, 0
	for i, s := range b.Seqs {
		nq := s.Rows
		if b.Queries != nil {
			nq = b.Queries[i]
		}
		sp := spec
		sp.Pos += s.Pos
		out[i] = s.State.Attention(layer, b.Ops.Rows(q, qo, qo+nq), b.Ops.Rows(k, ko, ko+s.Rows), b.Ops.Rows(v, ko, ko+s.Rows), sp)
		qo += nq
		ko += s.Rows
	}
	return join(b.Ops, out)
}

// Remember appends each sequence's rows to its own cache.
func (b *Batch[X, W]) Remember(layer int, k, v X, spec Attend[W]) {
	o := 0
	for _, s := range b.Seqs {
		sp := spec
		sp.Pos += s.Pos
		s.State.Remember(layer, b.Ops.Rows(k, o, o+s.Rows), b.Ops.Rows(v, o, o+s.Rows), sp)
		o += s.Rows
	}
}

// DeltaNet runs each sequence's recurrence on its own rows and state.
func (b *Batch[X, W]) DeltaNet(layer int, w *DeltaNet[W], p, bb, a X) X {
	if bs, ok := b.Ops.(BatchStates[X, W]); ok {
		if out, ok := bs.DeltaNetBatch(layer, b.Seqs, w, p, bb, a); ok {
			return out
		}
	}
	out := make([]X, len(b.Seqs))
	o := 0
	for i, s := range b.Seqs {
		r := func(x X) X { return b.Ops.Rows(x, o, o+s.Rows) }
		out[i] = s.State.DeltaNet(layer, w, r(p), r(bb), r(a))
		o += s.Rows
	}
	return join(b.Ops, out)
}

// join stacks xs (one value is returned as is, so a batch of one runs the solo pass's ops).
func join[X any, W comparable](o Ops[X, W], xs []X) X {
	if len(xs) == 1 {
		return xs[0]
	}
	return o.Join(xs...)
}

// segments calls f with each part's row range (sizes[i] rows, in order) and stacks the results.
func segments[X any, W comparable](o Ops[X, W], sizes []int, f func(i, lo, hi int) X) X {
	out := make([]X, len(sizes))
	off := 0
	for i, n := range sizes {
		out[i] = f(i, off, off+n)
		off += n
	}
	return join(o, out)
}

// pick stacks rows lo[i]..lo[i]+n[i]−1 of each part of x (parts of sizes[i] rows, in order).
func pick[X any, W comparable](o Ops[X, W], x X, sizes, lo, n []int) X {
	out := make([]X, len(sizes))
	off := 0
	for i, sz := range sizes {
		out[i] = o.Rows(x, off+lo[i], off+lo[i]+n[i])
		off += sz
	}
	return join(o, out)
}

// ForwardBatch is Forward over several sequences' blocks in one pass: blocks[i] is sequence i's block, at
// positions seqs[i].Pos.. (seqs[i].Rows is ignored: it is len(blocks[i])). The result and tap's values hold
// every sequence's rows, sequence i's after those of the sequences before it. A batch of one runs exactly
// Forward's ops. ctx is checked before every layer; a cancelled pass may have changed every sequence's state.
func ForwardBatch[X any, W comparable](ctx context.Context, m *Target[W], be Backend[X, W], seqs []Seq[X, W], blocks [][]ports.Token, tap func(layer int, x X)) (X, error) {
	if len(seqs) == 1 {
		return Forward(ctx, m, be, seqs[0].State, be.Embed(m.Embed, blocks[0]), seqs[0].Pos, tap)
	}
	b := &Batch[X, W]{Ops: be, Seqs: make([]Seq[X, W], len(seqs))}
	var tokens []ports.Token
	for i, s := range seqs {
		b.Seqs[i] = Seq[X, W]{State: s.State, Pos: s.Pos, Rows: len(blocks[i])}
		tokens = append(tokens, blocks[i]...)
	}
	return Forward(ctx, m, be, b, be.Embed(m.Embed, tokens), 0, tap)
}

// LogitsBatch is Logits of the last rows[i] rows of each sequence's part of x (sizes[i] rows each, in
// order) in one product over all of them: sequence i's logits follow those of the sequences before it.
func LogitsBatch[X any, W comparable](m *Target[W], be Backend[X, W], x X, sizes, rows []int) X {
	lo := make([]int, len(sizes))
	for i := range sizes {
		lo[i] = sizes[i] - rows[i]
	}
	return be.Linear(m.LMHead, be.Norm(pick(be, x, sizes, lo, rows), m.FinalNorm, m.Arch.Eps))
}

// ContextBatch is Context for several draft sequences at once: f holds seqs[i].Rows context rows of each
// sequence, in order, at positions seqs[i].Pos...
func ContextBatch[X any, W comparable](d *Drafter[W], be Backend[X, W], seqs []Seq[X, W], f X) {
	if len(seqs) == 1 {
		Context(d, be, seqs[0].State, f, seqs[0].Pos)
		return
	}
	Context(d, be, &Batch[X, W]{Ops: be, Seqs: seqs}, f, 0)
}
