package cpu

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// BenchmarkForwardBatch compares one ForwardBatch of 8 sequences × a 4-token verify block (taped, each
// sequence at its own position after a prefix of 48..62 tokens) — and × 1 token, plain decoding — with the
// same 8 blocks as 8 solo Forward calls, on the synthetic ~100M hybrid in f32 and 4-bit. Each iteration
// restores every sequence's state first. tok/s counts the positions forwarded.
//
//	go test -run '^$' -bench ForwardBatch -benchtime 10x ./adapters/cpu
func BenchmarkForwardBatch(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 100M-parameter model")
	}
	const seqs = 8
	for _, format := range []string{"f32", "q4"} {
		tg, _, _ := syntheticTarget(format, 0)
		for _, block := range []int{4, 1} {
			benchForwardBatch(b, tg, format, seqs, block)
		}
	}
}

func benchForwardBatch(b *testing.B, tg *Target, format string, seqs, block int) {
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
		items[i] = ports.BatchItem{Session: sess[i], Tokens: toks, Opts: ports.ForwardOptions{RecordTape: block > 1}}
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
	batch := func(b *testing.B) {
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
	solo := func(b *testing.B) {
		for _, it := range items {
			if _, err := it.Session.Forward(b.Context(), it.Tokens, it.Opts); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run(fmt.Sprintf("%s/batch%dx%d", format, seqs, block), func(b *testing.B) {
		for b.Loop() {
			reset(b)
			batch(b)
		}
		report(b)
	})
	b.Run(fmt.Sprintf("%s/solo%dx%d", format, seqs, block), func(b *testing.B) {
		for b.Loop() {
			reset(b)
			solo(b)
		}
		report(b)
	})
	// Both in every iteration, back to back, so a machine whose load drifts (shared CI cores) still gives
	// a fair ratio: speedup is the solo time over the batched time.
	b.Run(fmt.Sprintf("%s/interleaved%dx%d", format, seqs, block), func(b *testing.B) {
		var tb, ts time.Duration
		for b.Loop() {
			reset(b)
			t0 := time.Now()
			batch(b)
			t1 := time.Now()
			reset(b)
			t2 := time.Now()
			solo(b)
			tb, ts = tb+t1.Sub(t0), ts+time.Since(t2)
		}
		b.ReportMetric(float64(tb.Milliseconds())/float64(b.N), "batch-ms/op")
		b.ReportMetric(float64(ts.Milliseconds())/float64(b.N), "solo-ms/op")
		b.ReportMetric(ts.Seconds()/tb.Seconds(), "speedup")
	})
}

// BenchmarkDraftBatch compares one DraftBatch of 8 sessions drafting the trained block (16) after contexts
// of 100..170 positions with the same 8 drafts as solo Draft calls, for a DFlash and a DFlash2 drafter on a
// 256-wide synthetic target (each session is cropped back to its context every round).
//
//	go test -run '^$' -bench DraftBatch -benchtime 20x ./adapters/cpu
func BenchmarkDraftBatch(b *testing.B) {
	for _, v2 := range []bool{false, true} {
		name := "DFlash"
		if v2 {
			name = "DFlash2"
		}
		tdir, ddir := testmodel.Synth(b, synth.TargetSpec{Family: "qwen3", Seed: 1, Wide: 4}), testmodel.SynthDrafter(b, synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, Mask: 63, Wide: 4, DFlash2: v2})
		ctx := b.Context()
		target, err := Load(ctx, tdir, LoadOptions{})
		require.NoError(b, err)
		d, err := LoadDrafter(ctx, ddir, target, DrafterOptions{})
		require.NoError(b, err)
		const seqs = 8
		items := make([]ports.DraftItem, seqs)
		lens := make([]int, seqs)
		for i := range items {
			sess, err := target.NewSession(ctx, d.TapLayers())
			require.NoError(b, err)
			prompt := make([]ports.Token, 100+10*i)
			for j := range prompt {
				prompt[j] = ports.Token((j*7 + i) % 60)
			}
			fr, err := sess.Forward(ctx, prompt, ports.ForwardOptions{Taps: true, Rows: 1})
			require.NoError(b, err)
			ds, err := d.NewSession(ctx)
			require.NoError(b, err)
			_, err = ds.Draft(ctx, fr.Greedy[0], fr.Taps, 1)
			require.NoError(b, err)
			lens[i] = ds.Len()
			items[i] = ports.DraftItem{Session: ds, Anchor: fr.Greedy[0], BlockSize: d.BlockSize()}
		}
		crop := func(b *testing.B) {
			for i, it := range items {
				if err := it.Session.Crop(lens[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
		// The first round projects the queued context; both variants start after it.
		if _, err := d.DraftBatch(ctx, items); err != nil {
			b.Fatal(err)
		}
		crop(b)
		batch := func(b *testing.B) {
			res, err := d.DraftBatch(b.Context(), items)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			crop(b)
		}
		solo := func(b *testing.B) {
			for _, it := range items {
				if _, err := it.Session.Draft(b.Context(), it.Anchor, nil, it.BlockSize); err != nil {
					b.Fatal(err)
				}
			}
			crop(b)
		}
		b.Run(name+"/batch8", func(b *testing.B) {
			for b.Loop() {
				batch(b)
			}
		})
		b.Run(name+"/solo8", func(b *testing.B) {
			for b.Loop() {
				solo(b)
			}
		})
		// Both back to back in every iteration (see BenchmarkForwardBatch's interleaved runs).
		b.Run(name+"/interleaved8", func(b *testing.B) {
			var tb, ts time.Duration
			for b.Loop() {
				t0 := time.Now()
				batch(b)
				t1 := time.Now()
				solo(b)
				tb, ts = tb+t1.Sub(t0), ts+time.Since(t1)
			}
			b.ReportMetric(ts.Seconds()/tb.Seconds(), "speedup")
		})
		_ = d.Close()
		_ = target.Close()
	}
}
