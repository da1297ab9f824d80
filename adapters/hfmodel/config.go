// Package hfmodel reads Hugging Face model directories: config.json for the supported target families
// (qwen3, qwen3_next, qwen3_5, qwen3_5_moe) and DFlash drafters, generation_config.json, MLX quantization
// settings, canonical tensor names, and where a model lives (a local directory or the hub cache — never a
// download). It validates up front and reports every problem at once; anything it does not understand is
// refused by name rather than guessed (docs/model-math.md#configuration, #tensor-names).
package hfmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

var (
	// ErrInvalidConfig is wrapped by errors about malformed or inconsistent configs.
	ErrInvalidConfig = errors.New("invalid model config")
	// ErrUnsupported is wrapped by errors about valid settings higgs does not implement (unknown model_type,
	// rope scaling, non-affine quantization, ...). It wraps errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("unsupported model config: %w", errors.ErrUnsupported)
)

// Model types (config.json model_type) higgs supports as targets.
const (
	ModelQwen3     = "qwen3"
	ModelQwen3Next = "qwen3_next"
	ModelQwen35    = "qwen3_5"
	ModelQwen35MoE = "qwen3_5_moe"
)

// ConfigFile is the model configuration file name.
const ConfigFile = "config.json"

// TextConfig is the language-model part of a target's config.json, resolved and validated.
//
// Layer kinds use ports.LayerKind: ports.LayerAttention for "full_attention" layers (every qwen3 layer) and
// ports.LayerRecurrent for Gated DeltaNet "linear_attention" layers.
type TextConfig struct {
	// ModelType is one of the Model* constants; a nested text_config model_type (qwen3_5_text,
	// qwen3_5_moe_text) is reported as its wrapper's type.
	ModelType     string
	Architectures []string

	HiddenSize, IntermediateSize, NumHiddenLayers, NumAttentionHeads, NumKeyValueHeads, HeadDim int
	VocabSize, MaxPositionEmbeddings                                                            int

	RMSNormEps, RopeTheta float64
	// PartialRotaryFactor is the fraction of head_dim that is rotated: 1 for qwen3, 0.25 by default for the
	// hybrid families (from the top level, text_config or rope_parameters).
	PartialRotaryFactor float64
	// MRopeSection and MRopeInterleaved are Qwen3.5's multimodal RoPE settings, informational: for text-only
	// input all position streams are equal and M-RoPE reduces exactly to 1-D RoPE over RotaryDims.
	MRopeSection     []int
	MRopeInterleaved bool
	// RopeScaling is the RoPE scaling from rope_scaling or rope_parameters (zero: plain RoPE); types other than
	// linear and YaRN are refused.
	RopeScaling RopeScaling

	TieWordEmbeddings bool
	// AttentionBias is always false after parsing (true is refused); kept for completeness.
	AttentionBias bool
	// AttnOutputGate: full-attention q_proj carries a per-head gate (2·Hq·d rows). Always true for
	// qwen3_next, config-driven (default true) for qwen3_5*, false for qwen3.
	AttnOutputGate bool

	// LayerTypes has one entry per layer.
	LayerTypes []ports.LayerKind
	// FullAttentionInterval is the hybrid interval (default 4; 0 for qwen3).
	FullAttentionInterval int

	LinearNumKeyHeads, LinearNumValueHeads, LinearKeyHeadDim, LinearValueHeadDim, LinearConvKernelDim int

	NumExperts, NumExpertsPerTok, MoeIntermediateSize, SharedExpertIntermediateSize, DecoderSparseStep int
	NormTopKProb                                                                                       bool
	MLPOnlyLayers                                                                                      []int

	// Quantization is the MLX affine setting; nil when the checkpoint is not quantized.
	Quantization *Quantization
	// EOSTokenIDs is config.json's eos_token_id (an int or a list), possibly empty.
	EOSTokenIDs []int32
}

// Hybrid reports whether the model has Gated DeltaNet layers (qwen3_next and qwen3_5 families).
func (c *TextConfig) Hybrid() bool { return c.ModelType != ModelQwen3 }

// RotaryDims is int(head_dim·partial_rotary_factor), the number of leading head dims RoPE rotates.
func (c *TextConfig) RotaryDims() int { return int(float64(c.HeadDim) * c.PartialRotaryFactor) }

// IsMoELayer reports whether layer i uses the sparse MoE block (else a dense MLP of IntermediateSize).
// qwen3_5_moe: every layer when NumExperts > 0 (as mlx-lm builds it). qwen3_next: i ∉ mlp_only_layers,
// NumExperts > 0 and (i+1) % decoder_sparse_step == 0. qwen3 and qwen3_5: never.
func (c *TextConfig) IsMoELayer(i int) bool {
	if c.NumExperts <= 0 || i < 0 || i >= c.NumHiddenLayers {
		return false
	}
	switch c.ModelType {
	case ModelQwen35MoE:
		return true
	case ModelQwen3Next:
		return !slices.Contains(c.MLPOnlyLayers, i) && c.DecoderSparseStep > 0 && (i+1)%c.DecoderSparseStep == 0
	}
	return false
}

// HasDenseMLP reports whether any layer uses the dense MLP (so IntermediateSize matters).
func (c *TextConfig) HasDenseMLP() bool {
	for i := range c.NumHiddenLayers {
		if !c.IsMoELayer(i) {
			return true
		}
	}
	return false
}

// SeparateGDNProjections reports whether Gated DeltaNet layer i must keep in_proj_a and in_proj_b as two
// projections instead of fusing them into one [2·Hv, H] matmul. That is needed when the two modules are
// quantized differently (different bits or group size, or one quantized and the other not, as some mixed-bit
// Qwen3.5 MLX checkpoints do) — a fused quantized matrix has one spec — or when
// Quantization.ForceSeparateGDNProjections is set by the caller. qwen3_next stores them fused already
// (in_proj_ba) and always returns false, as do non-GDN layers.
func (c *TextConfig) SeparateGDNProjections(layer int) bool {
	if c.ModelType == ModelQwen3Next || c.ModelType == ModelQwen3 || c.Quantization == nil ||
		layer < 0 || layer >= len(c.LayerTypes) || c.LayerTypes[layer] != ports.LayerRecurrent {
		return false
	}
	if c.Quantization.ForceSeparateGDNProjections {
		return true
	}
	base := fmt.Sprintf("layers.%d.linear_attn.", layer)
	sa, qa := c.Quantization.For(base + "in_proj_a")
	sb, qb := c.Quantization.For(base + "in_proj_b")
	return qa != qb || (qa && sa != sb)
}

// LoadConfig reads dir/config.json with ParseConfig.
func LoadConfig(dir string) (*TextConfig, error) {
	return loadFile(dir, ConfigFile, "model config", ParseConfig)
}

// loadFile reads dir/name and parses it: a read error says what was being loaded, a parse error names the
// file.
func loadFile[T any](dir, name, what string, parse func([]byte) (T, error)) (T, error) {
	path := filepath.Join(dir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("load %s: %w", what, err)
	}
	v, err := parse(data)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ParseConfig parses and validates a target config.json. Keys are read from text_config first, then the top
// level. Every problem is reported (errors.Join); errors wrap ErrInvalidConfig or ErrUnsupported.
//
// Defaults follow transformers where a key is absent: head_dim = hidden/heads, num_key_value_heads = heads,
// rms_norm_eps 1e-6, rope_theta 10000, partial_rotary_factor 1 (qwen3) or 0.25, full_attention_interval 4,
// decoder_sparse_step 1, norm_topk_prob true, attn_output_gate true (qwen3_5*), tie_word_embeddings false.
func ParseConfig(data []byte) (*TextConfig, error) {
	top, err := parseObject(data)
	if err != nil {
		return nil, fmt.Errorf("%w: config.json: %v", ErrInvalidConfig, err)
	}
	r := &reader{scopes: []scope{{"", top}}}
	if v, ok := top["text_config"]; ok && !isNull(v) {
		tc, err := parseObject(v)
		if err != nil {
			return nil, fmt.Errorf("%w: text_config: %v", ErrInvalidConfig, err)
		}
		r.scopes = []scope{{"text_config", tc}, {"", top}}
	}
	c := &TextConfig{}
	c.Architectures = (&reader{scopes: []scope{{"", top}}}).strings("architectures")
	if slices.Contains(c.Architectures, DrafterArchitecture) {
		return nil, fmt.Errorf("%w: this is a DFlash drafter config (architectures %v), not a target model", ErrInvalidConfig, c.Architectures)
	}
	c.ModelType = resolveModelType(r, top)
	if c.ModelType == "" {
		return nil, errors.Join(r.errs...)
	}

	c.HiddenSize = r.int("hidden_size", 0)
	c.IntermediateSize = r.int("intermediate_size", 0)
	c.NumHiddenLayers = r.int("num_hidden_layers", 0)
	c.NumAttentionHeads = r.int("num_attention_heads", 0)
	c.NumKeyValueHeads = r.int("num_key_value_heads", c.NumAttentionHeads)
	defHead := 0
	if c.NumAttentionHeads > 0 {
		defHead = c.HiddenSize / c.NumAttentionHeads
	}
	c.HeadDim = r.int("head_dim", defHead)
	c.VocabSize = r.int("vocab_size", 0)
	c.MaxPositionEmbeddings = r.int("max_position_embeddings", 0)
	c.RMSNormEps = r.float("rms_norm_eps", 1e-6)
	c.EOSTokenIDs = r.tokenIDs("eos_token_id")

	c.TieWordEmbeddings = readTie(r, top)
	c.AttentionBias = r.bool("attention_bias", false)
	if c.AttentionBias {
		r.unsupported("attention_bias true (Qwen3-family attention has no bias)")
	}
	if act := r.str("hidden_act", "silu"); act != "silu" {
		r.unsupported("hidden_act %q (only silu)", act)
	}
	if r.bool("use_sliding_window", false) {
		r.unsupported("use_sliding_window true for a %s target", c.ModelType)
	}
	if v, where, ok := r.lookup("output_gate_type"); ok {
		var s string
		if err := json.Unmarshal(v, &s); err != nil || s != "sigmoid" {
			r.unsupported("%s %s (only the sigmoid output gate is implemented)", where, short(v))
		}
	}

	readRope(r, c)
	readLayers(r, c)
	readMoE(r, c)
	c.Quantization = readQuantization(r, top)

	if err := errors.Join(append(r.errs, c.validate()...)...); err != nil {
		return nil, err
	}
	return c, nil
}

// resolveModelType maps model_type (top level first: the wrapper names the family) to a Model* constant.
func resolveModelType(r *reader, top object) string {
	topType := (&reader{scopes: []scope{{"", top}}}).str("model_type", "")
	textType := ""
	if len(r.scopes) == 2 {
		textType = (&reader{scopes: r.scopes[:1]}).str("model_type", "")
	}
	norm := func(t string) string {
		switch t {
		case ModelQwen3, ModelQwen3Next, ModelQwen35, ModelQwen35MoE:
			return t
		case "qwen3_5_text":
			return ModelQwen35
		case "qwen3_5_moe_text":
			return ModelQwen35MoE
		}
		return ""
	}
	switch {
	case topType == "" && textType == "":
		r.addErr("model_type is missing")
		return ""
	case topType != "" && norm(topType) == "":
		r.unsupported("model_type %q (supported: qwen3, qwen3_next, qwen3_5, qwen3_5_moe)", topType)
		return ""
	case textType != "" && norm(textType) == "":
		r.unsupported("text_config.model_type %q (supported: qwen3_5_text, qwen3_5_moe_text)", textType)
		return ""
	case topType != "" && textType != "" && norm(topType) != norm(textType):
		r.addErr("model_type %q and text_config.model_type %q disagree", topType, textType)
		return ""
	case topType != "":
		return norm(topType)
	}
	return norm(textType)
}

// readTie uses the text_config value and checks it against a top-level one (they must agree).
func readTie(r *reader, top object) bool {
	v := r.bool("tie_word_embeddings", false)
	if len(r.scopes) == 2 {
		inner := &reader{scopes: r.scopes[:1]}
		outer := &reader{scopes: []scope{{"", top}}}
		if inner.has("tie_word_embeddings") && outer.has("tie_word_embeddings") {
			a, b := inner.bool("tie_word_embeddings", false), outer.bool("tie_word_embeddings", false)
			if a != b {
				r.addErr("tie_word_embeddings is %v in text_config but %v at the top level", a, b)
			}
		}
	}
	return v
}

func readRope(r *reader, c *TextConfig) {
	params, pwhere := r.obj("rope_parameters")
	pr := &reader{scopes: []scope{{pwhere, params}}}

	c.RopeTheta = ropeFloat(r, pr, pwhere, "rope_theta", 10000)

	def := 0.25
	if c.ModelType == ModelQwen3 {
		def = 1
	}
	c.PartialRotaryFactor = ropeFloat(r, pr, pwhere, "partial_rotary_factor", def)

	if sec, ok := pr.ints("mrope_section"); ok {
		c.MRopeSection = sec
	}
	c.MRopeInterleaved = pr.bool("mrope_interleaved", false)
	c.RopeScaling = readRopeScaling(r, pr, pwhere)
	r.errs = append(r.errs, pr.errs...)
}

// ropeFloat reads key from the top level and from rope_parameters (pr, named pwhere); a non-zero
// rope_parameters value wins and must agree with a non-zero top-level one. def applies only when neither
// place has the key, so an explicit 0 stays 0 and is rejected by validation.
func ropeFloat(r, pr *reader, pwhere, key string, def float64) float64 {
	v := r.float(key, 0)
	if p := pr.float(key, 0); p != 0 {
		if v != 0 && v != p {
			r.addErr("%s %v and %s.%s %v disagree", key, v, pwhere, key, p)
		}
		v = p
	}
	if v == 0 && !r.has(key) && !pr.has(key) {
		v = def
	}
	return v
}

// maxLayers bounds num_hidden_layers before anything is sized by it: real models have at most a few hundred,
// and a corrupt value must not make us allocate or loop over billions of layers.
const maxLayers = 4096

func readLayers(r *reader, c *TextConfig) {
	n := c.NumHiddenLayers
	if n > maxLayers {
		r.addErr("num_hidden_layers %d exceeds the sanity limit %d", n, maxLayers)
		c.NumHiddenLayers, n = 0, 0
	}
	types := r.strings("layer_types")
	if c.ModelType == ModelQwen3 {
		for i, t := range types {
			if t != "full_attention" {
				r.unsupported("layer_types[%d] %q for qwen3 (only full_attention)", i, t)
			}
		}
		if types != nil && len(types) != n {
			r.addErr("layer_types has %d entries for %d layers", len(types), n)
		}
		c.LayerTypes = make([]ports.LayerKind, max(n, 0))
		for i := range c.LayerTypes {
			c.LayerTypes[i] = ports.LayerAttention
		}
		return
	}

	explicitInterval := r.has("full_attention_interval")
	c.FullAttentionInterval = r.int("full_attention_interval", 4)
	if c.FullAttentionInterval <= 0 {
		r.addErr("full_attention_interval %d must be positive", c.FullAttentionInterval)
	}
	byInterval := func(i int) ports.LayerKind {
		if c.FullAttentionInterval > 0 && (i+1)%c.FullAttentionInterval == 0 {
			return ports.LayerAttention
		}
		return ports.LayerRecurrent
	}
	if types == nil {
		c.LayerTypes = make([]ports.LayerKind, max(n, 0))
		for i := range c.LayerTypes {
			c.LayerTypes[i] = byInterval(i)
		}
	} else {
		if len(types) != n {
			r.addErr("layer_types has %d entries for %d layers", len(types), n)
		}
		c.LayerTypes = make([]ports.LayerKind, len(types))
		var disagree []int
		for i, t := range types {
			switch t {
			case "full_attention":
				c.LayerTypes[i] = ports.LayerAttention
			case "linear_attention":
				c.LayerTypes[i] = ports.LayerRecurrent
			default:
				r.unsupported("layer_types[%d] %q (want linear_attention or full_attention)", i, t)
				continue
			}
			if explicitInterval && c.LayerTypes[i] != byInterval(i) {
				disagree = append(disagree, i)
			}
		}
		if len(disagree) > 0 {
			r.addErr("layer_types disagrees with full_attention_interval %d at layers %v", c.FullAttentionInterval, disagree)
		}
	}

	c.LinearNumKeyHeads = r.int("linear_num_key_heads", 0)
	c.LinearNumValueHeads = r.int("linear_num_value_heads", 0)
	c.LinearKeyHeadDim = r.int("linear_key_head_dim", 0)
	c.LinearValueHeadDim = r.int("linear_value_head_dim", 0)
	c.LinearConvKernelDim = r.int("linear_conv_kernel_dim", 0)

	c.AttnOutputGate = r.bool("attn_output_gate", true)
	if c.ModelType == ModelQwen3Next && !c.AttnOutputGate {
		r.unsupported("attn_output_gate false for qwen3_next (its attention is always gated)")
	}
}

func readMoE(r *reader, c *TextConfig) {
	c.NumExperts = r.int("num_experts", 0)
	c.NumExpertsPerTok = r.int("num_experts_per_tok", 0)
	c.MoeIntermediateSize = r.int("moe_intermediate_size", 0)
	c.SharedExpertIntermediateSize = r.int("shared_expert_intermediate_size", 0)
	c.DecoderSparseStep = r.int("decoder_sparse_step", 1)
	c.NormTopKProb = r.bool("norm_topk_prob", true)
	c.MLPOnlyLayers, _ = r.ints("mlp_only_layers")
	if c.NumExperts > 0 && c.ModelType == ModelQwen3 {
		r.unsupported("num_experts %d for qwen3 (use a dense qwen3 model; qwen3_moe is not supported)", c.NumExperts)
	}
	if c.ModelType == ModelQwen35MoE && c.NumExperts > 0 {
		// mlx-lm builds every layer sparse and ignores these keys; refuse configs that rely on them.
		if len(c.MLPOnlyLayers) > 0 {
			r.unsupported("mlp_only_layers %v for qwen3_5_moe (every layer is sparse)", c.MLPOnlyLayers)
		}
		if c.DecoderSparseStep != 1 {
			r.unsupported("decoder_sparse_step %d for qwen3_5_moe (every layer is sparse)", c.DecoderSparseStep)
		}
	}
	if c.ModelType == ModelQwen35 && c.NumExperts > 0 {
		r.addErr("num_experts %d for dense model_type qwen3_5 (MoE checkpoints are qwen3_5_moe)", c.NumExperts)
	}
}

// validate checks values and their consistency; it returns every problem.
func (c *TextConfig) validate() []error {
	var errs problems
	bad, positive := errs.bad, errs.positive
	positive("hidden_size", c.HiddenSize)
	positive("num_hidden_layers", c.NumHiddenLayers)
	positive("num_attention_heads", c.NumAttentionHeads)
	positive("num_key_value_heads", c.NumKeyValueHeads)
	positive("head_dim", c.HeadDim)
	positive("vocab_size", c.VocabSize)
	positive("max_position_embeddings", c.MaxPositionEmbeddings)
	errs.multiple("num_attention_heads", c.NumAttentionHeads, "num_key_value_heads", c.NumKeyValueHeads)
	if !(c.RMSNormEps > 0) {
		bad("rms_norm_eps must be positive (got %v)", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) {
		bad("rope_theta must be positive (got %v)", c.RopeTheta)
	}
	if !(c.PartialRotaryFactor > 0 && c.PartialRotaryFactor <= 1) {
		bad("partial_rotary_factor must be in (0, 1] (got %v)", c.PartialRotaryFactor)
	} else if rd := c.RotaryDims(); c.HeadDim > 0 && (rd <= 0 || rd%2 != 0) {
		bad("rotary dims int(head_dim %d · partial_rotary_factor %v) = %d must be positive and even", c.HeadDim, c.PartialRotaryFactor, rd)
	}
	if len(c.MRopeSection) > 0 {
		sum := 0
		for _, s := range c.MRopeSection {
			sum += s
		}
		if 2*sum != c.RotaryDims() {
			bad("mrope_section %v sums to %d, want rotary dims/2 = %d", c.MRopeSection, sum, c.RotaryDims()/2)
		}
	}
	if c.HasDenseMLP() {
		positive("intermediate_size", c.IntermediateSize)
	}
	for _, id := range c.EOSTokenIDs {
		if c.VocabSize > 0 && int(id) >= c.VocabSize {
			bad("eos_token_id %d is outside the vocabulary (%d)", id, c.VocabSize)
		}
	}
	if c.Hybrid() {
		positive("linear_num_key_heads", c.LinearNumKeyHeads)
		positive("linear_num_value_heads", c.LinearNumValueHeads)
		positive("linear_key_head_dim", c.LinearKeyHeadDim)
		positive("linear_value_head_dim", c.LinearValueHeadDim)
		positive("linear_conv_kernel_dim", c.LinearConvKernelDim)
		errs.multiple("linear_num_value_heads", c.LinearNumValueHeads, "linear_num_key_heads", c.LinearNumKeyHeads)
		if !slices.Contains(c.LayerTypes, ports.LayerRecurrent) && len(c.LayerTypes) > 0 {
			bad("no linear_attention layer in a %s model", c.ModelType)
		}
	}
	if c.NumExperts > 0 {
		if c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
			bad("num_experts_per_tok %d must be in [1, num_experts %d]", c.NumExpertsPerTok, c.NumExperts)
		}
		positive("moe_intermediate_size", c.MoeIntermediateSize)
		if c.SharedExpertIntermediateSize < 0 {
			bad("shared_expert_intermediate_size must not be negative (got %d)", c.SharedExpertIntermediateSize)
		}
		if c.DecoderSparseStep <= 0 {
			bad("decoder_sparse_step must be positive (got %d)", c.DecoderSparseStep)
		}
		for _, l := range c.MLPOnlyLayers {
			if l < 0 || l >= c.NumHiddenLayers {
				bad("mlp_only_layers entry %d is outside [0, %d)", l, c.NumHiddenLayers)
			}
		}
	}
	return errs
}
