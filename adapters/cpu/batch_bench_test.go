package cpu

import (
	"fmt"
	"testing"

	"github.com/higgs-go/higgs/ports"
)

// BenchmarkForwardBatch compares one ForwardBatch of 8 sequences × a 4-token verify block (taped, each
// sequence at its own position after a prefix of 48..62 tokens) with the same 8 blocks as 8 solo Forward
// calls, on the synthetic ~100M hybrid in f32 and 4-bit. Each iteration restores every sequence's state
// first. tok/s counts the 32 verified positions.
//
//	go test -run '^$' -bench ForwardBatch -benchtime 10x ./adapters/cpu
func BenchmarkForwardBatch(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 100M-parameter model")
	}
	const seqs, block = 8, 4
	for _, format := range []string{"f32", "q4"} {
		tg, _, _ := syntheticTarget(format, 0)
		V := tg.m.Arch.Vocab
		sess := make([]*Session, seqs)
		snaps := make([]ports.RecurrentSnapshot, seqs)
		items := make([]ports.BatchItem, seqs)
		for i := range sess {
			ps, err := tg.NewSession(b.Context(), nil)
			if err != nil {
				b.Fatal(err)
			}
			sess[i] = ps.(*Session)
			prefix := make([]ports.Token, 48+2*i)
			for j := range prefix {
				prefix[j] = ports.Token((j*37 + i*11) % V)
			}
			if _, err := sess[i].Forward(b.Context(), prefix, ports.ForwardOptions{Rows: 1}); err != nil {
				b.Fatal(err)
			}
			if snaps[i], err = sess[i].Snapshot(); err != nil {
				b.Fatal(err)
			}
			toks := make([]ports.Token, block)
			for j := range toks {
				toks[j] = ports.Token((j*53 + i*7 + 1) % V)
			}
			items[i] = ports.BatchItem{Session: sess[i], Tokens: toks, Opts: ports.ForwardOptions{RecordTape: true}}
		}
		reset := func(b *testing.B) {
			for i, s := range sess {
				if err := s.Restore(snaps[i]); err != nil {
					b.Fatal(err)
				}
				if err := s.TrimKV(snaps[i].Position()); err != nil {
					b.Fatal(err)
				}
			}
		}
		report := func(b *testing.B) {
			b.ReportMetric(float64(seqs*block)/(b.Elapsed().Seconds()/float64(b.N)), "tok/s")
		}
		b.Run(fmt.Sprintf("%s/batch%dx%d", format, seqs, block), func(b *testing.B) {
			for b.Loop() {
				reset(b)
				res, err := tg.ForwardBatch(b.Context(), items)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
			report(b)
		})
		b.Run(fmt.Sprintf("%s/solo%dx%d", format, seqs, block), func(b *testing.B) {
			for b.Loop() {
				reset(b)
				for _, it := range items {
					if _, err := it.Session.Forward(b.Context(), it.Tokens, it.Opts); err != nil {
						b.Fatal(err)
					}
				}
			}
			report(b)
		})
	}
}
