package cpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// BenchmarkDraftRound measures one drafting round of the trained block (16) after a 400-position context:
// the per-round cost on the decode hot path (context projection excluded; the session is cropped back to
// the same context each round), for a DFlash and a DFlash2 drafter of the same shape.
func BenchmarkDraftRound(b *testing.B) {
	for _, v2 := range []bool{false, true} {
		name := "DFlash"
		if v2 {
			name = "DFlash2"
		}
		b.Run(name, func(b *testing.B) { benchDraftRound(b, v2) })
	}
}

func benchDraftRound(b *testing.B, v2 bool) {
	tdir, ddir := testmodel.Synth(b, synth.TargetSpec{Family: "qwen3", Seed: 1, Wide: 2}), testmodel.SynthDrafter(b, synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, Mask: 63, Wide: 2, DFlash2: v2})
	ctx := b.Context()
	target, err := Load(ctx, tdir, LoadOptions{Threads: 2})
	require.NoError(b, err)
	defer target.Close()
	d, err := LoadDrafter(ctx, ddir, target, DrafterOptions{})
	require.NoError(b, err)
	defer d.Close()
	sess, err := target.NewSession(ctx, d.TapLayers())
	require.NoError(b, err)
	defer sess.Close()
	prompt := make([]ports.Token, 400)
	for i := range prompt {
		prompt[i] = ports.Token(i % 60)
	}
	fr, err := sess.Forward(ctx, prompt, ports.ForwardOptions{Taps: true, Rows: 1})
	require.NoError(b, err)
	ds, err := d.NewSession(ctx)
	require.NoError(b, err)
	defer ds.Close()
	_, err = ds.Draft(ctx, fr.Greedy[0], fr.Taps, 1)
	require.NoError(b, err)
	n := ds.Len()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ds.Draft(ctx, fr.Greedy[0], nil, d.BlockSize()); err != nil {
			b.Fatal(err)
		}
		if err := ds.Crop(n); err != nil {
			b.Fatal(err)
		}
	}
}
