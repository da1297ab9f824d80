package verify

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

func load(t *testing.T, model, draft string) *models.Models {
	t.Helper()
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: model, Draft: draft, Threads: 2}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

var testPrompts = [][]ports.Token{{1}, {5, 9, 13, 2}, {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 1, 2, 3}}

// TestLosslessUseCase runs the lossless use case on a dense and a hybrid target with a drafter whose tap ids
// disagree with num_target_layers, for block sizes 2..16 under forced tape replay and forced recompute.
func TestLosslessUseCase(t *testing.T) {
	drafter := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 9, Taps: []int{1, 3}, NumTargetLayers: 41, Mask: 62})
	n := 32
	if testing.Short() {
		n = 12
	}
	for _, fam := range []string{"qwen3", "qwen3_next"} {
		t.Run(fam, func(t *testing.T) {
			m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: fam, Seed: 5}), drafter)
			res, err := Lossless(t.Context(), m, LosslessOptions{Prompts: testPrompts, MaxTokens: n, NoEOS: true,
				Rollbacks: []speculative.RollbackMode{speculative.RollbackReplay, speculative.RollbackRecompute}})
			require.NoError(t, err)
			assert.True(t, res.Pass)
			assert.Len(t, res.Cases, len(testPrompts)*len(DefaultBlockSizes)*2)
			for _, c := range res.Cases {
				assert.True(t, c.Match)
				assert.Equal(t, n, c.Tokens)
			}
		})
	}
}

// TestLosslessFastKernels: with the opt-in fast 4-bit kernels (int8 inputs, not bit-identical to the exact ones)
// speculative decoding is still lossless against autoregressive decoding with the same kernels, because the fast
// kernels are batch-invariant too (a 16-row verify gives each row the 1-row decode's bits).
func TestLosslessFastKernels(t *testing.T) {
	drafter := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 19, Taps: []int{1, 3}, Mask: 62})
	n := 24
	if testing.Short() {
		n = 8
	}
	for _, fam := range []string{"qwen3", "qwen3_next"} {
		t.Run(fam, func(t *testing.T) {
			target := testmodel.Synth(t, synth.TargetSpec{Family: fam, Seed: 15, Quant: &quant.Spec{Bits: 4, GroupSize: 32}})
			m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Draft: drafter, Threads: 2, Kernels: models.KernelsFast},
				zerolog.Nop(), nil)
			require.NoError(t, err)
			defer m.Close()
			require.Equal(t, models.BackendCPUFast, m.Backend)
			res, err := Lossless(t.Context(), m, LosslessOptions{Prompts: testPrompts, MaxTokens: n, NoEOS: true,
				Rollbacks: []speculative.RollbackMode{speculative.RollbackReplay, speculative.RollbackRecompute}})
			require.NoError(t, err)
			assert.True(t, res.Pass)
			for _, c := range res.Cases {
				assert.True(t, c.Match, "%+v", c)
			}
		})
	}
}

// TestLosslessFastKernelsBatched: in the fast mode, generations decoded together in batched rounds (mixed
// block sizes, plain decoding among them) each give the greedy autoregressive output they give alone.
func TestLosslessFastKernelsBatched(t *testing.T) {
	target := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 15, Quant: &quant.Spec{Bits: 4, GroupSize: 32}})
	drafter := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 19, Taps: []int{1, 3}, Mask: 62})
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Draft: drafter, Threads: 2, Kernels: models.KernelsFast},
		zerolog.Nop(), nil)
	require.NoError(t, err)
	defer m.Close()
	const n = 16
	want := make([][]ports.Token, len(testPrompts))
	for i, p := range testPrompts {
		r, _, err := runDecoder(t.Context(), m, GenerateOptions{Request: generation.Request{Prompt: p, MaxTokens: n, NoEOS: true}})
		require.NoError(t, err)
		want[i] = r.Tokens
	}
	sched, err := batch.New(batch.Config{}, SystemClock{}, m.Target, m.Drafter)
	require.NoError(t, err)
	type job struct{ prompt, bs int }
	var jobs []job
	for i := range testPrompts {
		for _, bs := range []int{1, 4, 8} {
			jobs = append(jobs, job{i, bs})
		}
	}
	got := make([][]ports.Token, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			r, err := decode(t.Context(), m, GenerateOptions{Request: generation.Request{Prompt: testPrompts[j.prompt], MaxTokens: n,
				NoEOS: true, BlockSize: j.bs}, Speculative: j.bs > 1, Batch: sched, PrefillChunk: 3})
			got[i], errs[i] = r.Tokens, err
		})
	}
	wg.Wait()
	for i, j := range jobs {
		require.NoError(t, errs[i])
		assert.Equal(t, want[j.prompt], got[i], "prompt %d block %d", j.prompt, j.bs)
	}
}

// TestSpeculativeSamplingDistribution is the seeded statistical test at T > 0: the distribution of the first
// DistTokens tokens (each position's marginal and the joint) under speculative sampling matches plain sampling
// (two-sample chi-square tests of homogeneity, cells with expected count < 5 pooled, fails when a p-value is
// below DistPValue = 1e-3 divided by the number of tests). The seeds are fixed, so the outcome is
// reproducible.
func TestSpeculativeSamplingDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test (~1 s) skipped in -short mode")
	}
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 6, Vocab: 64, EmbedScale: 4}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 7, Taps: []int{0, 3}, Mask: 61, BlockSize: 4}))
	dt, err := distributionTest(t.Context(), m, LosslessOptions{Prompts: [][]ports.Token{{5, 6}}, Temperature: 1.0,
		Seed: 11, Samples: 400, NoEOS: true}, 4)
	require.NoError(t, err)
	t.Logf("worst: chi2 %.2f, dof %d, p %.3g; joint %+v; positions %+v", dt.Chi2, dt.DoF, dt.PValue, dt.Joint, dt.Positions)
	assert.True(t, dt.Pass)
	for j, p := range dt.Positions {
		assert.Greater(t, p.DoF, 3, "position %d: the test must have some power (several populated cells)", j)
	}
}

// TestDistributionTestDetectsBias: the chi-square machinery rejects two clearly different samples and accepts
// two samples of one distribution.
func TestDistributionTestDetectsBias(t *testing.T) {
	var a, b, c []string
	for i := range 400 {
		a = append(a, []string{"x", "y", "z", "w"}[i%4])
		b = append(b, []string{"x", "x", "y", "z"}[i%4])
		c = append(c, []string{"x", "y", "z", "w"}[(i+1)%4])
	}
	chi, dof, _ := chiSquareHomogeneity(a, b)
	assert.Less(t, chiSquareSurvival(chi, dof), 1e-6)
	chi, dof, _ = chiSquareHomogeneity(a, c)
	assert.InDelta(t, 1, chiSquareSurvival(chi, dof), 1e-9)
}

func TestChiSquareSurvival(t *testing.T) {
	// Reference values: scipy.stats.chi2.sf, and the closed form for k = 5.
	for _, tc := range []struct {
		x    float64
		k    int
		want float64
	}{{3.841458820694124, 1, 0.05}, {18.307038053275146, 10, 0.05}, {1, 2, math.Exp(-0.5)}, {30, 5, 1.4748581038443052e-05}} {
		assert.InEpsilon(t, tc.want, chiSquareSurvival(tc.x, tc.k), 1e-3, "x %v k %d", tc.x, tc.k)
	}
}

func TestGenerateReproducibleWithSeed(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 8}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 9, Taps: []int{0, 2}, Mask: 60, BlockSize: 8}))
	o := GenerateOptions{Request: generation.Request{Prompt: []ports.Token{3, 4}, MaxTokens: 20, NoEOS: true, Sampling: ports.SamplingParams{Temperature: 0.9, TopP: 0.95}, Seed: 123}, Speculative: true}
	a, err := Generate(t.Context(), m, o)
	require.NoError(t, err)
	b, err := Generate(t.Context(), m, o)
	require.NoError(t, err)
	assert.Equal(t, a.Tokens, b.Tokens)
	assert.Equal(t, a.Rounds[0].Block, b.Rounds[0].Block)
	o.Seed = 124
	c, err := Generate(t.Context(), m, o)
	require.NoError(t, err)
	assert.Len(t, c.Tokens, 20)
}

// TestBadInputBeforeGeneration: incompatible drafters and bad requests fail at load or validation time with
// a clear error.
func TestBadInputBeforeGeneration(t *testing.T) {
	target := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 1})
	otherVocab := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 1, Taps: []int{0}, Mask: 10, Vocab: 128})
	noMask := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 1, Taps: []int{0}, Mask: 10})
	testmodel.EditConfig(t, noMask, func(cfg map[string]any) { delete(cfg["dflash_config"].(map[string]any), "mask_token_id") })
	truncated := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 1, Taps: []int{0}, Mask: 10})
	testmodel.Truncate(t, truncated, "model.safetensors")
	tapOutside := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 1, Taps: []int{0, 4}, Mask: 10})
	maskOutside := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 1, Taps: []int{0}, Mask: 64})

	for _, tc := range []struct {
		name, draft, want string
	}{
		{"other vocabulary", otherVocab, "vocab_size 128 differs from the target's 64"},
		{"missing mask id", noMask, "mask_token_id is missing"},
		{"truncated drafter file", truncated, "model.safetensors"},
		{"tap outside target", tapOutside, "tap layer 4 is outside the target"},
		{"mask outside vocabulary", maskOutside, "mask_token_id 64 is outside the target's vocabulary"},
		{"a target is not a drafter", target, "not a DFlash drafter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Draft: tc.draft}, zerolog.Nop(), nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	m := load(t, target, testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 1, Taps: []int{0}, Mask: 10, BlockSize: 8}))
	for _, tc := range []struct {
		name string
		o    GenerateOptions
		want string
	}{
		{"block size past the context", GenerateOptions{Request: generation.Request{Prompt: []ports.Token{1}, MaxTokens: 4, BlockSize: 1 << 24}, Speculative: true}, "block_size 16777216 exceeds this model's context length"},
		{"negative block size", GenerateOptions{Request: generation.Request{Prompt: []ports.Token{1}, MaxTokens: 4, BlockSize: -1}, Speculative: true}, "block_size -1 must be ≥ 1"},
		{"empty prompt", GenerateOptions{Request: generation.Request{MaxTokens: 4}}, "the prompt is empty"},
		{"token outside vocab", GenerateOptions{Request: generation.Request{Prompt: []ports.Token{64}, MaxTokens: 4}}, "outside this model's vocabulary of 64"},
		{"no budget", GenerateOptions{Request: generation.Request{Prompt: []ports.Token{1}}}, "max tokens 0"},
		{"budget past the context", GenerateOptions{Request: generation.Request{Prompt: []ports.Token{1, 2}, MaxTokens: 511}}, "max tokens 511 is too large"},
		{"prompt fills the context", GenerateOptions{Request: generation.Request{Prompt: make([]ports.Token, 512), MaxTokens: 1}}, "maximum context length is 512 tokens, and the prompt has 512 tokens"},
		{"bad temperature", GenerateOptions{Request: generation.Request{Prompt: []ports.Token{1}, MaxTokens: 4, Sampling: ports.SamplingParams{Temperature: -1}}}, "temperature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate(t.Context(), m, tc.o)
			require.ErrorIs(t, err, ErrBadInput)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := Lossless(t.Context(), m, LosslessOptions{Prompts: testPrompts, BlockSizes: []int{1 << 24}, MaxTokens: 4})
	require.ErrorIs(t, err, ErrBadInput)
	for _, tc := range []struct {
		name string
		o    LosslessOptions
		want string
	}{
		{"NaN temperature", LosslessOptions{Temperature: math.NaN()}, "temperature NaN"},
		{"temperature too high", LosslessOptions{Temperature: 1000}, "temperature 1000"},
		{"negative samples", LosslessOptions{Temperature: 1, Samples: -1}, "samples -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Prompts, tc.o.MaxTokens = testPrompts[:1], 4
			res, err := Lossless(t.Context(), m, tc.o)
			require.ErrorIs(t, err, ErrBadInput)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, res.Cases, "refused before any decoding")
		})
	}
}

func TestLoadModelsBackends(t *testing.T) {
	target := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 1, EOS: []int32{3, 7}})
	if mlx.Available() != nil {
		_, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Backend: "mlx"}, zerolog.Nop(), nil)
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorIs(t, err, models.ErrMLXUnavailable)
	}
	_, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Backend: "tpu"}, zerolog.Nop(), nil)
	require.ErrorContains(t, err, `unknown backend "tpu"`)
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Backend: "auto"}, zerolog.Nop(), nil)
	require.NoError(t, err)
	defer m.Close()
	assert.Equal(t, models.BackendCPU, m.Backend)
	assert.Equal(t, []ports.Token{3, 7}, m.EOS)
	assert.Nil(t, m.Drafter)
	assert.Nil(t, m.Tokenizer)
	// Kernel modes: fast is reported as cpu-fast; unknown modes and fast on mlx are refused before loading.
	mf, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Kernels: models.KernelsFast}, zerolog.Nop(), nil)
	require.NoError(t, err)
	defer mf.Close()
	assert.Equal(t, models.BackendCPUFast, mf.Backend)
	// auto is fast wherever the CPU runs the fast kernels in assembly (AVX2 or better), exact elsewhere.
	ma, err := models.LoadModels(t.Context(), models.ModelConfig{Model: target, Kernels: models.KernelsAuto}, zerolog.Nop(), nil)
	require.NoError(t, err)
	defer ma.Close()
	if kernel.FastForm() == "portable" {
		assert.Equal(t, models.BackendCPU, ma.Backend, "no AVX2: the exact kernels")
	} else {
		assert.Equal(t, models.BackendCPUFast, ma.Backend, "fast form %s", kernel.FastForm())
	}
	_, err = models.LoadModels(t.Context(), models.ModelConfig{Model: target, Kernels: "turbo"}, zerolog.Nop(), nil)
	require.ErrorContains(t, err, `unknown kernels "turbo"`)
	_, err = models.LoadModels(t.Context(), models.ModelConfig{Model: target, Backend: models.BackendMLX, Kernels: models.KernelsFast}, zerolog.Nop(), nil)
	require.ErrorContains(t, err, "kernels fast needs the cpu backend")
	assert.Equal(t, filepath.Base(target), m.Name)

	// No model named: the bundled default model, with a clear error when it is absent.
	t.Chdir(t.TempDir())
	_, err = models.LoadModels(t.Context(), models.ModelConfig{}, zerolog.Nop(), nil)
	require.ErrorContains(t, err, "bundled model "+models.DefaultTargetDir+" is absent")
}

func TestParsePromptsFile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []PromptInput
		err  string
	}{
		{in: "hello\n\nworld\r\n", want: []PromptInput{{Text: "hello"}, {Text: "world"}}},
		{in: `["a", [1,2], {"text":"b","chat":true}, {"tokens":[3]}]`,
			want: []PromptInput{{Text: "a"}, {Tokens: []ports.Token{1, 2}}, {Text: "b", Chat: true}, {Tokens: []ports.Token{3}}}},
		{in: `[[1.5]]`, err: "not a token id"},
		{in: `[[-1]]`, err: "not a token id"},
		{in: `[{"text":"a","tokens":[1]}]`, err: "exactly one"},
		{in: `[{"bogus":1}]`, err: "unknown field"},
		{in: `[]`, err: "no prompts"},
		{in: "  ", err: "empty"},
		{in: `[1]`, err: "want a string"},
	} {
		got, err := ParsePromptsFile([]byte(tc.in))
		if tc.err != "" {
			require.ErrorIs(t, err, ErrBadInput, tc.in)
			assert.Contains(t, err.Error(), tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func FuzzParsePromptsFile(f *testing.F) {
	for _, s := range []string{"a\nb", `["x",[1,2],{"text":"t"},{"tokens":[4]}]`, `[{"tokens":[1e10]}]`, "[", "[[]]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParsePromptsFile(data)
		if err != nil {
			require.ErrorIs(t, err, ErrBadInput)
			return
		}
		require.NotEmpty(t, ps)
		for _, p := range ps {
			require.True(t, (p.Text == "") != (p.Tokens == nil))
			for _, tok := range p.Tokens {
				require.GreaterOrEqual(t, tok, ports.Token(0))
			}
		}
	})
}

func FuzzParseTokenList(f *testing.F) {
	for _, s := range []string{"1,2,3", " 4 , 5", "", "-1", "99999999999", "1,,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := ParseTokenList(s)
		if err != nil {
			require.ErrorIs(t, err, ErrBadInput)
			return
		}
		require.NotEmpty(t, ids)
		for _, id := range ids {
			require.GreaterOrEqual(t, id, ports.Token(0))
		}
	})
}

// skewedTarget wraps a target so that multi-token forwards (verify blocks) report a different greedy token at
// their first row: a backend whose block and single-token numerics disagree. The first row is the one every
// verify round commits from (the first proposal is accepted or corrected there), so the skew shows up in the
// first speculative round whatever the drafter proposes; a skew at the last row would only show when a whole
// block is accepted, which a random drafter may never achieve.
type skewedTarget struct{ ports.Target }

type skewedSession struct{ ports.Session }

func (t skewedTarget) NewSession(ctx context.Context, taps []int) (ports.Session, error) {
	s, err := t.Target.NewSession(ctx, taps)
	return skewedSession{s}, err
}

func (s skewedSession) Forward(ctx context.Context, toks []ports.Token, o ports.ForwardOptions) (ports.ForwardResult, error) {
	fr, err := s.Session.Forward(ctx, toks, o)
	if err == nil && len(toks) > 1 && s.Len() > len(toks) && len(fr.Greedy) > 1 {
		fr.Greedy[0] = (fr.Greedy[0] + 1) % 64
	}
	return fr, err
}

func TestLosslessReportsFirstMismatch(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 41}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 42, Taps: []int{1}, Mask: 60, BlockSize: 4}))
	bad := *m
	bad.Target = skewedTarget{m.Target}
	res, err := Lossless(t.Context(), &bad, LosslessOptions{Prompts: testPrompts, MaxTokens: 24, NoEOS: true})
	require.ErrorIs(t, err, ErrCheckFailed)
	assert.False(t, res.Pass)
	require.NotNil(t, res.FirstMismatch)
	assert.Less(t, res.FirstMismatch.Prompt, len(testPrompts))
	assert.NotEqual(t, res.FirstMismatch.AR, res.FirstMismatch.Spec)
	assert.Contains(t, err.Error(), "differs")
	assert.Equal(t, 0, res.FirstMismatch.Prompt, "the skew shows on the first prompt")
}

// Bench has no zero-means-default: a 0 from any caller is refused, never silently measured as something else.
func TestBenchRefusesEmptyBudgets(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    BenchOptions
		want string
	}{
		{"zero tokens", BenchOptions{Prompts: testPrompts, Repeats: 1}, "--max-tokens 0"},
		{"zero repeats", BenchOptions{Prompts: testPrompts, MaxTokens: 4}, "--repeats 0"},
		{"negative warm-up", BenchOptions{Prompts: testPrompts, MaxTokens: 4, Repeats: 1, Warmup: -1}, "--warmup -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Bench(t.Context(), &models.Models{}, tc.o)
			require.ErrorIs(t, err, ErrBadInput)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestSeededGenerateIndependentOfBlockSize: under VerifyMatch a seeded verify generation gives plain
// sampling's tokens whatever the block size or the adaptive policy; the lossless use case checks exactly that
// at T > 0 and reports it in seeded_cases.
func TestSeededGenerateIndependentOfBlockSize(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 6, Vocab: 64, EmbedScale: 4}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 7, Taps: []int{0, 3}, Mask: 61, BlockSize: 8}))
	base := GenerateOptions{Request: generation.Request{Prompt: []ports.Token{5, 6}, MaxTokens: 24, NoEOS: true, Seed: 77, Sampling: ports.SamplingParams{Temperature: 0.7}, Verify: speculative.VerifyMatch}}
	plain, err := Generate(t.Context(), m, base)
	require.NoError(t, err)
	for _, bs := range []int{2, 3, 8} {
		for _, adaptive := range []bool{false, true} {
			o := base
			o.Speculative, o.BlockSize, o.Adaptive = true, bs, adaptive
			got, err := Generate(t.Context(), m, o)
			require.NoError(t, err)
			assert.Equal(t, plain.Tokens, got.Tokens, "block %d adaptive %v", bs, adaptive)
		}
	}

	res, err := Lossless(t.Context(), m, LosslessOptions{Prompts: testPrompts[:2], BlockSizes: []int{2, 8}, MaxTokens: 12,
		NoEOS: true, Temperature: 0.7, Seed: 3, Samples: 40, Verify: speculative.VerifyMatch})
	require.NoError(t, err)
	assert.True(t, res.Pass)
	assert.Equal(t, "match", res.Verify)
	require.Len(t, res.SeededCases, 2*2*2)
	accepted := false
	for _, c := range res.SeededCases {
		assert.True(t, c.Match, "%+v", c)
		accepted = accepted || c.Tau > 1
	}
	assert.True(t, accepted, "some seeded case must accept drafts, or the comparison exercises nothing")

	res, err = Lossless(t.Context(), m, LosslessOptions{Prompts: testPrompts[:1], BlockSizes: []int{2}, MaxTokens: 8,
		NoEOS: true, Temperature: 0.7, Seed: 3, Samples: 40, Verify: speculative.VerifyResidual})
	require.NoError(t, err)
	assert.Equal(t, "residual", res.Verify)
	assert.Empty(t, res.SeededCases, "residual sampling promises a distribution, not a seed's tokens")
}
