package dflash

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// fakeTarget is a table-driven stand-in for the target's embedding and LM head.
type fakeTarget struct {
	info  ports.ModelInfo
	embed []float32 // [V,H]
	head  []float32 // [V,H]
}

func newFakeTarget(rng *rand.Rand, vocab, hidden, layers int) *fakeTarget {
	ft := &fakeTarget{info: ports.ModelInfo{Name: "fake", VocabSize: vocab, HiddenSize: hidden, ContextLength: 4096}}
	for range layers {
		ft.info.LayerKinds = append(ft.info.LayerKinds, ports.LayerAttention)
	}
	ft.embed = randVec(rng, vocab*hidden, 1)
	ft.head = randVec(rng, vocab*hidden, 1)
	return ft
}

func (f *fakeTarget) Info() ports.ModelInfo { return f.info }

func (f *fakeTarget) EmbedTokens(dst []float32, toks []ports.Token) error {
	H := f.info.HiddenSize
	for i, t := range toks {
		if t < 0 || int(t) >= f.info.VocabSize {
			return fmt.Errorf("token %d out of range", t)
		}
		copy(dst[i*H:(i+1)*H], f.embed[int(t)*H:(int(t)+1)*H])
	}
	return nil
}

func (f *fakeTarget) LMHead(dst, hidden []float32, rows int) error {
	H, V := f.info.HiddenSize, f.info.VocabSize
	for r := range rows {
		for v := range V {
			var s float32
			for j := range H {
				s += hidden[r*H+j] * f.head[v*H+j]
			}
			dst[r*V+v] = s
		}
	}
	return nil
}

// floatTaps is a CPU tap matrix for tests.
type floatTaps struct {
	data        []float32
	rows, width int
}

func (t *floatTaps) Rows() int { return t.rows }
func (t *floatTaps) Slice(n int) ports.Taps {
	return &floatTaps{data: t.data[:n*t.width], rows: n, width: t.width}
}
func (t *floatTaps) Detach() ports.Taps {
	return &floatTaps{data: append([]float32(nil), t.data...), rows: t.rows, width: t.width}
}
func (t *floatTaps) Float32() ([]float32, int, int) { return t.data, t.rows, t.width }

func randVec(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

// testArch is a tiny drafter shape.
func testArch() Arch {
	return Arch{HiddenSize: 32, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 16, IntermediateSize: 48,
		RMSNormEps: 1e-6, RopeTheta: 10000, BlockSize: 8, TapLayers: []int{0, 2}, MaskToken: 60, HasMaskToken: true,
		VocabSize: 64, NumTargetLayers: 4}
}

// drafterShapes returns the tensor shapes of a in the authors' naming.
func drafterShapes(a Arch) map[string][]int {
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

// genWeights returns random weights for a, keyed by canonical name.
func genWeights(rng *rand.Rand, a Arch) (map[string][]float32, map[string][]int) {
	shapes := drafterShapes(a)
	vals := map[string][]float32{}
	for _, name := range sortedKeys(shapes) {
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
			vals[name] = randVec(rng, n, 1/math.Sqrt(float64(sh[1])))
		}
	}
	return vals, shapes
}

// writeWeights writes model.safetensors under dir: 1-D tensors in dtype, 2-D ones in dtype or, with spec,
// MLX affine-quantized (then vals is replaced by the dequantized values so a float copy can be compared).
func writeWeights(t testing.TB, dir string, vals map[string][]float32, shapes map[string][]int, prefix string,
	dtype safetensors.DType, spec *quant.Spec) {
	t.Helper()
	var ts []safetensors.Tensor
	for _, name := range sortedKeys(shapes) {
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

// writeDrafter writes config.json (block_size at top level, or under dflash_config when nested) and
// model.safetensors with random weights; it returns the directory.
func writeDrafter(t testing.TB, rng *rand.Rand, a Arch, prefix string, nested bool, dtype safetensors.DType) string {
	t.Helper()
	dir := t.TempDir()
	vals, shapes := genWeights(rng, a)
	writeWeights(t, dir, vals, shapes, prefix, dtype, nil)
	writeConfig(t, dir, a, nested)
	return dir
}

func writeConfig(t testing.TB, dir string, a Arch, nested bool) {
	t.Helper()
	dc := map[string]any{"target_layer_ids": a.TapLayers}
	if a.HasMaskToken {
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
	b, err := json.MarshalIndent(cfg, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
