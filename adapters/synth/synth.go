// Package synth writes random synthetic checkpoints — a dense Qwen3 or hybrid Qwen3-Next target and a DFlash
// drafter for it — in the Hugging Face / DFlash authors' layouts: the models `higgs-verify synth` builds for
// benchmarks (Wide scales them up to hundreds of millions of parameters) and the tiny fixtures the backends'
// tests load. The weights are random (so drafts are mostly rejected); they exercise shapes, bookkeeping,
// numerics and speed, not acceptance quality.
package synth

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// Target dimensions at Wide 1 (every Linear input is a multiple of 32 so 32-group quantization applies).
// Wide w multiplies the hidden size, head dims and MLP width by w (for benchmarks on larger models).
const (
	Hidden = 64
	heads  = 4
	kvHead = 2
	headD  = 16
	inter  = 64
	linKH  = 2
	linVH  = 4
	linKD  = 16
	linVD  = 16
	convK  = 4
)

// dims are the scaled dimensions of one checkpoint.
type dims struct{ hidden, headD, inter, linKD, linVD int }

func scaled(w int) dims {
	if w <= 1 {
		return dims{hidden: Hidden, headD: headD, inter: inter, linKD: linKD, linVD: linVD}
	}
	return dims{hidden: Hidden * w, headD: headD * w, inter: 3 * inter * w, linKD: linKD * w, linVD: linVD * w}
}

// TargetSpec describes a tiny random target.
type TargetSpec struct {
	// Family is "qwen3" (dense) or "qwen3_next" (hybrid: Gated DeltaNet layers with a full-attention layer
	// every second layer).
	Family string
	Seed   uint64
	Layers int // default 4
	Vocab  int // default 64
	// Context is max_position_embeddings (default 512).
	Context int
	// EOS, when non-empty, is written to generation_config.json.
	EOS []int32
	// EmbedScale sharpens the logits (default 4).
	EmbedScale float32
	// Wide scales the dimensions (default 1: hidden 64); the drafter must use the same Wide.
	Wide int
	// BF16 stores float matrices as BF16; Quant stores every Linear (embedding included) MLX
	// affine-quantized and adds the quantization block to config.json. Norms and GDN vectors stay F32.
	BF16 bool
	// F16 stores float matrices as IEEE half precision instead (it wins over BF16).
	F16   bool
	Quant *quant.Spec
	// Symmetric makes the weights exactly representable in llama.cpp's formats (symmetric.go): quantized
	// groups get bias = −2^(bits−1)·scale with scales exact in f16 (Q8_0/Q4_0 map code for code), float
	// matrices values exact in both bf16 and f16. Quantized widths other than 4 and 8 are an error.
	Symmetric bool
}

// DrafterSpec describes a tiny random drafter for a target with hidden size Hidden.
type DrafterSpec struct {
	Seed      uint64
	Layers    int // default 2
	BlockSize int // default 16
	Taps      []int
	// NumTargetLayers is the informational training-time target depth (0: omitted).
	NumTargetLayers int
	Mask            int32
	Vocab           int // vocab_size in config.json (default 64)
	// Nested writes the newer layout (dflash_config.block_size, rope_parameters); otherwise the older one.
	Nested bool
	// Prefix is prepended to every tensor name ("" or "model.").
	Prefix string
	// Quant, when non-nil, stores every Linear MLX affine-quantized.
	Quant *quant.Spec
	// BF16 stores float weights as BF16; F16 as IEEE half precision (it wins over BF16).
	BF16, F16 bool
	// RopeTheta defaults to 10000.
	RopeTheta float64
	// Wide must equal the target's.
	Wide int
	// DFlash2 writes a DFlash2 drafter (DFlash2DraftModel): two-tap grouped dynamic convolutions over groups
	// of 16 channels around attention and the MLP, and a rank-16 candidate selector over 8 candidates.
	DFlash2 bool
}

// The DFlash2 settings WriteDrafter uses (DrafterSpec.DFlash2).
const (
	Drafter2ConvKernel = 2
	Drafter2ConvGroup  = 16
	Drafter2Rank       = 16
	Drafter2TopK       = 8
)

type writer struct {
	rng    *rand.Rand
	ts     []safetensors.Tensor
	prefix string
	quant  *quant.Spec
	dtype  safetensors.DType
	// symmetric: see TargetSpec.Symmetric.
	symmetric bool
	err       error
}

func (w *writer) mat(out, in int, scale float32) []float32 {
	v := make([]float32, out*in)
	s := scale * float32(1.5/math.Sqrt(float64(in)))
	for i := range v {
		v[i] = (w.rng.Float32()*2 - 1) * s
	}
	return v
}

func (w *writer) vec(n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + w.rng.Float32()*(hi-lo)
	}
	return v
}

func (w *writer) add(t safetensors.Tensor, err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
	w.ts = append(w.ts, t)
}

func (w *writer) raw(name string, shape []int, v []float32) {
	w.add(safetensors.FromFloat32(w.prefix+name, safetensors.F32, shape, v))
}

func (w *writer) linear(base string, out, in int, v []float32) {
	if w.symmetric && w.quant == nil {
		halfExact(v)
	}
	if w.quant != nil {
		pack := quant.Pack
		if w.symmetric {
			pack = packSymmetric
		}
		packed, sc, bi, err := pack(v, out, in, *w.quant)
		if err != nil {
			w.err = fmt.Errorf("%s: %w", base, err)
			return
		}
		w.add(safetensors.FromUint32(w.prefix+base+".weight", []int{out, in * w.quant.Bits / 32}, packed))
		w.add(safetensors.FromFloat32(w.prefix+base+".scales", safetensors.BF16, []int{out, in / w.quant.GroupSize}, sc))
		w.add(safetensors.FromFloat32(w.prefix+base+".biases", safetensors.BF16, []int{out, in / w.quant.GroupSize}, bi))
		return
	}
	w.add(safetensors.FromFloat32(w.prefix+base+".weight", w.dtype, []int{out, in}, v))
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func (s *TargetSpec) defaults() {
	if s.Layers == 0 {
		s.Layers = 4
	}
	if s.Vocab == 0 {
		s.Vocab = 64
	}
	if s.Context == 0 {
		s.Context = 512
	}
	if s.EmbedScale == 0 {
		s.EmbedScale = 4
	}
}

// LayerTypes returns the target's layer types.
func (s TargetSpec) LayerTypes() []string {
	s.defaults()
	out := make([]string, s.Layers)
	for i := range out {
		if s.Family == "qwen3" || (i+1)%2 == 0 {
			out[i] = "full_attention"
		} else {
			out[i] = "linear_attention"
		}
	}
	return out
}

// WriteTarget writes config.json, generation_config.json (when EOS is set) and model.safetensors into dir.
func WriteTarget(dir string, s TargetSpec) error {
	s.defaults()
	if s.Family != "qwen3" && s.Family != "qwen3_next" {
		return fmt.Errorf("synth: family %q (want qwen3 or qwen3_next)", s.Family)
	}
	hybrid := s.Family == "qwen3_next"
	dm := scaled(s.Wide)
	H, D, I := dm.hidden, dm.headD, dm.inter
	cfg := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": s.Family, "hidden_size": H,
		"intermediate_size": I, "num_hidden_layers": s.Layers, "num_attention_heads": heads,
		"num_key_value_heads": kvHead, "head_dim": D, "vocab_size": s.Vocab,
		"max_position_embeddings": s.Context, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
		"tie_word_embeddings": false,
	}
	if hybrid {
		cfg["architectures"] = []string{"Qwen3NextForCausalLM"}
		cfg["layer_types"] = s.LayerTypes()
		cfg["full_attention_interval"] = 2
		cfg["partial_rotary_factor"] = 0.5
		cfg["linear_num_key_heads"], cfg["linear_num_value_heads"] = linKH, linVH
		cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"] = dm.linKD, dm.linVD, convK
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	if s.Quant != nil {
		cfg["quantization"] = map[string]any{"bits": s.Quant.Bits, "group_size": s.Quant.GroupSize}
	}
	if len(s.EOS) > 0 {
		if err := writeJSON(filepath.Join(dir, "generation_config.json"), map[string]any{"eos_token_id": s.EOS}); err != nil {
			return err
		}
	}
	w := &writer{rng: rand.New(rand.NewPCG(s.Seed, 77)), prefix: "model.", dtype: safetensors.F32, quant: s.Quant, symmetric: s.Symmetric}
	switch {
	case s.F16:
		w.dtype = safetensors.F16
	case s.BF16:
		w.dtype = safetensors.BF16
	}
	norm := func(name string, n int) {
		// Qwen3-Next norms are zero-centred (applied as 1+w) in HF checkpoints; quantized (MLX-converted)
		// checkpoints store them with the 1 folded in.
		if hybrid && s.Quant != nil {
			w.raw(name, []int{n}, w.vec(n, 0.8, 1.2))
		} else if hybrid {
			w.raw(name, []int{n}, w.vec(n, -0.2, 0.2))
		} else {
			w.raw(name, []int{n}, w.vec(n, 0.8, 1.2))
		}
	}
	w.linear("embed_tokens", s.Vocab, H, w.mat(s.Vocab, H, s.EmbedScale))
	norm("norm.weight", H)
	C := 2*linKH*dm.linKD + linVH*dm.linVD
	Dv := linVH * dm.linVD
	for i, kind := range s.LayerTypes() {
		p := fmt.Sprintf("layers.%d.", i)
		norm(p+"input_layernorm.weight", H)
		norm(p+"post_attention_layernorm.weight", H)
		if kind == "full_attention" {
			qOut := heads * D
			if hybrid {
				qOut *= 2 // query and output gate, per head
			}
			w.linear(p+"self_attn.q_proj", qOut, H, w.mat(qOut, H, 1))
			w.linear(p+"self_attn.k_proj", kvHead*D, H, w.mat(kvHead*D, H, 1))
			w.linear(p+"self_attn.v_proj", kvHead*D, H, w.mat(kvHead*D, H, 1))
			w.linear(p+"self_attn.o_proj", H, heads*D, w.mat(H, heads*D, 1))
			norm(p+"self_attn.q_norm.weight", D)
			norm(p+"self_attn.k_norm.weight", D)
		} else {
			q := p + "linear_attn."
			w.linear(q+"in_proj_qkvz", C+Dv, H, w.mat(C+Dv, H, 1))
			w.linear(q+"in_proj_ba", 2*linVH, H, w.mat(2*linVH, H, 1))
			if s.Quant != nil {
				w.raw(q+"conv1d.weight", []int{C, convK, 1}, w.vec(C*convK, -0.6, 0.6)) // MLX layout
			} else {
				w.raw(q+"conv1d.weight", []int{C, 1, convK}, w.vec(C*convK, -0.6, 0.6))
			}
			w.raw(q+"A_log", []int{linVH}, w.vec(linVH, -1, 1.5))
			w.raw(q+"dt_bias", []int{linVH}, w.vec(linVH, -0.5, 1.5))
			w.raw(q+"norm.weight", []int{dm.linVD}, w.vec(dm.linVD, 0.8, 1.2))
			w.linear(q+"out_proj", H, Dv, w.mat(H, Dv, 1))
		}
		w.linear(p+"mlp.gate_proj", I, H, w.mat(I, H, 1))
		w.linear(p+"mlp.up_proj", I, H, w.mat(I, H, 1))
		w.linear(p+"mlp.down_proj", H, I, w.mat(H, I, 1))
	}
	w.prefix = ""
	w.linear("lm_head", s.Vocab, H, w.mat(s.Vocab, H, 1))
	if w.err != nil {
		return w.err
	}
	return safetensors.Write(filepath.Join(dir, "model.safetensors"), w.ts, nil)
}

// WriteDrafter writes a drafter's config.json and model.safetensors into dir.
func WriteDrafter(dir string, s DrafterSpec) error {
	if s.Layers == 0 {
		s.Layers = 2
	}
	if s.BlockSize == 0 {
		s.BlockSize = 16
	}
	if s.Vocab == 0 {
		s.Vocab = 64
	}
	if s.RopeTheta == 0 {
		s.RopeTheta = 10000
	}
	if len(s.Taps) == 0 {
		return fmt.Errorf("synth: a drafter needs tap layers")
	}
	dm := scaled(s.Wide)
	H, D, I := dm.hidden, dm.headD, dm.inter
	dc := map[string]any{"target_layer_ids": s.Taps, "mask_token_id": s.Mask}
	arch := "DFlashDraftModel"
	if s.DFlash2 {
		arch = "DFlash2DraftModel"
		dc["conv_kernel_size"], dc["conv_group_size"] = Drafter2ConvKernel, Drafter2ConvGroup
		dc["selector_rank"], dc["selector_top_k"] = Drafter2Rank, Drafter2TopK
	}
	cfg := map[string]any{
		"architectures": []string{arch}, "model_type": "qwen3", "hidden_size": H,
		"intermediate_size": I, "num_hidden_layers": s.Layers, "num_attention_heads": heads,
		"num_key_value_heads": kvHead, "head_dim": D, "vocab_size": s.Vocab, "rms_norm_eps": 1e-6,
		"max_position_embeddings": 4096, "tie_word_embeddings": false, "dflash_config": dc,
	}
	if s.NumTargetLayers > 0 {
		cfg["num_target_layers"] = s.NumTargetLayers
	}
	if s.Nested {
		dc["block_size"] = s.BlockSize
		cfg["rope_parameters"] = map[string]any{"rope_theta": s.RopeTheta, "rope_type": "default"}
	} else {
		cfg["block_size"] = s.BlockSize
		cfg["rope_theta"] = s.RopeTheta
		cfg["rope_scaling"] = nil
	}
	if s.Quant != nil {
		cfg["quantization"] = map[string]any{"bits": s.Quant.Bits, "group_size": s.Quant.GroupSize}
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	w := &writer{rng: rand.New(rand.NewPCG(s.Seed, 78)), prefix: s.Prefix, quant: s.Quant, dtype: safetensors.F32}
	switch {
	case s.F16:
		w.dtype = safetensors.F16
	case s.BF16:
		w.dtype = safetensors.BF16
	}
	norm := func(name string, n int) { w.raw(name, []int{n}, w.vec(n, 0.8, 1.2)) }
	w.linear("fc", H, len(s.Taps)*H, w.mat(H, len(s.Taps)*H, 1))
	norm("hidden_norm.weight", H)
	norm("norm.weight", H)
	for i := range s.Layers {
		p := fmt.Sprintf("layers.%d.", i)
		norm(p+"input_layernorm.weight", H)
		norm(p+"post_attention_layernorm.weight", H)
		w.linear(p+"self_attn.q_proj", heads*D, H, w.mat(heads*D, H, 1))
		w.linear(p+"self_attn.k_proj", kvHead*D, H, w.mat(kvHead*D, H, 1))
		w.linear(p+"self_attn.v_proj", kvHead*D, H, w.mat(kvHead*D, H, 1))
		w.linear(p+"self_attn.o_proj", H, heads*D, w.mat(H, heads*D, 1))
		norm(p+"self_attn.q_norm.weight", D)
		norm(p+"self_attn.k_norm.weight", D)
		w.linear(p+"mlp.gate_proj", I, H, w.mat(I, H, 1))
		w.linear(p+"mlp.up_proj", I, H, w.mat(I, H, 1))
		w.linear(p+"mlp.down_proj", H, I, w.mat(H, I, 1))
		if s.DFlash2 {
			for _, c := range []string{"attention_conv", "mlp_conv"} {
				w.conv2(p+c, H)
			}
		}
	}
	if s.DFlash2 {
		w.linear("candidate_selector.hidden_projection", Drafter2Rank, H, w.mat(Drafter2Rank, H, 1))
		for _, c := range []string{"predecessor_codebook", "successor_codebook"} {
			w.raw("candidate_selector."+c, []int{s.Vocab, Drafter2Rank}, w.vec(s.Vocab*Drafter2Rank, -0.5, 0.5))
		}
	}
	if w.err != nil {
		return w.err
	}
	return safetensors.Write(filepath.Join(dir, "model.safetensors"), w.ts, nil)
}

// conv2 writes one DFlash2 convolution at p: base kernels near the identity (tap 0 around 1, tap 1 small)
// and a small kernel projection, so the block stays close to a DFlash one and still depends on both taps.
func (w *writer) conv2(p string, H int) {
	K, G := Drafter2ConvKernel, H/Drafter2ConvGroup
	base := w.vec(2*K*H, -0.1, 0.1)
	for side := range 2 {
		for c := range H {
			base[side*K*H+c]++
		}
	}
	w.raw(p+".base_kernel", []int{2, K, H}, base)
	w.linear(p+".kernel_projection", 2*K*G, H, w.mat(2*K*G, H, 0.2))
}
