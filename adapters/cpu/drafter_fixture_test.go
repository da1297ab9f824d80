package cpu

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports"
)

// The drafter tests build tiny drafters of any shape and settings (tinyDraftArch, written by
// writeTinyDrafter) and bind them to a real tiny CPU target written by synth: a dense Qwen3 of hidden
// size synth.Hidden whose embedding and LM head the drafter borrows.

// draftTaps is a host tap matrix for feeding a draft session arbitrary context rows.
type draftTaps struct {
	data        []float32
	rows, width int
}

var (
	_ ports.Taps     = (*draftTaps)(nil)
	_ ports.HostTaps = (*draftTaps)(nil)
)

func (t *draftTaps) Rows() int { return t.rows }
func (t *draftTaps) Slice(n int) ports.Taps {
	return &draftTaps{data: t.data[:n*t.width], rows: n, width: t.width}
}
func (t *draftTaps) Detach() ports.Taps {
	return &draftTaps{data: slices.Clone(t.data), rows: t.rows, width: t.width}
}
func (t *draftTaps) Host() ([]float32, int, int, error) { return t.data, t.rows, t.width, nil }

// deviceOnlyTaps are taps that cannot be read on the host.
type deviceOnlyTaps struct{ rows int }

func (t deviceOnlyTaps) Rows() int              { return t.rows }
func (t deviceOnlyTaps) Slice(n int) ports.Taps { return deviceOnlyTaps{n} }
func (t deviceOnlyTaps) Detach() ports.Taps     { return t }

func draftRandVec(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

// tinyDraftArch is a tiny drafter shape for the tiny targets (hidden synth.Hidden, vocabulary 64, 4
// layers). In the tests' specs MaskToken −1 means "the config has no mask_token_id".
func tinyDraftArch() hfmodel.DrafterArch {
	return hfmodel.DrafterArch{HiddenSize: synth.Hidden, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 16,
		IntermediateSize: 48, RMSNormEps: 1e-6, RopeTheta: 10000, BlockSize: 8, TapLayers: []int{0, 2}, MaskToken: 60,
		VocabSize: 64, NumTargetLayers: 4}
}

// tinyTargetSpec is the dense tiny target the drafter tests bind to.
func tinyTargetSpec(seed uint64) synth.TargetSpec {
	return synth.TargetSpec{Family: "qwen3", Seed: seed, Vocab: 64}
}

// loadTinyTarget writes the target of spec and loads it with threads workers; it returns the target and its
// directory.
func loadTinyTarget(t testing.TB, spec synth.TargetSpec, threads int) (*Target, string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, synth.WriteTarget(dir, spec))
	tg, err := Load(t.Context(), dir, LoadOptions{Threads: threads})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	return tg, dir
}

// drafterShapes returns the tensor shapes of a in the authors' naming.
func drafterShapes(a hfmodel.DrafterArch) map[string][]int {
	H, d := a.HiddenSize, a.HeadDim
	shapes := map[string][]int{
		"fc.weight":          {H, len(a.TapLayers) * H},
		"hidden_norm.weight": {H},
		"norm.weight":        {H},
	}
	for i := range a.NumLayers {
		p := fmt.Sprintf("layers.%d.", i)
		shapes[p+"input_layernorm.weight"] = []int{H}
		shapes[p+"post_attention_layernorm.weight"] = []int{H}
		shapes[p+"self_attn.q_norm.weight"] = []int{d}
		shapes[p+"self_attn.k_norm.weight"] = []int{d}
		shapes[p+"self_attn.q_proj.weight"] = []int{a.NumHeads * d, H}
		shapes[p+"self_attn.k_proj.weight"] = []int{a.NumKVHeads * d, H}
		shapes[p+"self_attn.v_proj.weight"] = []int{a.NumKVHeads * d, H}
		shapes[p+"self_attn.o_proj.weight"] = []int{H, a.NumHeads * d}
		shapes[p+"mlp.gate_proj.weight"] = []int{a.IntermediateSize, H}
		shapes[p+"mlp.up_proj.weight"] = []int{a.IntermediateSize, H}
		shapes[p+"mlp.down_proj.weight"] = []int{H, a.IntermediateSize}
	}
	return shapes
}

// genDraftWeights returns random weights for a, keyed by canonical name.
func genDraftWeights(rng *rand.Rand, a hfmodel.DrafterArch) (map[string][]float32, map[string][]int) {
	shapes := drafterShapes(a)
	vals := map[string][]float32{}
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		sh := shapes[name]
		n := 1
		for _, x := range sh {
			n *= x
		}
		if len(sh) == 1 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(1 + 0.1*rng.NormFloat64())
			}
			vals[name] = v
		} else {
			vals[name] = draftRandVec(rng, n, 1/math.Sqrt(float64(sh[1])))
		}
	}
	return vals, shapes
}

// writeDraftWeights writes model.safetensors under dir: 1-D tensors in dtype, 2-D ones in dtype or, with
// spec, MLX affine-quantized (then vals is replaced by the dequantized values so a float copy can be
// compared).
func writeDraftWeights(t testing.TB, dir string, vals map[string][]float32, shapes map[string][]int, prefix string,
	dtype safetensors.DType, spec *quant.Spec) {
	t.Helper()
	var ts []safetensors.Tensor
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		sh, v := shapes[name], vals[name]
		if spec != nil && len(sh) == 2 {
			packed, sc, bi, err := quant.Pack(v, sh[0], sh[1], *spec)
			require.NoError(t, err)
			deq := make([]float32, len(v))
			require.NoError(t, quant.Dequantize(deq, packed, sc, bi, sh[0], sh[1], *spec))
			vals[name] = deq
			base := prefix + name[:len(name)-len(".weight")]
			wt, err := safetensors.FromUint32(base+".weight", []int{sh[0], sh[1] * spec.Bits / 32}, packed)
			require.NoError(t, err)
			st, err := safetensors.FromFloat32(base+".scales", safetensors.F32, []int{sh[0], sh[1] / spec.GroupSize}, sc)
			require.NoError(t, err)
			bt, err := safetensors.FromFloat32(base+".biases", safetensors.F32, []int{sh[0], sh[1] / spec.GroupSize}, bi)
			require.NoError(t, err)
			ts = append(ts, wt, st, bt)
			continue
		}
		tt, err := safetensors.FromFloat32(prefix+name, dtype, sh, v)
		require.NoError(t, err)
		ts = append(ts, tt)
	}
	require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, nil))
}

// writeTinyDrafter writes config.json (block_size at top level, or under dflash_config when nested) and
// model.safetensors with random weights; it returns the directory.
func writeTinyDrafter(t testing.TB, rng *rand.Rand, a hfmodel.DrafterArch, prefix string, nested bool, dtype safetensors.DType) string {
	t.Helper()
	dir := t.TempDir()
	vals, shapes := genDraftWeights(rng, a)
	writeDraftWeights(t, dir, vals, shapes, prefix, dtype, nil)
	writeDraftConfig(t, dir, a, nested)
	return dir
}

// writeDraftConfig writes a's config.json in the old (top-level block_size, rope_theta) or the nested
// layout. Sliding layers become layer_types + sliding_window; causality that differs from the authors'
// default (sliding layers causal, full ones not) becomes is_causal, which must then be one value for every
// layer; an embedding scale other than 1 becomes dflash_config.input_embedding_scale.
func writeDraftConfig(t testing.TB, dir string, a hfmodel.DrafterArch, nested bool) {
	t.Helper()
	dc := map[string]any{"target_layer_ids": a.TapLayers}
	if a.MaskToken >= 0 {
		dc["mask_token_id"] = a.MaskToken
	}
	cfg := map[string]any{
		"architectures": []string{"DFlashDraftModel"}, "model_type": "qwen3",
		"hidden_size": a.HiddenSize, "num_hidden_layers": a.NumLayers, "num_attention_heads": a.NumHeads,
		"num_key_value_heads": a.NumKVHeads, "head_dim": a.HeadDim, "intermediate_size": a.IntermediateSize,
		"rms_norm_eps": a.RMSNormEps, "max_position_embeddings": 4096, "vocab_size": a.VocabSize,
		"num_target_layers": a.NumTargetLayers, "tie_word_embeddings": false, "hidden_act": "silu",
		"attention_bias": false, "dflash_config": dc,
	}
	if nested {
		dc["block_size"] = a.BlockSize
		cfg["rope_parameters"] = map[string]any{"rope_theta": a.RopeTheta, "rope_type": "default"}
	} else {
		cfg["block_size"] = a.BlockSize
		cfg["rope_theta"] = a.RopeTheta
		cfg["rope_scaling"] = nil
	}
	window := 0
	if len(a.SlidingWindows) > 0 {
		require.Len(t, a.SlidingWindows, a.NumLayers)
		types := make([]string, a.NumLayers)
		for i, w := range a.SlidingWindows {
			types[i] = hfmodel.DrafterFullAttention
			if w > 0 {
				require.True(t, window == 0 || window == w, "one sliding window for every sliding layer")
				window = w
				types[i] = hfmodel.DrafterSlidingAttention
			}
		}
		cfg["layer_types"] = types
		cfg["sliding_window"] = window
	}
	if len(a.Causal) > 0 {
		require.Len(t, a.Causal, a.NumLayers)
		byDefault := true
		for i, c := range a.Causal {
			byDefault = byDefault && c == (len(a.SlidingWindows) > 0 && a.SlidingWindows[i] > 0)
		}
		if !byDefault {
			for _, c := range a.Causal {
				require.Equal(t, a.Causal[0], c, "is_causal is one value for every layer")
			}
			cfg["is_causal"] = a.Causal[0]
		}
	}
	if a.EmbedScale != 0 && a.EmbedScale != 1 {
		dc["input_embedding_scale"] = a.EmbedScale
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))
}

// editDraftConfig rewrites dir/config.json through edit.
func editDraftConfig(t *testing.T, dir string, edit func(map[string]any)) {
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

// rewriteDraftWeights replaces dir/model.safetensors by edit(its tensors).
func rewriteDraftWeights(t *testing.T, dir string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
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

// loadTinyDrafter loads the drafter in dir bound to target with opts; it is closed with the test.
func loadTinyDrafter(t testing.TB, dir string, target *Target, opts DrafterOptions) *Drafter {
	t.Helper()
	d, err := LoadDrafter(t.Context(), dir, target, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// newTinyDrafter writes a target and a drafter of architecture a (both from seed) and loads them, the target
// with threads workers. It returns the drafter and the drafter's and the target's directories.
func newTinyDrafter(t *testing.T, seed uint64, a hfmodel.DrafterArch, threads int, opts DrafterOptions) (*Drafter, string, string) {
	t.Helper()
	target, tdir := loadTinyTarget(t, tinyTargetSpec(seed), threads)
	rng := rand.New(rand.NewPCG(seed, 1))
	ddir := writeTinyDrafter(t, rng, a, "", false, safetensors.F32)
	return loadTinyDrafter(t, ddir, target, opts), ddir, tdir
}
