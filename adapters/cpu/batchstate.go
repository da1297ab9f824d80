package cpu

import (
	"github.com/higgs-go/higgs/adapters/model"
)

var _ model.BatchStates[act, *weight] = ops{}

// passes returns the sequences' CPU states, or false if one is not a pass.
func passes(seqs []model.Seq[act, *weight]) ([]*pass, bool) {
	ps := make([]*pass, len(seqs))
	for i, s := range seqs {
		p, ok := s.State.(*pass)
		if !ok {
			return nil, false
		}
		ps[i] = p
	}
	return ps, true
}

// AttentionBatch runs one layer's attention for every sequence of a batch in one pool loop over all their
// work units (model.BatchStates). Each unit is computed by attnJob.unit, as in pass.Attention, and an
// output's bits do not depend on how its unit was cut, so every sequence gets the bits of its own attention
// whatever the batch holds.
func (o ops) AttentionBatch(layer int, seqs []model.Seq[act, *weight], queries []int, q, k, v act, a model.Attend[*weight]) (act, bool) {
	ps, ok := passes(seqs)
	if !ok {
		return act{}, false
	}
	jobs := make([]*attnJob, len(seqs))
	starts := make([]int, len(seqs)+1) // first work item of each sequence, then the total
	d := a.HeadDim
	Hq := q.width() / d
	out := o.buf(q.t * Hq * d)
	qo, ko, scratch, tmp := 0, 0, 0, 0
	for i, s := range seqs {
		nq := s.Rows
		if queries != nil {
			nq = queries[i]
		}
		sp := a
		sp.Pos += s.Pos
		jobs[i] = ps[i].attend(layer, o.Rows(q, qo, qo+nq), o.Rows(k, ko, ko+s.Rows), o.Rows(v, ko, ko+s.Rows), sp, out[qo*Hq*d:(qo+nq)*Hq*d])
		starts[i+1] = starts[i] + jobs[i].units()
		scratch = max(scratch, jobs[i].scratch())
		tmp = max(tmp, jobs[i].tmp())
		qo += nq
		ko += s.Rows
	}
	o.pool.For(starts[len(seqs)], 1, func(lo, hi int) {
		scores, tmp := make([]float32, scratch), make([]float32, tmp)
		i := 0
		for idx := lo; idx < hi; idx++ {
			for idx >= starts[i+1] {
				i++
			}
			jobs[i].unit(idx-starts[i], scores, tmp)
		}
	})
	for i, p := range ps {
		p.keep(jobs[i])
	}
	return act{out, q.t}, true
}

// DeltaNetBatch runs one Gated DeltaNet layer for every sequence of a batch (model.BatchStates): the conv in
// one pool loop over all sequences' channels, the gates per sequence, then the recurrence in one pool loop
// over all (sequence, value head) pairs. Each value is computed by the gdnJob step that computes it in
// pass.DeltaNet, so every sequence's output, state and tape are those of its own DeltaNet.
func (o ops) DeltaNetBatch(layer int, seqs []model.Seq[act, *weight], w *model.DeltaNet[*weight], pr, b, araw act) (act, bool) {
	ps, ok := passes(seqs)
	if !ok {
		return act{}, false
	}
	C, Hv, dk, Dv := w.Channels(), w.ValueHeads, w.KeyDim, w.ValueHeads*w.ValueDim
	out := o.buf(pr.t * Dv)
	jobs := make([]*gdnJob, len(seqs))
	off := 0
	for i, s := range seqs {
		r := func(x act) act { return o.Rows(x, off, off+s.Rows) }
		jobs[i] = ps[i].deltaNet(layer, w, r(pr), r(b), r(araw), out[off*Dv:(off+s.Rows)*Dv], true)
		off += s.Rows
	}
	// Chunks may span sequences: each runs its channels sequence by sequence.
	o.pool.For(len(seqs)*C, 256, func(lo, hi int) {
		for lo < hi {
			i := lo / C
			end := min(hi, (i+1)*C)
			jobs[i].conv(lo-i*C, end-i*C)
			lo = end
		}
	})
	for _, j := range jobs {
		j.gates()
	}
	o.pool.For(len(seqs)*Hv, 1, func(lo, hi int) {
		tmp := make([]float32, dk)
		for idx := lo; idx < hi; idx++ {
			jobs[idx/Hv].head(idx%Hv, tmp)
		}
	})
	for _, j := range jobs {
		j.flip()
	}
	return act{out, pr.t}, true
}
