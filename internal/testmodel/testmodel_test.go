package testmodel_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// tensors returns dir's tensors by stored name.
func tensors(t *testing.T, dir string) map[string]safetensors.Tensor {
	t.Helper()
	out := map[string]safetensors.Tensor{}
	for _, x := range testmodel.Tensors(t, dir) {
		out[x.Name] = x
	}
	return out
}

func floats(t *testing.T, x safetensors.Tensor) []float32 {
	t.Helper()
	v, err := x.Float32()
	require.NoError(t, err)
	return v
}

func readConfig(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// Every family and storage form writes a config the production resolver accepts, with the spec's shape, and
// tensors whose canonical names do not depend on the storage form.
func TestTargetResolves(t *testing.T) {
	q4 := &quant.Spec{Bits: 4, GroupSize: 32}
	for name, spec := range map[string]testmodel.TargetSpec{
		"qwen3 tied":            {Family: "qwen3", Seed: 1, Layers: 2, Tied: true},
		"qwen3 bf16 q8":         {Family: "qwen3", Seed: 2, Layers: 2, BF16: true, Quant: &quant.Spec{Bits: 8, GroupSize: 64}},
		"qwen3_next moe switch": {Family: "qwen3_next", Seed: 3, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: q4, MLPOnlyLayers: []int{1}},
		"qwen3_5 gated mlx":     {Family: "qwen3_5", Seed: 4, Layers: 3, OutputGate: true, MLXLayout: true, FullAttentionInterval: 3},
		"qwen3_5_moe fused":     {Family: "qwen3_5_moe", Seed: 5, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsFused, NormTopK: true, OutputGate: true},
		"qwen3_5 dequantized":   {Family: "qwen3_5", Seed: 6, Layers: 2, Quant: q4, StoreDequantized: true, Context: 40},
	} {
		t.Run(name, func(t *testing.T) {
			dir := testmodel.Target(t, spec)
			_, a, stop, err := hfmodel.LoadTarget(dir, 0)
			require.NoError(t, err)
			assert.Equal(t, testmodel.Hidden, a.Hidden)
			assert.Equal(t, testmodel.Vocab, a.Vocab)
			assert.Equal(t, spec.Layers, a.Layers)
			assert.Equal(t, []int32{testmodel.EOS}, stop)
			assert.Equal(t, spec.OutputGate || spec.Family == "qwen3_next", a.OutputGate && spec.Family != "qwen3")
			if spec.Context != 0 {
				assert.Equal(t, spec.Context, a.ContextLength)
			}
			_, quantized := readConfig(t, dir)["quantization"]
			assert.Equal(t, spec.Quant != nil && !spec.StoreDequantized, quantized)

			ts := tensors(t, dir)
			canonical := map[string]bool{}
			for n, x := range ts {
				c, keep := hfmodel.NormaliseName(n)
				require.True(t, keep, n)
				canonical[c] = true
				if quantized && c == "embed_tokens.weight" {
					assert.Equal(t, safetensors.U32, x.DType)
				}
			}
			assert.True(t, canonical["embed_tokens.weight"])
			assert.Equal(t, !spec.Tied, canonical["lm_head.weight"])
			kinds := spec.LayerTypes()
			for i, k := range kinds {
				want := "layers.%d.self_attn.q_proj.weight"
				if k == "linear_attention" {
					want = "layers.%d.linear_attn.out_proj.weight"
				}
				assert.True(t, canonical[fmt.Sprintf(want, i)], "layer %d (%s)", i, k)
			}
		})
	}
	t.Run("bad expert layout", func(t *testing.T) {
		ft := &failTB{TB: t}
		func() {
			defer func() { _ = recover() }()
			testmodel.WriteTarget(ft, t.TempDir(), testmodel.TargetSpec{Family: "qwen3", Layers: 1, ExpertLayout: "stacked"})
		}()
		assert.True(t, ft.failed)
	})
}

// failTB records a failure instead of failing the test (FailNow stops the helper by panicking).
type failTB struct {
	testing.TB
	failed bool
}

func (f *failTB) Errorf(string, ...any) { f.failed = true }
func (f *failTB) FailNow()              { f.failed = true; panic("FailNow") }

// The storage fields store one logical model: BF16 rounds the same matrices, the MLX layout folds the 1 into
// zero-centred hybrid norms and transposes the conv kernel, a copied head equals the embedding.
func TestTargetStorageFormsAgree(t *testing.T) {
	base := testmodel.TargetSpec{Family: "qwen3_5", Seed: 7, Layers: 2, OutputGate: true}
	hf := tensors(t, testmodel.Target(t, base))
	bf := base
	bf.BF16 = true
	bf16 := tensors(t, testmodel.Target(t, bf))
	mx := base
	mx.MLXLayout, mx.HeadCopy = true, true
	mlx := tensors(t, testmodel.Target(t, mx))

	emb := floats(t, hf["model.language_model.embed_tokens.weight"])
	for i, v := range floats(t, bf16["model.language_model.embed_tokens.weight"]) {
		require.InDelta(t, emb[i], v, 1e-2*math.Abs(float64(emb[i]))+1e-6)
	}
	assert.Equal(t, emb, floats(t, mlx["language_model.model.embed_tokens.weight"]))
	assert.Equal(t, emb, floats(t, mlx["language_model.lm_head.weight"]), "HeadCopy stores the embedding as the head")
	assert.NotEqual(t, emb, floats(t, hf["lm_head.weight"]))

	zc := floats(t, hf["model.language_model.norm.weight"])
	folded := floats(t, mlx["language_model.model.norm.weight"])
	for i := range zc {
		require.Equal(t, zc[i]+1, folded[i])
	}
	assert.Equal(t, []int{128, 1, 4}, hf["model.language_model.layers.0.linear_attn.conv1d.weight"].Shape)
	assert.Equal(t, []int{128, 4, 1}, mlx["language_model.model.layers.0.linear_attn.conv1d.weight"].Shape)
}

// A drafter config written from an architecture resolves back to that architecture.
func TestDrafterConfigRoundTrips(t *testing.T) {
	base := hfmodel.DrafterArch{HiddenSize: 64, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 16,
		IntermediateSize: 48, RMSNormEps: 1e-6, RopeTheta: 10000, BlockSize: 8, TapLayers: []int{0, 2}, MaskToken: 60,
		VocabSize: 64, NumTargetLayers: 4}
	info := ports.ModelInfo{HiddenSize: 64, VocabSize: 64, LayerKinds: make([]ports.LayerKind, 4)}
	for name, edit := range map[string]func(*hfmodel.DrafterArch){
		"plain":            func(*hfmodel.DrafterArch) {},
		"sliding":          func(a *hfmodel.DrafterArch) { a.SlidingWindows, a.Causal = []int{4, 0}, []bool{true, false} },
		"all causal":       func(a *hfmodel.DrafterArch) { a.SlidingWindows, a.Causal = []int{0, 0}, []bool{true, true} },
		"embedding x2.5":   func(a *hfmodel.DrafterArch) { a.EmbedScale = 2.5; a.RopeTheta = 1e6 },
		"logit transforms": func(a *hfmodel.DrafterArch) { a.OutputMultiplier, a.LogitSoftcap = 0.5, 20 },
		"dflash2": func(a *hfmodel.DrafterArch) {
			a.Generation, a.ConvKernel, a.ConvGroup, a.SelectorRank, a.SelectorTopK = 2, 3, 16, 8, 5
		},
	} {
		for _, nested := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s nested=%v", name, nested), func(t *testing.T) {
				a := base.Clone()
				edit(&a)
				dir := testmodel.Drafter(t, rand.New(rand.NewPCG(1, 1)), a, testmodel.DrafterStorage{Nested: nested})
				cfg, err := hfmodel.LoadDrafterConfig(dir)
				require.NoError(t, err)
				got, err := hfmodel.DrafterArchFrom(cfg, info)
				require.NoError(t, err)
				want := a
				if want.EmbedScale == 0 {
					want.EmbedScale = 1
				}
				if want.OutputMultiplier == 0 {
					want.OutputMultiplier = 1
				}
				if want.Generation == 0 {
					want.Generation = 1
				}
				want.MaxPositions = 4096
				// No layer_types means full, non-causal attention on every layer, however the parser spells it.
				for _, x := range []*hfmodel.DrafterArch{&want, &got} {
					if len(x.SlidingWindows) == 0 && len(x.Causal) == 0 {
						x.SlidingWindows, x.Causal = make([]int, x.NumLayers), make([]bool, x.NumLayers)
					}
				}
				assert.Equal(t, want, got)
			})
		}
	}
}

// Drafter weights are stored as drawn in every float dtype and prefix; quantized storage replaces the values
// by what the codes dequantize to.
func TestDrafterWeights(t *testing.T) {
	a := hfmodel.DrafterArch{HiddenSize: 64, NumLayers: 1, NumHeads: 4, NumKVHeads: 2, HeadDim: 16,
		IntermediateSize: 64, TapLayers: []int{0, 1}}
	w := testmodel.RandomDrafterWeights(rand.New(rand.NewPCG(2, 2)), a)
	require.Equal(t, testmodel.DrafterShapes(a), w.Shapes)
	again := testmodel.RandomDrafterWeights(rand.New(rand.NewPCG(2, 2)), a)
	require.Equal(t, w.Values, again.Values, "the same seed draws the same weights")

	dir := t.TempDir()
	testmodel.WriteDrafterWeights(t, dir, w, testmodel.DrafterStorage{Prefix: "model."})
	ts := tensors(t, dir)
	require.Len(t, ts, len(w.Shapes))
	for name, v := range w.Values {
		assert.Equal(t, v, floats(t, ts["model."+name]), name)
	}
	f16 := t.TempDir()
	testmodel.WriteDrafterWeights(t, f16, w, testmodel.DrafterStorage{DType: safetensors.F16})
	assert.Equal(t, safetensors.F16, tensors(t, f16)["fc.weight"].DType)

	orig := slices.Clone(w.Values["fc.weight"])
	q := t.TempDir()
	testmodel.WriteDrafterWeights(t, q, w, testmodel.DrafterStorage{Quant: &quant.Spec{Bits: 4, GroupSize: 32}})
	qt := tensors(t, q)
	assert.Equal(t, safetensors.U32, qt["fc.weight"].DType)
	assert.Contains(t, qt, "fc.scales")
	assert.Equal(t, safetensors.F32, qt["norm.weight"].DType, "1-D tensors stay float")
	deq := w.Values["fc.weight"]
	assert.NotEqual(t, orig, deq)
	for i := range orig {
		require.InDelta(t, orig[i], deq[i], 0.1)
	}
}

// Quantize re-stores the Linear weights of a float checkpoint and marks the config; the rest stays float.
func TestQuantize(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3, Layers: 2})
	before := tensors(t, dir)
	spec := quant.Spec{Bits: 4, GroupSize: 32}
	testmodel.Quantize(t, dir, spec)
	after := tensors(t, dir)
	assert.Equal(t, map[string]any{"bits": 4.0, "group_size": 32.0}, readConfig(t, dir)["quantization"])
	for _, n := range []string{"model.embed_tokens.weight", "lm_head.weight", "model.layers.0.linear_attn.in_proj_qkvz.weight"} {
		w, s, b := after[n], after[n[:len(n)-len("weight")]+"scales"], after[n[:len(n)-len("weight")]+"biases"]
		require.Equal(t, safetensors.U32, w.DType, n)
		rows, in := before[n].Shape[0], before[n].Shape[1]
		got := make([]float32, rows*in)
		codes := make([]uint32, len(w.Data)/4)
		for i := range codes {
			codes[i] = uint32(w.Data[4*i]) | uint32(w.Data[4*i+1])<<8 | uint32(w.Data[4*i+2])<<16 | uint32(w.Data[4*i+3])<<24
		}
		require.NoError(t, quant.Dequantize(got, codes, floats(t, s), floats(t, b), rows, in, spec))
		want := floats(t, before[n])
		for i := range want {
			require.InDelta(t, want[i], got[i], 0.15*math.Abs(float64(want[i]))+0.05, "%s[%d]", n, i)
		}
	}
	assert.Equal(t, floats(t, before["model.norm.weight"]), floats(t, after["model.norm.weight"]))
	assert.Equal(t, safetensors.F32, after["model.layers.0.linear_attn.conv1d.weight"].DType)
}

func TestEdits(t *testing.T) {
	src := testmodel.Target(t, testmodel.TargetSpec{Family: "qwen3", Seed: 4, Layers: 1})

	cp := testmodel.Copy(t, src, func(cfg map[string]any) { cfg["rope_theta"] = 5.0 })
	assert.Equal(t, 5.0, readConfig(t, cp)["rope_theta"])
	assert.Equal(t, 10000.0, readConfig(t, src)["rope_theta"], "the source is untouched")
	a, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(cp, "model.safetensors"))
	require.NoError(t, err)
	assert.Equal(t, a, b)

	testmodel.EditConfig(t, cp, func(cfg map[string]any) { delete(cfg, "rope_theta") })
	assert.NotContains(t, readConfig(t, cp), "rope_theta")

	testmodel.RewriteWeights(t, cp, func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[:1] })
	assert.Len(t, tensors(t, cp), 1)

	ts := testmodel.Tensors(t, src)
	with := testmodel.WithTensors(t, src, ts[1:])
	assert.Len(t, tensors(t, with), len(ts)-1)
	assert.Equal(t, readConfig(t, src), readConfig(t, with))

	info, err := os.Stat(filepath.Join(src, "model.safetensors"))
	require.NoError(t, err)
	testmodel.Truncate(t, with, "model.safetensors")
	_, err = safetensors.OpenFile(filepath.Join(with, "model.safetensors"))
	assert.Error(t, err)
	testmodel.Truncate(t, cp, "config.json")
	_, _, _, err = hfmodel.LoadTarget(cp, 0)
	assert.Error(t, err)
	assert.Positive(t, info.Size())

	files := testmodel.Files(t, map[string]string{"tokenizer_config.json": `{`, "chat_template.jinja": "x"})
	b, err = os.ReadFile(filepath.Join(files, "tokenizer_config.json"))
	require.NoError(t, err)
	assert.Equal(t, `{`, string(b))
}

// The hand-made tokenizer lands beside a checkpoint and has TokenizerVocab ids.
func TestTokenizer(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 5, Vocab: testmodel.TokenizerVocab})
	testmodel.Tokenizer(t, dir)
	tok, err := tokenizer.Load(dir)
	require.NoError(t, err)
	assert.Equal(t, testmodel.TokenizerVocab, tok.VocabSize())
	_, err = os.Stat(filepath.Join(dir, "tokenizer_config.json"))
	assert.NoError(t, err)
	assert.Error(t, testmodel.CopyTokenizer(filepath.Join(dir, "absent")))
}
