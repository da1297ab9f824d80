package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// BenchmarkBatchStates compares, on the synthetic ~100M hybrid's first attention and first Gated DeltaNet
// layer, 8 sequences (after prefixes of 48..62 positions) × a 4-token block and × 1 token run per sequence in
// turn (each splitting its own job across the pool) with the same run in one pool loop over every
// sequence's work items (model.BatchStates), back to back in every iteration (in alternating order); speedup is the per-sequence
// time over the batched time.
//
//	go test -run '^$' -bench BatchStates -benchtime 200x ./adapters/cpu
func BenchmarkBatchStates(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 100M-parameter model")
	}
	tg, _, _ := syntheticTarget("f32", 0)
	a := tg.m.Arch
	attn, gdn := -1, -1
	for i, ly := range tg.m.Layers {
		if ly.GDN != nil && gdn < 0 {
			gdn = i
		}
		if ly.Attn != nil && attn < 0 {
			attn = i
		}
	}
	const seqs = 8
	sess := make([]*Session, seqs)
	for i := range sess {
		ps, err := tg.NewSession(b.Context(), nil)
		if err != nil {
			b.Fatal(err)
		}
		sess[i] = ps.(*Session)
		prefix := make([]ports.Token, 48+2*i)
		for j := range prefix {
			prefix[j] = ports.Token((j*37 + i*11) % a.Vocab)
		}
		if _, err := sess[i].Forward(b.Context(), prefix, ports.ForwardOptions{Rows: 1}); err != nil {
			b.Fatal(err)
		}
	}
	w := tg.m.Layers[gdn].GDN
	r := rand.New(rand.NewPCG(3, 4))
	rnd := func(rows, width int) act {
		v := make([]float32, rows*width)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		return act{v, rows}
	}
	for _, block := range []int{4, 1} {
		T := seqs * block
		q, k, v := rnd(T, a.Heads*a.HeadDim), rnd(T, a.KVHeads*a.HeadDim), rnd(T, a.KVHeads*a.HeadDim)
		p, bb, al := rnd(T, w.Channels()), rnd(T, w.ValueHeads), rnd(T, w.ValueHeads)
		spec := model.Attend[*weight]{HeadDim: a.HeadDim, Rope: tg.m.Rope, Causal: true}
		mem := new(arena)
		batch := func(be model.Backend[act, *weight]) *model.Batch[act, *weight] {
			mem.reset()
			bt := &model.Batch[act, *weight]{Ops: be, Seqs: make([]model.Seq[act, *weight], seqs)}
			for i, s := range sess {
				s.mem.reset()
				bt.Seqs[i] = model.Seq[act, *weight]{State: s.begin(block, ports.ForwardOptions{}), Pos: s.pos.N, Rows: block}
			}
			return bt
		}
		// The per-sequence path: a backend without the BatchStates ability.
		type plain struct{ model.Backend[act, *weight] }
		run := func(be model.Backend[act, *weight]) {
			bt := batch(be)
			bt.Attention(attn, q, k, v, spec)
			bt.DeltaNet(gdn, w, p, bb, al)
		}
		b.Run(fmt.Sprintf("interleaved%dx%d", seqs, block), func(b *testing.B) {
			var tp, tb time.Duration
			timed := func(be model.Backend[act, *weight]) time.Duration {
				t0 := time.Now()
				run(be)
				return time.Since(t0)
			}
			odd := false
			for b.Loop() {
				// Each goes first every other iteration, so neither always finds the other's data in cache.
				if odd = !odd; odd {
					tp += timed(plain{ops{pool: tg.pool, mem: mem}})
					tb += timed(ops{pool: tg.pool, mem: mem})
				} else {
					tb += timed(ops{pool: tg.pool, mem: mem})
					tp += timed(plain{ops{pool: tg.pool, mem: mem}})
				}
			}
			b.ReportMetric(float64(tp.Microseconds())/float64(b.N), "perseq-us/op")
			b.ReportMetric(float64(tb.Microseconds())/float64(b.N), "batched-us/op")
			b.ReportMetric(tp.Seconds()/tb.Seconds(), "speedup")
		})
	}
}
