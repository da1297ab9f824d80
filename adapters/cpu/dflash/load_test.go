package dflash

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

func draftOnce(t *testing.T, d *Drafter, f []float32, rows int) ([]ports.Token, []float32) {
	t.Helper()
	s, err := d.NewSession(t.Context())
	require.NoError(t, err)
	defer s.Close()
	width := len(d.arch.TapLayers) * d.arch.HiddenSize
	p, err := s.Draft(t.Context(), 5, &floatTaps{data: f, rows: rows, width: width}, d.BlockSize())
	require.NoError(t, err)
	return p.Tokens, append([]float32(nil), s.(*Session).logits...)
}

// TestLoadLayoutsAndDTypes loads the same weights through both published config layouts, with and without
// the `model.` prefix, in f32, bf16 and f16: every variant drafts like the f32 original (bf16/f16 within
// rounding).
func TestLoadLayoutsAndDTypes(t *testing.T) {
	a := testArch()
	rng := rand.New(rand.NewPCG(21, 21))
	ft := newFakeTarget(rng, 64, a.HiddenSize, 4)
	vals, shapes := genWeights(rng, a)
	f := randVec(rng, 6*len(a.TapLayers)*a.HiddenSize, 1)

	mk := func(prefix string, nested bool, dt safetensors.DType) string {
		dir := t.TempDir()
		writeWeights(t, dir, vals, shapes, prefix, dt, nil)
		writeConfig(t, dir, a, nested)
		return dir
	}
	base, err := Load(t.Context(), mk("", false, safetensors.F32), ft, Options{Threads: 2})
	require.NoError(t, err)
	defer base.Close()
	wantTok, wantLogits := draftOnce(t, base, f, 6)
	assert.Equal(t, a.TapLayers, base.TapLayers())
	assert.Equal(t, a.BlockSize, base.BlockSize())

	for _, tc := range []struct {
		name   string
		prefix string
		nested bool
		dt     safetensors.DType
		tol    float64
	}{
		{"nested-f32", "", true, safetensors.F32, 0},
		{"prefix-f32", "model.", false, safetensors.F32, 0},
		{"bf16", "", false, safetensors.BF16, 0.3},
		{"f16-prefix-nested", "model.", true, safetensors.F16, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Load(t.Context(), mk(tc.prefix, tc.nested, tc.dt), ft, Options{Threads: 1})
			require.NoError(t, err)
			defer d.Close()
			tok, logits := draftOnce(t, d, f, 6)
			if tc.tol == 0 {
				assert.Equal(t, wantTok, tok)
				assert.Equal(t, wantLogits, logits)
				return
			}
			var maxErr float64
			for i := range logits {
				maxErr = max(maxErr, math.Abs(float64(logits[i]-wantLogits[i])))
			}
			assert.Less(t, maxErr, tc.tol)
		})
	}
}

// TestLoadQuantized loads MLX affine-quantized drafter weights and compares them with a float drafter holding
// the dequantized values.
func TestLoadQuantized(t *testing.T) {
	a := testArch()
	a.IntermediateSize = 64 // every input width must be a whole number of groups
	rng := rand.New(rand.NewPCG(22, 22))
	ft := newFakeTarget(rng, 64, a.HiddenSize, 4)
	for _, spec := range []quant.Spec{{Bits: 4, GroupSize: 32}, {Bits: 8, GroupSize: 32}, {Bits: 3, GroupSize: 32}} {
		t.Run(spec.String(), func(t *testing.T) {
			vals, shapes := genWeights(rng, a)
			qdir := t.TempDir()
			writeWeights(t, qdir, vals, shapes, "model.", safetensors.F32, &spec) // vals now dequantized
			writeConfig(t, qdir, a, false)
			fdir := t.TempDir()
			writeWeights(t, fdir, vals, shapes, "", safetensors.F32, nil)
			writeConfig(t, fdir, a, false)
			qd, err := Load(t.Context(), qdir, ft, Options{})
			require.NoError(t, err)
			defer qd.Close()
			fd, err := Load(t.Context(), fdir, ft, Options{})
			require.NoError(t, err)
			defer fd.Close()
			f := randVec(rng, 5*len(a.TapLayers)*a.HiddenSize, 1)
			_, ql := draftOnce(t, qd, f, 5)
			_, fl := draftOnce(t, fd, f, 5)
			for i := range ql {
				assert.InDelta(t, fl[i], ql[i], 1e-3*(1+math.Abs(float64(fl[i]))))
			}
		})
	}
}

func TestLoadRefusesBadDrafters(t *testing.T) {
	good := testArch()
	rng := rand.New(rand.NewPCG(23, 23))
	ft := newFakeTarget(rng, 64, good.HiddenSize, 4)

	for _, tc := range []struct {
		name   string
		arch   func(*Arch)
		target func() Target
		edit   func(*testing.T, string)
		want   string
	}{
		{name: "hidden size differs", target: func() Target { return newFakeTarget(rng, 64, 48, 4) }, want: "hidden_size 32 differs from the target's 48"},
		{name: "tap outside target", arch: func(a *Arch) { a.TapLayers = []int{0, 4} }, want: "tap layer 4 is outside the target"},
		{name: "mask outside vocab", arch: func(a *Arch) { a.MaskToken = 64 }, want: "mask_token_id 64 is outside the target's vocabulary"},
		{name: "missing mask id", arch: func(a *Arch) { a.HasMaskToken = false }, want: "mask_token_id is missing"},
		{name: "other vocabulary", target: func() Target { return newFakeTarget(rng, 80, 32, 4) }, want: "drafter vocab_size 64 differs from the target's 80"},
		{name: "no tap ids", arch: func(a *Arch) { a.TapLayers = nil }, want: "refusing to guess the tap layers"},
		{name: "dynamic rope", edit: func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "dynamic", "factor": 4.0} })
		}, want: "dynamic"},
		{name: "truncated weights", edit: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, b[:len(b)-100], 0o644))
		}, want: "model.safetensors"},
		{name: "missing tensor", edit: func(t *testing.T, dir string) {
			rewrite(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[1:] })
		}, want: "tensor not found"},
		{name: "unexpected tensor", edit: func(t *testing.T, dir string) {
			rewrite(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				x, err := safetensors.FromFloat32("embed_tokens.weight", safetensors.F32, []int{2, 2}, []float32{1, 2, 3, 4})
				require.NoError(t, err)
				return append(ts, x)
			})
		}, want: "unexpected tensors for a DFlash drafter: embed_tokens.weight"},
		{name: "wrong shape", edit: func(t *testing.T, dir string) {
			rewrite(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == "fc.weight" {
						x, err := safetensors.FromFloat32("fc.weight", safetensors.F32, []int{32, 32}, make([]float32, 32*32))
						require.NoError(t, err)
						ts[i] = x
					}
				}
				return ts
			})
		}, want: `"fc.weight"`},
		{name: "negative output multiplier", edit: func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["output_multiplier"] = -1.0 })
		}, want: "output_multiplier -1"},
		{name: "dflash-2 drafter", edit: func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["dflash_config"].(map[string]any)["conv_kernel_size"] = 4 })
		}, want: "DFlash-2 drafters"},
		{name: "bad embedding scale", edit: func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["dflash_config"].(map[string]any)["input_embedding_scale"] = "x" })
		}, want: "input_embedding_scale"},
		{name: "block size 1", edit: func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["block_size"] = 1 })
		}, want: "block_size 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := testArch()
			if tc.arch != nil {
				tc.arch(&a)
			}
			dir := writeDrafter(t, rng, a, "", false, safetensors.F32)
			if tc.edit != nil {
				tc.edit(t, dir)
			}
			var target Target = ft
			if tc.target != nil {
				target = tc.target()
			}
			d, err := Load(t.Context(), dir, target, Options{})
			require.Error(t, err)
			assert.Nil(t, d)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// rewrite replaces dir/model.safetensors by edit(its tensors).
func rewrite(t *testing.T, dir string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	p := filepath.Join(dir, "model.safetensors")
	st, err := safetensors.OpenFile(p)
	require.NoError(t, err)
	var ts []safetensors.Tensor
	for _, n := range st.Names() {
		x, err := st.Tensor(n)
		require.NoError(t, err)
		c := *x
		c.Data = append([]byte(nil), x.Data...)
		ts = append(ts, c)
	}
	require.NoError(t, st.Close())
	require.NoError(t, safetensors.Write(p, edit(ts), nil))
}

// TestTapPolicy: explicit ids that disagree with num_target_layers are accepted; without ids the drafter is
// refused unless derivation is allowed, and then the ids follow the round-half-to-even formula.
// editConfig rewrites dir/config.json through edit.
func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))
}

// TestLoadYaRN: a YaRN drafter (some Qwen3.6 drafters use it) loads and its RoPE takes effect: factor 1 drafts
// like plain RoPE, factor 8 over a 64-position original context does not.
func TestLoadYaRN(t *testing.T) {
	a := testArch()
	rng := rand.New(rand.NewPCG(23, 23))
	ft := newFakeTarget(rng, 64, a.HiddenSize, 4)
	dir := writeDrafter(t, rng, a, "", false, safetensors.F32)
	f := randVec(rng, 6*len(a.TapLayers)*a.HiddenSize, 1)
	logits := func(scaling map[string]any) []float32 {
		editConfig(t, dir, func(m map[string]any) {
			m["rope_scaling"] = scaling
			m["max_position_embeddings"] = 64
		})
		d, err := Load(t.Context(), dir, ft, Options{})
		require.NoError(t, err)
		_, l := draftOnce(t, d, f, 6)
		return l
	}
	plain := logits(nil)
	same := logits(map[string]any{"rope_type": "yarn", "factor": 1.0})
	scaled := logits(map[string]any{"rope_type": "yarn", "factor": 8.0})
	require.Len(t, same, len(plain))
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

func TestTapPolicy(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 24))
	a := testArch()
	a.NumTargetLayers = 41 // informational, disagrees with the 4-layer target
	ft := newFakeTarget(rng, 64, a.HiddenSize, 4)
	d, err := Load(t.Context(), writeDrafter(t, rng, a, "", false, safetensors.F32), ft, Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{0, 2}, d.TapLayers())
	require.NoError(t, d.Close())

	// Derived: 2 drafter layers over a 9-layer target: round(1 + i·5/1) = [1, 6].
	b := testArch()
	b.TapLayers = nil
	b.NumTargetLayers = 0
	ft9 := newFakeTarget(rng, 64, b.HiddenSize, 9)
	dir := writeDrafterShaped(t, rng, b, 2)
	_, err = Load(t.Context(), dir, ft9, Options{})
	require.ErrorContains(t, err, "refusing to guess")
	d, err = Load(t.Context(), dir, ft9, Options{AllowDerivedTapLayers: true})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 6}, d.TapLayers())
	require.NoError(t, d.Close())
}

// writeDrafterShaped writes a drafter without tap ids whose fc expects nTaps taps.
func writeDrafterShaped(t *testing.T, rng *rand.Rand, a Arch, nTaps int) string {
	shapeArch := a
	shapeArch.TapLayers = make([]int, nTaps)
	dir := t.TempDir()
	vals, shapes := genWeights(rng, shapeArch)
	writeWeights(t, dir, vals, shapes, "", safetensors.F32, nil)
	writeConfig(t, dir, a, false)
	return dir
}

func TestDraftRejectsBadCalls(t *testing.T) {
	a := testArch()
	d, _, _ := newTestDrafter(t, 31, a, 1)
	s, err := d.NewSession(t.Context())
	require.NoError(t, err)
	width := len(a.TapLayers) * a.HiddenSize
	_, err = s.Draft(t.Context(), 1, nil, a.BlockSize+1)
	assert.ErrorContains(t, err, "block size 9 outside 1..8")
	_, err = s.Draft(t.Context(), 64, nil, 4)
	assert.ErrorContains(t, err, "outside the vocabulary")
	_, err = s.Draft(t.Context(), 1, &floatTaps{data: make([]float32, 10), rows: 1, width: 10}, 4)
	assert.ErrorContains(t, err, "wide")
	p, err := s.Draft(t.Context(), 1, &floatTaps{data: make([]float32, width), rows: 1, width: width}, 1)
	require.NoError(t, err)
	assert.Empty(t, p.Tokens)
	assert.Equal(t, 1, s.Len())
	assert.Error(t, s.Crop(2))
	require.NoError(t, s.Close())
	_, err = s.Draft(t.Context(), 1, nil, 2)
	assert.Error(t, err)
}

// TestLoadExtras: the newer DFlash settings are honoured.
func TestLoadExtras(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 25))
	a := testArch()
	ft := newFakeTarget(rng, 64, a.HiddenSize, 4)
	dir := writeDrafter(t, rng, a, "", true, safetensors.F32)
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	m["dflash_config"].(map[string]any)["input_embedding_scale"] = 1.5
	m["is_causal"] = true
	m["output_multiplier"] = 2.0
	m["final_logit_softcapping"] = 30.0
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))
	d, err := Load(t.Context(), dir, ft, Options{})
	require.NoError(t, err)
	defer d.Close()
	got := d.Arch()
	assert.Equal(t, 1.5, got.EmbedScale)
	assert.Equal(t, []bool{true, true}, got.Causal)
}
