package testmodel

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// DrafterWeights are the logical weights of a DFlash drafter keyed by canonical tensor name (the authors'
// naming, no prefix), with their shapes.
type DrafterWeights struct {
	Values map[string][]float32
	Shapes map[string][]int
}

// DrafterStorage says how a drafter's weights are stored.
type DrafterStorage struct {
	// Prefix is prepended to every tensor name ("" or "model.").
	Prefix string
	// DType stores the float tensors (default F32).
	DType safetensors.DType
	// Quant, when non-nil, stores every 2-D tensor MLX affine-quantized with F32 scales and biases.
	Quant *quant.Spec
	// Nested writes config.json in the newer layout (dflash_config.block_size, rope_parameters) instead of
	// the older one (top-level block_size and rope_theta).
	Nested bool
	// CodebookSuffix stores DFlash2's selector codebooks as "….predecessor_codebook.weight" instead of the
	// published files' bare "….predecessor_codebook".
	CodebookSuffix bool
}

// DrafterShapes returns the tensor shapes of a drafter of architecture a, by canonical name.
func DrafterShapes(a hfmodel.DrafterArch) map[string][]int {
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
		if a.V2() {
			for _, c := range []string{"attention_conv", "mlp_conv"} {
				shapes[p+c+".base_kernel"] = []int{2, a.ConvKernel, H}
				shapes[p+c+".kernel_projection.weight"] = []int{2 * a.ConvKernel * (H / a.ConvGroup), H}
			}
		}
	}
	if a.V2() {
		shapes["candidate_selector.hidden_projection.weight"] = []int{a.SelectorRank, H}
		shapes["candidate_selector.predecessor_codebook"] = []int{a.VocabSize, a.SelectorRank}
		shapes["candidate_selector.successor_codebook"] = []int{a.VocabSize, a.SelectorRank}
	}
	return shapes
}

// NormalVec returns n normal draws from rng scaled by scale.
func NormalVec(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

// RandomDrafterWeights draws weights for a from rng in sorted name order: norms around 1, matrices normal
// with standard deviation 1/√in. DFlash2's base kernels are near the identity (tap 0 around 1, later taps
// around 0, both sides), its kernel projections small (0.2/√in), and its codebooks of standard deviation 1,
// so that the selector's pairwise term competes with the logits and the walk does not just follow them.
func RandomDrafterWeights(rng *rand.Rand, a hfmodel.DrafterArch) DrafterWeights {
	shapes := DrafterShapes(a)
	vals := map[string][]float32{}
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		sh := shapes[name]
		n := 1
		for _, x := range sh {
			n *= x
		}
		switch {
		case strings.HasSuffix(name, ".base_kernel"):
			v := NormalVec(rng, n, 0.1)
			k, h := sh[1], sh[2]
			for side := range 2 {
				for c := range h {
					v[side*k*h+c]++
				}
			}
			vals[name] = v
			continue
		case strings.HasSuffix(name, ".kernel_projection.weight"):
			vals[name] = NormalVec(rng, n, 0.2/math.Sqrt(float64(sh[1])))
			continue
		case strings.HasSuffix(name, "_codebook"):
			vals[name] = NormalVec(rng, n, 1)
			continue
		}
		if len(sh) == 1 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(1 + 0.1*rng.NormFloat64())
			}
			vals[name] = v
		} else {
			vals[name] = NormalVec(rng, n, 1/math.Sqrt(float64(sh[1])))
		}
	}
	return DrafterWeights{Values: vals, Shapes: shapes}
}

// Drafter draws a drafter of architecture a from rng, writes it with storage st into a fresh t.TempDir() and
// returns the directory.
func Drafter(t testing.TB, rng *rand.Rand, a hfmodel.DrafterArch, st DrafterStorage) string {
	t.Helper()
	dir := t.TempDir()
	WriteDrafterWeights(t, dir, RandomDrafterWeights(rng, a), st)
	WriteDrafterConfig(t, dir, a, st)
	return dir
}

// WriteDrafterWeights writes w as dir/model.safetensors stored as st says. With st.Quant, w.Values is
// updated in place to the dequantized values, so a float copy written from w afterwards is the quantized
// drafter's exact float reference.
func WriteDrafterWeights(t testing.TB, dir string, w DrafterWeights, st DrafterStorage) {
	t.Helper()
	dtype := st.DType
	if dtype == "" {
		dtype = safetensors.F32
	}
	var ts []safetensors.Tensor
	for _, name := range slices.Sorted(maps.Keys(w.Shapes)) {
		sh, v := w.Shapes[name], w.Values[name]
		stored := name
		if st.CodebookSuffix && strings.HasSuffix(name, "_codebook") {
			stored += ".weight"
		}
		if st.Quant != nil && len(sh) == 2 && strings.HasSuffix(name, ".weight") {
			spec := *st.Quant
			packed, sc, bi, err := quant.Pack(v, sh[0], sh[1], spec)
			require.NoError(t, err)
			deq := make([]float32, len(v))
			require.NoError(t, quant.Dequantize(deq, packed, sc, bi, sh[0], sh[1], spec))
			w.Values[name] = deq
			base := st.Prefix + name[:len(name)-len(".weight")]
			wt, err := safetensors.FromUint32(base+".weight", []int{sh[0], sh[1] * spec.Bits / 32}, packed)
			require.NoError(t, err)
			stt, err := safetensors.FromFloat32(base+".scales", safetensors.F32, []int{sh[0], sh[1] / spec.GroupSize}, sc)
			require.NoError(t, err)
			bt, err := safetensors.FromFloat32(base+".biases", safetensors.F32, []int{sh[0], sh[1] / spec.GroupSize}, bi)
			require.NoError(t, err)
			ts = append(ts, wt, stt, bt)
			continue
		}
		tt, err := safetensors.FromFloat32(st.Prefix+stored, dtype, sh, v)
		require.NoError(t, err)
		ts = append(ts, tt)
	}
	require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, nil))
}

// WriteDrafterConfig writes a's config.json in the layout st.Nested chooses (st's other fields do not
// matter; a quantized drafter's loader finds the quantization from the tensors). A negative a.MaskToken
// omits mask_token_id. Sliding layers become layer_types + sliding_window; causality that differs from the
// authors' default (sliding layers causal, full ones not) becomes is_causal, which must then be one value
// for every layer; an embedding scale other than 1 becomes dflash_config.input_embedding_scale, as do the
// logit transforms and, for a DFlash2 arch, its architecture name and four settings.
func WriteDrafterConfig(t testing.TB, dir string, a hfmodel.DrafterArch, st DrafterStorage) {
	t.Helper()
	dc := map[string]any{"target_layer_ids": a.TapLayers}
	if a.MaskToken >= 0 {
		dc["mask_token_id"] = a.MaskToken
	}
	arch := hfmodel.DrafterArchitecture
	if a.V2() {
		arch = hfmodel.Drafter2Architecture
		dc["conv_kernel_size"], dc["conv_group_size"] = a.ConvKernel, a.ConvGroup
		dc["selector_rank"], dc["selector_top_k"] = a.SelectorRank, a.SelectorTopK
	}
	if a.OutputMultiplier != 0 && a.OutputMultiplier != 1 {
		dc["output_multiplier"] = a.OutputMultiplier
	}
	if a.LogitSoftcap > 0 {
		dc["final_logit_softcapping"] = a.LogitSoftcap
	}
	cfg := map[string]any{
		"architectures": []string{arch}, "model_type": "qwen3",
		"hidden_size": a.HiddenSize, "num_hidden_layers": a.NumLayers, "num_attention_heads": a.NumHeads,
		"num_key_value_heads": a.NumKVHeads, "head_dim": a.HeadDim, "intermediate_size": a.IntermediateSize,
		"rms_norm_eps": a.RMSNormEps, "max_position_embeddings": 4096, "vocab_size": a.VocabSize,
		"num_target_layers": a.NumTargetLayers, "tie_word_embeddings": false, "hidden_act": "silu",
		"attention_bias": false, "dflash_config": dc,
	}
	if st.Nested {
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
