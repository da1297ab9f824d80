package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// draftOnce drafts the trained block after rows context rows f and returns the proposals and the logits.
func draftOnce(t *testing.T, d *Drafter, f []float32, rows int) ([]ports.Token, []float32) {
	t.Helper()
	s, err := d.NewSession(t.Context())
	require.NoError(t, err)
	defer s.Close()
	width := len(d.TapLayers()) * d.Arch().HiddenSize
	p, err := s.Draft(t.Context(), 5, &draftTaps{data: f, rows: rows, width: width}, d.BlockSize())
	require.NoError(t, err)
	return p.Tokens, append([]float32(nil), s.(*DraftSession).logits...)
}

// TestLoadDrafterLayoutsAndDTypes loads the same weights through both published config layouts, with and
// without the `model.` prefix, in f32, bf16 and f16: every variant drafts like the f32 original (bf16/f16
// within rounding), also when bound to the same target loaded with another worker count.
func TestLoadDrafterLayoutsAndDTypes(t *testing.T) {
	a := tinyDraftArch()
	rng := rand.New(rand.NewPCG(21, 21))
	target, _ := loadTinyTarget(t, tinyTargetSpec(21), 2)
	target1, _ := loadTinyTarget(t, tinyTargetSpec(21), 1)
	w := testmodel.RandomDrafterWeights(rng, a)
	f := testmodel.NormalVec(rng, 6*len(a.TapLayers)*a.HiddenSize, 1)

	mk := func(prefix string, nested bool, dt safetensors.DType) string {
		dir := t.TempDir()
		testmodel.WriteDrafterWeights(t, dir, w, testmodel.DrafterStorage{Prefix: prefix, DType: dt})
		testmodel.WriteDrafterConfig(t, dir, a, testmodel.DrafterStorage{Nested: nested})
		return dir
	}
	base := loadTinyDrafter(t, mk("", false, safetensors.F32), target, DrafterOptions{})
	wantTok, wantLogits := draftOnce(t, base, f, 6)
	assert.Equal(t, a.TapLayers, base.TapLayers())
	assert.Equal(t, a.BlockSize, base.BlockSize())
	assert.Equal(t, a.MaskToken, base.MaskToken())

	for _, tc := range []struct {
		name   string
		prefix string
		nested bool
		dt     safetensors.DType
		// tol bounds the logits' error relative to the largest f32 logit (0: bit-identical).
		tol float64
	}{
		{"nested-f32", "", true, safetensors.F32, 0},
		{"prefix-f32", "model.", false, safetensors.F32, 0},
		{"bf16", "", false, safetensors.BF16, 0.018},
		{"f16-prefix-nested", "model.", true, safetensors.F16, 0.003},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := loadTinyDrafter(t, mk(tc.prefix, tc.nested, tc.dt), target1, DrafterOptions{})
			tok, logits := draftOnce(t, d, f, 6)
			if tc.tol == 0 {
				assert.Equal(t, wantTok, tok)
				assert.Equal(t, wantLogits, logits)
				return
			}
			require.Len(t, logits, len(wantLogits))
			var maxErr, scale float64
			for i := range logits {
				maxErr = max(maxErr, math.Abs(float64(logits[i]-wantLogits[i])))
				scale = max(scale, math.Abs(float64(wantLogits[i])))
			}
			assert.Less(t, maxErr, tc.tol*scale, "largest logit %g", scale)
		})
	}
}

// TestLoadDrafterQuantized loads MLX affine-quantized drafter weights and compares them with a float drafter
// holding the dequantized values.
func TestLoadDrafterQuantized(t *testing.T) {
	a := tinyDraftArch()
	a.IntermediateSize = 64 // every input width must be a whole number of groups
	rng := rand.New(rand.NewPCG(22, 22))
	target, _ := loadTinyTarget(t, tinyTargetSpec(22), 2)
	for _, spec := range []quant.Spec{{Bits: 4, GroupSize: 32}, {Bits: 8, GroupSize: 32}, {Bits: 3, GroupSize: 32}} {
		t.Run(spec.String(), func(t *testing.T) {
			w := testmodel.RandomDrafterWeights(rng, a)
			qdir := t.TempDir()
			testmodel.WriteDrafterWeights(t, qdir, w, testmodel.DrafterStorage{Prefix: "model.", Quant: &spec}) // w now dequantized
			testmodel.WriteDrafterConfig(t, qdir, a, testmodel.DrafterStorage{})
			fdir := t.TempDir()
			testmodel.WriteDrafterWeights(t, fdir, w, testmodel.DrafterStorage{})
			testmodel.WriteDrafterConfig(t, fdir, a, testmodel.DrafterStorage{})
			qd := loadTinyDrafter(t, qdir, target, DrafterOptions{})
			fd := loadTinyDrafter(t, fdir, target, DrafterOptions{})
			f := testmodel.NormalVec(rng, 5*len(a.TapLayers)*a.HiddenSize, 1)
			_, ql := draftOnce(t, qd, f, 5)
			_, fl := draftOnce(t, fd, f, 5)
			require.Len(t, ql, len(fl))
			for i := range ql {
				assert.InDelta(t, fl[i], ql[i], 1e-3*(1+math.Abs(float64(fl[i]))))
			}
		})
	}
}

func TestLoadDrafterRefusesBadDrafters(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 23))
	target, _ := loadTinyTarget(t, tinyTargetSpec(23), 1)
	wide, _ := loadTinyTarget(t, synth.TargetSpec{Family: "qwen3", Seed: 23, Vocab: 64, Wide: 2}, 1)
	vocab80, _ := loadTinyTarget(t, synth.TargetSpec{Family: "qwen3", Seed: 23, Vocab: 80}, 1)

	for _, tc := range []struct {
		name   string
		arch   func(*hfmodel.DrafterArch)
		target *Target // nil: the tiny target
		none   bool    // bind to no target at all
		edit   func(*testing.T, string)
		want   string
	}{
		{name: "no target", none: true, want: "cpu drafter: no target"},
		{name: "hidden size differs", target: wide, want: "hidden_size 64 differs from the target's 128"},
		{name: "tap outside target", arch: func(a *hfmodel.DrafterArch) { a.TapLayers = []int{0, 4} }, want: "tap layer 4 is outside the target"},
		{name: "mask outside vocab", arch: func(a *hfmodel.DrafterArch) { a.MaskToken = 64 }, want: "mask_token_id 64 is outside the target's vocabulary"},
		{name: "missing mask id", arch: func(a *hfmodel.DrafterArch) { a.MaskToken = -1 }, want: "mask_token_id is missing"},
		{name: "other vocabulary", target: vocab80, want: "drafter vocab_size 64 differs from the target's 80"},
		{name: "no tap ids", arch: func(a *hfmodel.DrafterArch) { a.TapLayers = nil }, want: "refusing to guess the tap layers"},
		{name: "dynamic rope", edit: func(t *testing.T, dir string) {
			testmodel.EditConfig(t, dir, func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "dynamic", "factor": 4.0} })
		}, want: "dynamic"},
		{name: "truncated weights", edit: func(t *testing.T, dir string) {
			testmodel.Truncate(t, dir, "model.safetensors")
		}, want: "model.safetensors"},
		{name: "missing tensor", edit: func(t *testing.T, dir string) {
			testmodel.RewriteWeights(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[1:] })
		}, want: "tensor not found"},
		{name: "unexpected tensor", edit: func(t *testing.T, dir string) {
			testmodel.RewriteWeights(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				x, err := safetensors.FromFloat32("embed_tokens.weight", safetensors.F32, []int{2, 2}, []float32{1, 2, 3, 4})
				require.NoError(t, err)
				return append(ts, x)
			})
		}, want: "a DFlash drafter: unexpected tensors in checkpoint (1): [embed_tokens.weight]"},
		{name: "wrong shape", edit: func(t *testing.T, dir string) {
			testmodel.RewriteWeights(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == "fc.weight" {
						x, err := safetensors.FromFloat32("fc.weight", safetensors.F32, []int{64, 64}, make([]float32, 64*64))
						require.NoError(t, err)
						ts[i] = x
					}
				}
				return ts
			})
		}, want: `"fc.weight"`},
		{name: "zero output multiplier", edit: func(t *testing.T, dir string) {
			testmodel.EditConfig(t, dir, func(m map[string]any) { m["output_multiplier"] = 0.0 })
		}, want: "output_multiplier 0"},
		{name: "DFlash2 key on a DFlash drafter", edit: func(t *testing.T, dir string) {
			testmodel.EditConfig(t, dir, func(m map[string]any) { m["dflash_config"].(map[string]any)["conv_kernel_size"] = 4 })
		}, want: "conv_kernel_size is a DFlash2 setting"},
		{name: "bad embedding scale", edit: func(t *testing.T, dir string) {
			testmodel.EditConfig(t, dir, func(m map[string]any) { m["dflash_config"].(map[string]any)["input_embedding_scale"] = "x" })
		}, want: "input_embedding_scale"},
		{name: "block size 1", edit: func(t *testing.T, dir string) {
			testmodel.EditConfig(t, dir, func(m map[string]any) { m["block_size"] = 1 })
		}, want: "block_size 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tinyDraftArch()
			if tc.arch != nil {
				tc.arch(&a)
			}
			dir := testmodel.Drafter(t, rng, a, testmodel.DrafterStorage{})
			if tc.edit != nil {
				tc.edit(t, dir)
			}
			tg := target
			switch {
			case tc.none:
				tg = nil
			case tc.target != nil:
				tg = tc.target
			}
			d, err := LoadDrafter(t.Context(), dir, tg, DrafterOptions{})
			require.Error(t, err)
			assert.Nil(t, d)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestLoadDrafterYaRN: a YaRN drafter (some Qwen3.6 drafters use it) loads and its RoPE takes effect: factor
// 1 drafts like plain RoPE, factor 8 over a 64-position original context does not.
func TestLoadDrafterYaRN(t *testing.T) {
	a := tinyDraftArch()
	rng := rand.New(rand.NewPCG(23, 23))
	target, _ := loadTinyTarget(t, tinyTargetSpec(23), 2)
	dir := testmodel.Drafter(t, rng, a, testmodel.DrafterStorage{})
	f := testmodel.NormalVec(rng, 6*len(a.TapLayers)*a.HiddenSize, 1)
	logits := func(scaling map[string]any) []float32 {
		testmodel.EditConfig(t, dir, func(m map[string]any) {
			m["rope_scaling"] = scaling
			m["max_position_embeddings"] = 64
		})
		d := loadTinyDrafter(t, dir, target, DrafterOptions{})
		_, l := draftOnce(t, d, f, 6)
		return l
	}
	plain := logits(nil)
	same := logits(map[string]any{"rope_type": "yarn", "factor": 1.0})
	scaled := logits(map[string]any{"rope_type": "yarn", "factor": 8.0})
	require.Len(t, same, len(plain))
	require.Len(t, scaled, len(plain))
	maxDiff := func(x, y []float32) float64 {
		m := 0.0
		for i := range x {
			m = max(m, math.Abs(float64(x[i]-y[i])))
		}
		return m
	}
	assert.Less(t, maxDiff(plain, same), 1e-5, "YaRN with factor 1 is plain RoPE")
	assert.Greater(t, maxDiff(plain, scaled), 1e-3, "YaRN factor 8 changes the drafter's logits")
}

// TestDrafterTapPolicy: explicit ids that disagree with num_target_layers are accepted; without ids the
// drafter is refused unless derivation is allowed, and then the ids follow the round-half-to-even formula;
// DrafterOptions.TapLayers overrides the config.
func TestDrafterTapPolicy(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 24))
	a := tinyDraftArch()
	a.NumTargetLayers = 41 // informational, disagrees with the 4-layer target
	target, _ := loadTinyTarget(t, tinyTargetSpec(24), 1)
	d := loadTinyDrafter(t, testmodel.Drafter(t, rng, a, testmodel.DrafterStorage{}), target, DrafterOptions{})
	assert.Equal(t, []int{0, 2}, d.TapLayers())
	require.NoError(t, d.Close())

	// Derived: 2 drafter layers over a 9-layer target: round(1 + i·5/1) = [1, 6].
	b := tinyDraftArch()
	b.TapLayers = nil
	b.NumTargetLayers = 0
	target9, _ := loadTinyTarget(t, synth.TargetSpec{Family: "qwen3", Seed: 24, Vocab: 64, Layers: 9}, 1)
	dir := writeDrafterWithTapWidth(t, rng, b, 2)
	_, err := LoadDrafter(t.Context(), dir, target9, DrafterOptions{})
	require.ErrorContains(t, err, "refusing to guess")
	d = loadTinyDrafter(t, dir, target9, DrafterOptions{AllowDerivedTapLayers: true})
	assert.Equal(t, []int{1, 6}, d.TapLayers())
	require.NoError(t, d.Close())

	// Explicit ids from the caller win over (missing) config ids.
	d = loadTinyDrafter(t, dir, target9, DrafterOptions{TapLayers: []int{8, 3}})
	assert.Equal(t, []int{8, 3}, d.TapLayers())
	require.NoError(t, d.Close())
}

// writeDrafterWithTapWidth writes a drafter a (possibly without tap ids) whose fc expects nTaps taps.
func writeDrafterWithTapWidth(t *testing.T, rng *rand.Rand, a hfmodel.DrafterArch, nTaps int) string {
	shapeArch := a
	shapeArch.TapLayers = make([]int, nTaps)
	dir := t.TempDir()
	w := testmodel.RandomDrafterWeights(rng, shapeArch)
	testmodel.WriteDrafterWeights(t, dir, w, testmodel.DrafterStorage{})
	testmodel.WriteDrafterConfig(t, dir, a, testmodel.DrafterStorage{})
	return dir
}

func TestDraftRejectsBadCalls(t *testing.T) {
	a := tinyDraftArch()
	d, _, _ := newTinyDrafter(t, 31, a, 1, DrafterOptions{})
	s, err := d.NewSession(t.Context())
	require.NoError(t, err)
	width := len(a.TapLayers) * a.HiddenSize
	ctxLen := d.t.Info().ContextLength
	_, err = s.Draft(t.Context(), 1, nil, ctxLen+1)
	assert.ErrorContains(t, err, fmt.Sprintf("cpu drafter: block size %d at position 0 passes the context length %d", ctxLen+1, ctxLen))
	_, err = s.Draft(t.Context(), 1, nil, 0)
	assert.ErrorContains(t, err, "cpu drafter: block size 0 must be ≥ 1")
	_, err = s.Draft(t.Context(), 64, nil, 4)
	assert.ErrorContains(t, err, "cpu drafter: anchor token 64 outside the vocabulary of 64")
	_, err = s.Draft(t.Context(), -1, nil, 4)
	assert.ErrorContains(t, err, "outside the vocabulary")
	_, err = s.Draft(t.Context(), 1, &draftTaps{data: make([]float32, 10), rows: 1, width: 10}, 4)
	assert.ErrorContains(t, err, "wide")
	_, err = s.Draft(t.Context(), 1, &draftTaps{data: make([]float32, width), rows: 2, width: width}, 4)
	assert.ErrorContains(t, err, "values for 2 rows")
	_, err = s.Draft(t.Context(), 1, deviceOnlyTaps{rows: 1}, 4)
	assert.ErrorContains(t, err, "cannot be read on the host")
	assert.Equal(t, 0, s.Len(), "refused calls change nothing")
	p, err := s.Draft(t.Context(), 1, &draftTaps{data: make([]float32, width), rows: 1, width: width}, 1)
	require.NoError(t, err)
	assert.Empty(t, p.Tokens)
	assert.Equal(t, 1, s.Len())
	assert.Error(t, s.Crop(2))
	assert.Error(t, s.Crop(-1))
	require.NoError(t, s.Close())
	_, err = s.Draft(t.Context(), 1, nil, 2)
	assert.ErrorContains(t, err, "session is closed")
	assert.ErrorContains(t, s.Crop(0), "session is closed")
}

// TestLoadDrafterExtras: the newer DFlash settings are honoured.
func TestLoadDrafterExtras(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 25))
	a := tinyDraftArch()
	target, _ := loadTinyTarget(t, tinyTargetSpec(25), 1)
	dir := testmodel.Drafter(t, rng, a, testmodel.DrafterStorage{Nested: true})
	testmodel.EditConfig(t, dir, func(m map[string]any) {
		m["dflash_config"].(map[string]any)["input_embedding_scale"] = 1.5
		m["is_causal"] = true
		m["output_multiplier"] = 2.0
		m["final_logit_softcapping"] = 30.0
	})
	d := loadTinyDrafter(t, dir, target, DrafterOptions{})
	got := d.Arch()
	assert.Equal(t, 1.5, got.EmbedScale)
	assert.Equal(t, []bool{true, true}, got.Causal)
	assert.Equal(t, 2.0, got.OutputMultiplier)
	assert.Equal(t, 30.0, got.LogitSoftcap)
}
