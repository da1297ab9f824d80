package dflash_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/cpu/dflash"
	"github.com/higgs-go/higgs/adapters/cpu/dflash/dflashtest"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

type pair struct {
	target  *cpu.Target
	drafter *dflash.Drafter
}

func loadPair(t *testing.T, ts dflashtest.TargetSpec, ds dflashtest.DrafterSpec, threads int) pair {
	t.Helper()
	tdir, ddir := t.TempDir(), t.TempDir()
	require.NoError(t, dflashtest.WriteTarget(tdir, ts))
	require.NoError(t, dflashtest.WriteDrafter(ddir, ds))
	target, err := cpu.Load(t.Context(), tdir, cpu.LoadOptions{Threads: threads})
	require.NoError(t, err)
	t.Cleanup(func() { _ = target.Close() })
	d, err := dflash.Load(t.Context(), ddir, target, dflash.Options{Pool: target.Pool()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return pair{target, d}
}

func generate(t *testing.T, p pair, prompt []ports.Token, bs int, rb speculative.RollbackMode, n int) speculative.Result {
	t.Helper()
	ctx := t.Context()
	cfg := speculative.Config{BlockSize: bs, MaxTokens: n, Rollback: rb, LayerKinds: p.target.Info().LayerKinds,
		ContextLength: p.target.Info().ContextLength}
	dec, err := speculative.New(cfg, wallClock{}, nil)
	require.NoError(t, err)
	var taps []int
	var ds ports.DraftSession
	if bs > 1 {
		taps = p.drafter.TapLayers()
		ds, err = p.drafter.NewSession(ctx)
		require.NoError(t, err)
		defer ds.Close()
	}
	sess, err := p.target.NewSession(ctx, taps)
	require.NoError(t, err)
	defer sess.Close()
	res, err := dec.Generate(ctx, sess, ds, prompt, func([]ports.Token) error { return nil })
	require.NoError(t, err)
	return res
}

var prompts = [][]ports.Token{
	{1},
	{5, 9, 13, 2},
	{40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 1, 2, 3},
}

// TestLosslessGreedy: greedy speculative decoding equals greedy autoregressive decoding on a dense and a
// hybrid target, for block sizes 2, 4, 8, 16, several prompts, both forced rollback strategies, with a
// drafter whose tap ids disagree with its num_target_layers.
func TestLosslessGreedy(t *testing.T) {
	n := 40
	if testing.Short() {
		n = 16
	}
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			p := loadPair(t, dflashtest.TargetSpec{Family: family, Seed: 1},
				dflashtest.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, NumTargetLayers: 36, Mask: 63}, 2)
			accepted := 0
			for pi, prompt := range prompts {
				ar := generate(t, p, prompt, 1, speculative.RollbackAuto, n)
				require.Len(t, ar.Tokens, n)
				for _, bs := range []int{2, 4, 8, 16} {
					for _, rb := range []speculative.RollbackMode{speculative.RollbackReplay, speculative.RollbackRecompute} {
						sp := generate(t, p, prompt, bs, rb, n)
						require.Equal(t, ar.Tokens, sp.Tokens, "prompt %d, block size %d, rollback %s", pi, bs, rb)
						seq := append(append([]ports.Token{}, prompt...), sp.Tokens...)
						emitted := len(prompt) + 1
						for i, r := range sp.Stats.Rounds {
							require.NotEmpty(t, r.Block)
							assert.Equal(t, seq[emitted-1], r.Block[0], "round %d block[0] is the last committed token", i)
							emitted += r.Committed
							accepted += r.Accepted
						}
					}
				}
			}
			t.Logf("%s: %d draft tokens accepted over the suite", family, accepted)
		})
	}
}

// TestDeterministicAcrossThreads: the same generation gives the same tokens and the same per-round blocks
// with 1 and 3 workers.
func TestDeterministicAcrossThreads(t *testing.T) {
	var first []speculative.RoundStats
	var firstTok []ports.Token
	for _, threads := range []int{1, 3} {
		p := loadPair(t, dflashtest.TargetSpec{Family: "qwen3_next", Seed: 3},
			dflashtest.DrafterSpec{Seed: 4, Taps: []int{1, 3}, Mask: 60}, threads)
		res := generate(t, p, prompts[1], 8, speculative.RollbackReplay, 24)
		if first == nil {
			first, firstTok = res.Stats.Rounds, res.Tokens
			continue
		}
		assert.Equal(t, firstTok, res.Tokens)
		require.Len(t, res.Stats.Rounds, len(first))
		for i := range first {
			assert.Equal(t, first[i].Block, res.Stats.Rounds[i].Block)
		}
	}
}

// TestDraftSessionConformance runs the ports' DraftSession suite on the CPU drafter over a hybrid target.
func TestDraftSessionConformance(t *testing.T) {
	p := loadPair(t, dflashtest.TargetSpec{Family: "qwen3_next", Seed: 12},
		dflashtest.DrafterSpec{Seed: 13, Taps: []int{0, 3}, Mask: 63, BlockSize: 8}, 2)
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
		BlockSize: p.drafter.BlockSize(),
		Vocab:     p.target.Info().VocabSize,
	}.Run(t)
}

// TestQuantizedDrafterLossless: an MLX 4-bit drafter (BF16 scales and biases, `model.` prefix) loads and keeps
// greedy speculative decoding lossless.
func TestQuantizedDrafterLossless(t *testing.T) {
	p := loadPair(t, dflashtest.TargetSpec{Family: "qwen3_next", Seed: 14},
		dflashtest.DrafterSpec{Seed: 15, Taps: []int{1, 3}, Mask: 63, BlockSize: 8, Prefix: "model.",
			Quant: &quant.Spec{Bits: 4, GroupSize: 32}}, 2)
	ar := generate(t, p, prompts[1], 1, speculative.RollbackAuto, 24)
	for _, bs := range []int{4, 8} {
		sp := generate(t, p, prompts[1], bs, speculative.RollbackAuto, 24)
		assert.Equal(t, ar.Tokens, sp.Tokens, "block size %d", bs)
	}
}

// TestStoredFormsOfTargets: BF16 and MLX-quantized targets (what the benchmarks use) keep greedy speculative
// decoding lossless.
func TestStoredFormsOfTargets(t *testing.T) {
	for name, ts := range map[string]dflashtest.TargetSpec{
		"hybrid-bf16": {Family: "qwen3_next", Seed: 16, BF16: true},
		"hybrid-q4":   {Family: "qwen3_next", Seed: 16, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
		"dense-q8":    {Family: "qwen3", Seed: 16, Quant: &quant.Spec{Bits: 8, GroupSize: 32}},
	} {
		t.Run(name, func(t *testing.T) {
			p := loadPair(t, ts, dflashtest.DrafterSpec{Seed: 17, Taps: []int{0, 3}, Mask: 62, BlockSize: 8}, 2)
			ar := generate(t, p, prompts[1], 1, speculative.RollbackAuto, 20)
			sp := generate(t, p, prompts[1], 8, speculative.RollbackReplay, 20)
			assert.Equal(t, ar.Tokens, sp.Tokens)
		})
	}
}

// TestShortBlocksArePrefixesOfTheTrainedBlock: by default a Draft call with bs < BlockSize runs the trained
// block, so its proposals are the first bs−1 proposals of a full-block call at the same position (and the
// session length is the same after either); with ShrinkBlocks the block really shrinks.
func TestShortBlocksArePrefixesOfTheTrainedBlock(t *testing.T) {
	ctx := t.Context()
	tdir, ddir := t.TempDir(), t.TempDir()
	require.NoError(t, dflashtest.WriteTarget(tdir, dflashtest.TargetSpec{Family: "qwen3_next", Seed: 21}))
	require.NoError(t, dflashtest.WriteDrafter(ddir, dflashtest.DrafterSpec{Seed: 22, Taps: []int{0, 3}, Mask: 63}))
	target, err := cpu.Load(ctx, tdir, cpu.LoadOptions{Threads: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = target.Close() })
	draft := func(shrink bool, bs int) []ports.Token {
		d, err := dflash.Load(ctx, ddir, target, dflash.Options{Pool: target.Pool(), ShrinkBlocks: shrink})
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, shrink, d.ShrinksBlocks())
		sess, err := target.NewSession(ctx, d.TapLayers())
		require.NoError(t, err)
		defer sess.Close()
		fr, err := sess.Forward(ctx, prompts[2], ports.ForwardOptions{Rows: 1, Taps: true})
		require.NoError(t, err)
		ds, err := d.NewSession(ctx)
		require.NoError(t, err)
		defer ds.Close()
		p, err := ds.Draft(ctx, fr.Greedy[0], fr.Taps, bs)
		require.NoError(t, err)
		require.Len(t, p.Tokens, bs-1)
		assert.Equal(t, len(prompts[2]), ds.Len())
		return p.Tokens
	}
	full := draft(false, 16)
	shrunkDiffers := false
	for _, bs := range []int{2, 3, 4, 8, 15, 16} {
		assert.Equal(t, full[:bs-1], draft(false, bs), "block size %d", bs)
		shrunkDiffers = shrunkDiffers || !slices.Equal(full[:bs-1], draft(true, bs))
	}
	assert.Equal(t, full, draft(true, 16), "a full block is the same either way")
	assert.True(t, shrunkDiffers, "ShrinkBlocks must run a shorter block (random weights: some prefix differs)")
}
