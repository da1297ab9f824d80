package cpu

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// The end-to-end drafter tests decode through the ports-level loop (porttest.Speculate and Greedy): the
// adapters never import the domain. Lossless greedy decoding over every block size and both rollbacks on a
// dense and a hybrid target is TestSpeculativeConformance (conformance_test.go).

// draftPair is a tiny target and a drafter bound to it.
type draftPair struct {
	target  *Target
	drafter *Drafter
}

func loadDraftPair(t *testing.T, ts synth.TargetSpec, ds synth.DrafterSpec, threads int) draftPair {
	t.Helper()
	tdir, ddir := testmodel.Synth(t, ts), testmodel.SynthDrafter(t, ds)
	target, err := Load(t.Context(), tdir, LoadOptions{Threads: threads})
	require.NoError(t, err)
	t.Cleanup(func() { _ = target.Close() })
	return draftPair{target, loadTinyDrafter(t, ddir, target, DrafterOptions{})}
}

// speculate decodes n tokens greedily with blocks of bs (bs 1: plain greedy decoding, no rounds).
func speculate(t *testing.T, p draftPair, prompt []ports.Token, bs int, rb porttest.Rollback, n int) ([]ports.Token, []porttest.Round) {
	t.Helper()
	if bs == 1 {
		toks, err := porttest.Greedy(t.Context(), p.target, prompt, n)
		require.NoError(t, err)
		return toks, nil
	}
	toks, rounds, err := porttest.Speculate(t.Context(), p.target, p.drafter, prompt, bs, rb, n)
	require.NoError(t, err)
	return toks, rounds
}

// draftPrompts are the prompts of the end-to-end drafter tests.
var draftPrompts = [][]ports.Token{
	{1},
	{5, 9, 13, 2},
	{40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 1, 2, 3},
}

// TestSpeculativeDeterministicAcrossThreads: the same generation gives the same tokens and the same
// per-round blocks with 1 and 3 workers.
func TestSpeculativeDeterministicAcrossThreads(t *testing.T) {
	var first []porttest.Round
	var firstTok []ports.Token
	for _, threads := range []int{1, 3} {
		p := loadDraftPair(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3},
			synth.DrafterSpec{Seed: 4, Taps: []int{1, 3}, Mask: 60}, threads)
		require.Equal(t, threads, p.target.Threads())
		toks, rounds := speculate(t, p, draftPrompts[1], 8, porttest.RollbackReplay, 24)
		require.NotEmpty(t, rounds)
		if first == nil {
			first, firstTok = rounds, toks
			continue
		}
		assert.Equal(t, firstTok, toks)
		require.Len(t, rounds, len(first))
		for i := range first {
			assert.Equal(t, first[i].Block, rounds[i].Block)
		}
	}
}

// TestDraftSessionConformance runs the ports' DraftSession suite on the CPU drafter over a hybrid target.
func TestDraftSessionConformance(t *testing.T) {
	p := loadDraftPair(t, synth.TargetSpec{Family: "qwen3_next", Seed: 12},
		synth.DrafterSpec{Seed: 13, Taps: []int{0, 3}, Mask: 63, BlockSize: 8}, 2)
	porttest.DraftSuite{
		OpenTarget: func(t *testing.T) ports.Session {
			s, err := p.target.NewSession(t.Context(), p.drafter.TapLayers())
			require.NoError(t, err)
			return s
		},
		OpenDraft: func(t *testing.T) ports.DraftSession {
			s, err := p.drafter.NewSession(t.Context())
			require.NoError(t, err)
			return s
		},
		BlockSize:     p.drafter.BlockSize(),
		Vocab:         p.target.Info().VocabSize,
		ContextLength: p.target.Info().ContextLength,
	}.Run(t)
}

// TestQuantizedDrafterLossless: an MLX 4-bit drafter (BF16 scales and biases, `model.` prefix) loads and
// keeps greedy speculative decoding lossless.
func TestQuantizedDrafterLossless(t *testing.T) {
	p := loadDraftPair(t, synth.TargetSpec{Family: "qwen3_next", Seed: 14},
		synth.DrafterSpec{Seed: 15, Taps: []int{1, 3}, Mask: 63, BlockSize: 8, Prefix: "model.",
			Quant: &quant.Spec{Bits: 4, GroupSize: 32}}, 2)
	ar, _ := speculate(t, p, draftPrompts[1], 1, porttest.RollbackReplay, 24)
	for _, bs := range []int{4, 8} {
		for _, rb := range []porttest.Rollback{porttest.RollbackReplay, porttest.RollbackRecompute} {
			sp, _ := speculate(t, p, draftPrompts[1], bs, rb, 24)
			assert.Equal(t, ar, sp, "block size %d, %s", bs, rb)
		}
	}
}

// TestStoredFormsOfTargets: BF16, F16 and MLX-quantized targets (what the benchmarks use) keep greedy
// speculative decoding lossless.
func TestStoredFormsOfTargets(t *testing.T) {
	for name, ts := range map[string]synth.TargetSpec{
		"hybrid-bf16": {Family: "qwen3_next", Seed: 16, BF16: true},
		"hybrid-f16":  {Family: "qwen3_next", Seed: 16, F16: true},
		"hybrid-q4":   {Family: "qwen3_next", Seed: 16, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
		"dense-q8":    {Family: "qwen3", Seed: 16, Quant: &quant.Spec{Bits: 8, GroupSize: 32}},
	} {
		t.Run(name, func(t *testing.T) {
			p := loadDraftPair(t, ts, synth.DrafterSpec{Seed: 17, Taps: []int{0, 3}, Mask: 62, BlockSize: 8}, 2)
			ar, _ := speculate(t, p, draftPrompts[1], 1, porttest.RollbackReplay, 20)
			sp, _ := speculate(t, p, draftPrompts[1], 8, porttest.RollbackReplay, 20)
			assert.Equal(t, ar, sp)
		})
	}
}

// TestAnyBlockSizeIsDraftedLiterally: a Draft call of bs runs exactly bs slots, below and above the
// configured block size (16), as the authors' loop does: a short block is not the configured block's prefix
// (its slots attend to each other, so fewer masks change every prediction; random weights make some differ),
// and a longer block proposes bs−1 tokens. The session length is the anchor's position after any of them.
func TestAnyBlockSizeIsDraftedLiterally(t *testing.T) {
	ctx := t.Context()
	tdir, ddir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 21}), testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 22, Taps: []int{0, 3}, Mask: 63})
	target, err := Load(ctx, tdir, LoadOptions{Threads: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = target.Close() })
	d, err := LoadDrafter(ctx, ddir, target, DrafterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	require.Equal(t, 16, d.BlockSize())
	draft := func(bs int) []ports.Token {
		sess, err := target.NewSession(ctx, d.TapLayers())
		require.NoError(t, err)
		defer sess.Close()
		fr, err := sess.Forward(ctx, draftPrompts[2], ports.ForwardOptions{Rows: 1, Taps: true})
		require.NoError(t, err)
		ds, err := d.NewSession(ctx)
		require.NoError(t, err)
		defer ds.Close()
		p, err := ds.Draft(ctx, fr.Greedy[0], fr.Taps, bs)
		require.NoError(t, err)
		require.Len(t, p.Tokens, bs-1)
		assert.Equal(t, len(draftPrompts[2]), ds.Len())
		return p.Tokens
	}
	full := draft(16)
	shortDiffers := false
	for _, bs := range []int{2, 3, 4, 8, 15} {
		shortDiffers = shortDiffers || !slices.Equal(full[:bs-1], draft(bs))
	}
	assert.True(t, shortDiffers, "a short block runs bs slots, not the configured block (random weights: some prefix differs)")
	for _, bs := range []int{17, 24, 40} {
		assert.Equal(t, draft(bs), draft(bs), "block size %d: deterministic", bs)
	}
}
