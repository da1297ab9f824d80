package cpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
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
		b.Run(name+"/batch8", func(b *testing.B) {
			for b.Loop() {
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
		})
		b.Run(name+"/solo8", func(b *testing.B) {
			for b.Loop() {
				for _, it := range items {
					if _, err := it.Session.Draft(b.Context(), it.Anchor, nil, it.BlockSize); err != nil {
						b.Fatal(err)
					}
				}
				crop(b)
			}
		})
		_ = d.Close()
		_ = target.Close()
	}
}
