package hfmodel

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// The architectures entries of the two DFlash drafter generations: DFlash (v1) and DFlash2 (grouped dynamic
// convolutions around every sublayer and a candidate selector after the head, docs/model-math.md#dflash2).
const (
	DrafterArchitecture  = "DFlashDraftModel"
	Drafter2Architecture = "DFlash2DraftModel"
)

// ErrNoTapLayers is wrapped when a drafter config gives no target_layer_ids and deriving them was not
// allowed (docs/model-math.md#tap-layers: the fallback formula is wrong for most published checkpoints).
var ErrNoTapLayers = errors.New("drafter config has no target_layer_ids")

// Drafter layer types (DrafterConfig.LayerTypes).
const (
	DrafterFullAttention    = "full_attention"
	DrafterSlidingAttention = "sliding_attention"
)

// DrafterConfig is a DFlash drafter's config.json, resolved and validated. The drafter is a plain Qwen3
// attention stack; it has no embedding or lm_head of its own (the target's are used).
type DrafterConfig struct {
	HiddenSize, IntermediateSize, NumHiddenLayers, NumAttentionHeads, NumKeyValueHeads, HeadDim int
	VocabSize, MaxPositionEmbeddings                                                            int
	RMSNormEps, RopeTheta                                                                       float64
	// RopeType is "default", RopeLinear or RopeYaRN (other types are refused with ErrUnsupported), and
	// RopeScaling its parameters (zero for "default"). Some Qwen3.6 drafters use YaRN
	// (docs/model-math.md#drafter-layer).
	RopeType    string
	RopeScaling RopeScaling

	// BlockSize is the number of tokens per draft block including the anchor (top-level block_size or
	// dflash_config.block_size).
	BlockSize int
	// NumTargetLayers is the training-time target layer count (informational, 0 when absent; may disagree with
	// the real target, see docs/model-math.md#tap-layers).
	NumTargetLayers int
	// TargetLayerIDs are the tapped target layers in order (dflash_config.target_layer_ids, or top-level);
	// empty when the config gives none — see ResolveTapLayers.
	TargetLayerIDs []int
	// MaskTokenID is the mask token fed for the not-yet-drafted positions (required).
	MaskTokenID int32
	// LayerTypes has one DrafterFullAttention / DrafterSlidingAttention entry per drafter layer (all full when
	// the config has no layer_types).
	LayerTypes []string
	// SlidingWindow is the window of sliding layers (0 when no layer slides).
	SlidingWindow int

	Quantization *Quantization

	// EmbedScale multiplies the noise block's embeddings (input_embedding_scale; 1 when absent).
	EmbedScale float64
	// IsCausal, when non-nil, overrides every layer's causality (is_causal).
	IsCausal *bool

	// Generation is 1 (DFlashDraftModel) or 2 (DFlash2DraftModel).
	Generation int
	// DFlash2 only (zero for v1): the convolution's taps (conv_kernel_size) and channels per group
	// (conv_group_size), the selector's codebook rank (selector_rank) and candidates per position
	// (selector_top_k).
	ConvKernelSize, ConvGroupSize, SelectorRank, SelectorTopK int
	// OutputMultiplier scales the drafter's logits (output_multiplier; 1 when absent) and FinalLogitSoftcap,
	// when > 0, then caps them as c·tanh(logit/c) (final_logit_softcapping; 0 when absent): the reference's
	// compute_logits, for both generations.
	OutputMultiplier, FinalLogitSoftcap float64

	// Dialect lists where this config spelled its DFlash settings (e.g. "dflash_config.block_size",
	// "rope_parameters", "layer_types + sliding_window"): what Info reports as the dialect.
	Dialect []string

	// AllowDerivedTapLayers, set by the caller (never by parsing), lets ResolveTapLayers fall back to the
	// reference formula when the config has no target_layer_ids.
	AllowDerivedTapLayers bool
}

// LoadDrafterConfig reads dir/config.json with ParseDrafterConfig.
func LoadDrafterConfig(dir string) (*DrafterConfig, error) {
	return loadFile(dir, ConfigFile, "drafter config", ParseDrafterConfig)
}

// ParseDrafterConfig parses and validates a DFlash drafter config.json (old layout: top-level block_size and
// rope_theta; new layout: dflash_config.block_size, rope_parameters, layer_types + sliding_window). When a
// value is given in both places the two must agree. Every problem is reported (errors.Join).
func ParseDrafterConfig(data []byte) (*DrafterConfig, error) {
	top, err := parseObject(data)
	if err != nil {
		return nil, fmt.Errorf("%w: drafter config.json: %v", ErrInvalidConfig, err)
	}
	r := &reader{scopes: []scope{{"", top}}}
	gen, err := drafterGeneration(r.strings("architectures"))
	if err != nil {
		return nil, err
	}
	if mt := r.str("model_type", ModelQwen3); mt != ModelQwen3 {
		r.unsupported("drafter model_type %q (DFlash drafters are qwen3 stacks)", mt)
	}
	dc, dwhere := r.obj("dflash_config")
	dr := &reader{scopes: []scope{{dwhere, dc}}}

	d := &DrafterConfig{RopeType: "default", Generation: gen}
	d.HiddenSize = r.int("hidden_size", 0)
	d.IntermediateSize = r.int("intermediate_size", 0)
	d.NumHiddenLayers = r.int("num_hidden_layers", 0)
	if d.NumHiddenLayers > maxLayers {
		r.addErr("num_hidden_layers %d exceeds the sanity limit %d", d.NumHiddenLayers, maxLayers)
		d.NumHiddenLayers = 0
	}
	d.NumAttentionHeads = r.int("num_attention_heads", 0)
	d.NumKeyValueHeads = r.int("num_key_value_heads", d.NumAttentionHeads)
	defHead := 0
	if d.NumAttentionHeads > 0 {
		defHead = d.HiddenSize / d.NumAttentionHeads
	}
	d.HeadDim = r.int("head_dim", defHead)
	d.VocabSize = r.int("vocab_size", 0)
	d.MaxPositionEmbeddings = r.int("max_position_embeddings", 0)
	d.RMSNormEps = r.float("rms_norm_eps", 1e-6)
	if r.bool("attention_bias", false) {
		r.unsupported("attention_bias true for a drafter")
	}
	if act := r.str("hidden_act", "silu"); act != "silu" {
		r.unsupported("hidden_act %q (only silu)", act)
	}

	params, pwhere := r.obj("rope_parameters")
	pr := &reader{scopes: []scope{{pwhere, params}}}
	d.RopeTheta = ropeFloat(r, pr, pwhere, "rope_theta", 10000)
	if f := pr.float("partial_rotary_factor", 1); f != 1 {
		r.unsupported("%s.partial_rotary_factor %v for a drafter (drafters rotate the whole head)", pwhere, f)
	}
	d.RopeScaling = readRopeScaling(r, pr, pwhere)
	if d.RopeScaling.Type != "" {
		d.RopeType = d.RopeScaling.Type
	}

	d.BlockSize = agreeInt(r, dr, "block_size", dwhere)
	d.NumTargetLayers = agreeInt(r, dr, "num_target_layers", dwhere)
	d.TargetLayerIDs = agreeInts(r, dr, "target_layer_ids", dwhere)
	mask := -1
	if dr.has("mask_token_id") || r.has("mask_token_id") {
		mask = agreeInt(r, dr, "mask_token_id", dwhere)
	}
	d.MaskTokenID = int32(max(min(mask, math.MaxInt32), -1))

	readDrafterLayers(r, d)
	d.Dialect = drafterDialect(r, dr, dwhere, params != nil)
	refuseUnimplemented(r, dr, dwhere)
	extra := readDrafterExtras(&reader{scopes: []scope{{dwhere, dc}, {"", top}}}, d)
	d.Quantization = readQuantization(r, top)

	errs := append(append(append(r.errs, dr.errs...), pr.errs...), extra...)
	errs = append(errs, d.validate(mask)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return d, nil
}

// agreeInt reads key from dflash_config and the top level; both present must agree.
func agreeInt(r, dr *reader, key, dwhere string) int {
	a, hasA := dr.int(key, 0), dr.has(key)
	b, hasB := r.int(key, 0), r.has(key)
	switch {
	case hasA && hasB && a != b:
		r.addErr("%s.%s %d and top-level %s %d disagree", dwhere, key, a, key, b)
		return a
	case hasA:
		return a
	}
	return b
}

func agreeInts(r, dr *reader, key, dwhere string) []int {
	a, hasA := dr.ints(key)
	b, hasB := r.ints(key)
	switch {
	case hasA && hasB && !slices.Equal(a, b):
		r.addErr("%s.%s %v and top-level %s %v disagree", dwhere, key, a, key, b)
		return a
	case hasA:
		return a
	}
	return b
}

func readDrafterLayers(r *reader, d *DrafterConfig) {
	types := r.strings("layer_types")
	window := r.int("sliding_window", 0)
	useSliding := r.bool("use_sliding_window", false)
	if types == nil {
		if useSliding {
			r.unsupported("use_sliding_window true without layer_types (the max_window_layers rule is not implemented)")
		}
		types = make([]string, max(d.NumHiddenLayers, 0))
		for i := range types {
			types[i] = DrafterFullAttention
		}
	}
	if len(types) != d.NumHiddenLayers {
		r.addErr("layer_types has %d entries for %d layers", len(types), d.NumHiddenLayers)
	}
	sliding := false
	for i, t := range types {
		switch t {
		case DrafterFullAttention:
		case DrafterSlidingAttention:
			sliding = true
		default:
			r.unsupported("layer_types[%d] %q (want full_attention or sliding_attention)", i, t)
		}
	}
	if sliding {
		if window <= 0 {
			r.addErr("layer_types has sliding_attention layers but sliding_window is %d", window)
		}
		d.SlidingWindow = window
	}
	d.LayerTypes = types
}

// drafterGeneration tells the drafter generation from the architectures list: exactly one of the two
// DFlash architectures must be named.
func drafterGeneration(arch []string) (int, error) {
	v1, v2 := slices.Contains(arch, DrafterArchitecture), slices.Contains(arch, Drafter2Architecture)
	switch {
	case v1 && v2:
		return 0, fmt.Errorf("%w: architectures %q names both %s and %s", ErrInvalidConfig, arch, DrafterArchitecture, Drafter2Architecture)
	case v1:
		return 1, nil
	case v2:
		return 2, nil
	}
	return 0, fmt.Errorf("%w: architectures %q contains neither %s nor %s: not a DFlash drafter", ErrInvalidConfig, arch, DrafterArchitecture, Drafter2Architecture)
}

// unimplementedDrafterKeys are settings other drafter dialects carry that would change the math and that
// higgs does not implement: refused by name rather than ignored. The vLLM speculators format
// (speculators_config, a reduced draft vocabulary, its own tap-layer list) is another dialect altogether.
var unimplementedDrafterKeys = []string{"speculators_config", "draft_vocab_size", "aux_hidden_state_layer_ids", "eagle_config"}

func refuseUnimplemented(r, dr *reader, dwhere string) {
	for _, k := range unimplementedDrafterKeys {
		for _, x := range []*reader{r, dr} {
			if _, where, ok := x.lookup(k); ok {
				x.unsupported("%s: not implemented (the vLLM speculators drafter dialect is not read)", where)
			}
		}
	}
	if r.has("use_aux_hidden_state") && !r.bool("use_aux_hidden_state", true) {
		r.unsupported("use_aux_hidden_state false: a DFlash drafter reads the target's tapped hidden states")
	}
}

// readDrafterExtras reads the DFlash settings newer drafter configs carry beside the Qwen3 fields, each from
// dflash_config first, then the top level, as the authors' reference does: input_embedding_scale (scales the
// noise embeddings), is_causal (overrides every layer's causality), output_multiplier and
// final_logit_softcapping (the logit transforms of compute_logits), and DFlash2's conv_kernel_size,
// conv_group_size, selector_rank and selector_top_k (all four required for DFlash2DraftModel, refused for
// DFlashDraftModel).
func readDrafterExtras(x *reader, d *DrafterConfig) []error {
	finite := func(key string, def float64) float64 {
		f := x.float(key, def)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			x.addErr("%s %v is not a finite number", key, f)
			return def
		}
		return f
	}
	d.EmbedScale = finite("input_embedding_scale", 1)
	if d.EmbedScale <= 0 {
		// 0 would erase the noise block's embeddings; no published drafter uses it.
		x.addErr("input_embedding_scale %v must be > 0", d.EmbedScale)
	}
	d.OutputMultiplier = finite("output_multiplier", 1)
	if d.OutputMultiplier == 0 {
		// 0 would erase the logits (every draft a tie); no published drafter uses it.
		x.addErr("output_multiplier 0 would erase the drafter's logits")
	}
	d.FinalLogitSoftcap = finite("final_logit_softcapping", 0)
	if d.FinalLogitSoftcap < 0 {
		x.addErr("final_logit_softcapping %v must be ≥ 0 (0 or absent: no capping)", d.FinalLogitSoftcap)
	}
	if x.has("is_causal") {
		c := x.bool("is_causal", false)
		d.IsCausal = &c
	}
	v2 := []struct {
		key string
		dst *int
	}{{"conv_kernel_size", &d.ConvKernelSize}, {"conv_group_size", &d.ConvGroupSize}, {"selector_rank", &d.SelectorRank}, {"selector_top_k", &d.SelectorTopK}}
	for _, k := range v2 {
		switch {
		case d.Generation == 1 && x.has(k.key):
			x.addErr("%s is a DFlash2 setting but architectures names %s (want %s)", k.key, DrafterArchitecture, Drafter2Architecture)
		case d.Generation == 2 && !x.has(k.key):
			x.addErr("%s is missing: a %s config must give it (dflash_config.%s)", k.key, Drafter2Architecture, k.key)
		case d.Generation == 2:
			*k.dst = x.int(k.key, 0)
			if *k.dst <= 0 {
				x.addErr("%s %d must be positive", k.key, *k.dst)
			}
		}
	}
	return x.errs
}

func (d *DrafterConfig) validate(mask int) []error {
	var errs problems
	bad, positive := errs.bad, errs.positive
	positive("hidden_size", d.HiddenSize)
	positive("intermediate_size", d.IntermediateSize)
	positive("num_hidden_layers", d.NumHiddenLayers)
	positive("num_attention_heads", d.NumAttentionHeads)
	positive("num_key_value_heads", d.NumKeyValueHeads)
	positive("head_dim", d.HeadDim)
	positive("vocab_size", d.VocabSize)
	positive("max_position_embeddings", d.MaxPositionEmbeddings)
	errs.multiple("num_attention_heads", d.NumAttentionHeads, "num_key_value_heads", d.NumKeyValueHeads)
	if d.HeadDim%2 != 0 {
		bad("head_dim %d must be even for RoPE", d.HeadDim)
	}
	if !(d.RMSNormEps > 0) {
		bad("rms_norm_eps must be positive (got %v)", d.RMSNormEps)
	}
	if !(d.RopeTheta > 0) {
		bad("rope_theta must be positive (got %v)", d.RopeTheta)
	}
	if d.BlockSize < 2 {
		bad("block_size %d: a draft block needs the anchor and at least one drafted token (top-level block_size or dflash_config.block_size)", d.BlockSize)
	}
	if d.NumTargetLayers < 0 {
		bad("num_target_layers must not be negative (got %d)", d.NumTargetLayers)
	}
	if mask < 0 {
		bad("mask_token_id is missing or negative (dflash_config.mask_token_id); it differs between drafter revisions and must be given")
	} else if mask > math.MaxInt32 {
		bad("mask_token_id %d out of range", mask)
	}
	if d.Generation == 2 {
		if d.ConvGroupSize > 0 && d.HiddenSize > 0 && d.HiddenSize%d.ConvGroupSize != 0 {
			bad("conv_group_size %d must divide hidden_size %d", d.ConvGroupSize, d.HiddenSize)
		}
		if d.ConvKernelSize > 0 && d.BlockSize >= 2 && d.ConvKernelSize > d.BlockSize {
			bad("conv_kernel_size %d exceeds block_size %d (the convolution runs over block positions)", d.ConvKernelSize, d.BlockSize)
		}
		if d.SelectorTopK > 0 && d.VocabSize > 0 && d.SelectorTopK > d.VocabSize {
			bad("selector_top_k %d exceeds vocab_size %d", d.SelectorTopK, d.VocabSize)
		}
	}
	seen := map[int]bool{}
	for _, id := range d.TargetLayerIDs {
		if id < 0 {
			bad("target_layer_ids entry %d is negative", id)
		}
		if seen[id] {
			bad("target_layer_ids lists layer %d twice", id)
		}
		seen[id] = true
	}
	return errs
}

// ResolveTapLayers returns the target layers whose outputs feed the drafter, in order.
//
// Explicit target_layer_ids win (derived == false): each must be in [0, targetLayers) and distinct; a
// num_target_layers that disagrees with targetLayers is tolerated (it is training-time information). Without
// explicit ids the result is an error wrapping ErrNoTapLayers unless AllowDerivedTapLayers is set; then the
// ids come from DeriveTapLayers(NumHiddenLayers, N) with N = num_target_layers when given, else targetLayers
// (derived == true), and still must fit the target.
func (d *DrafterConfig) ResolveTapLayers(targetLayers int) (ids []int, derived bool, err error) {
	if targetLayers <= 0 {
		return nil, false, fmt.Errorf("%w: target has %d layers", ErrInvalidConfig, targetLayers)
	}
	ids = slices.Clone(d.TargetLayerIDs)
	if len(ids) == 0 {
		if !d.AllowDerivedTapLayers {
			return nil, false, fmt.Errorf("%w: refusing to guess the tap layers (the reference fallback is wrong for most published drafters); give dflash_config.target_layer_ids or allow derivation explicitly", ErrNoTapLayers)
		}
		n := d.NumTargetLayers
		if n == 0 {
			n = targetLayers
		}
		ids, err = DeriveTapLayers(d.NumHiddenLayers, n)
		if err != nil {
			return nil, false, err
		}
		derived = true
	}
	var errs []error
	seen := map[int]bool{}
	for _, id := range ids {
		if id < 0 || id >= targetLayers {
			errs = append(errs, fmt.Errorf("%w: tap layer %d is outside the target's %d layers", ErrInvalidConfig, id, targetLayers))
		}
		if seen[id] {
			errs = append(errs, fmt.Errorf("%w: tap layer %d listed twice", ErrInvalidConfig, id))
		}
		seen[id] = true
	}
	if len(errs) > 0 {
		return nil, derived, errors.Join(errs...)
	}
	return ids, derived, nil
}

// DeriveTapLayers is the reference fallback (docs/model-math.md#tap-layers) for drafters without target_layer_ids:
// with n drafter layers and N target layers, [N/2] when n == 1, else round(1 + i·(N−4)/(n−1)) for i in
// 0..n−1 with Python's round-half-to-even. For Qwen3-4B (n=5, N=36) it gives [1 9 17 25 33].
func DeriveTapLayers(numDraftLayers, numTargetLayers int) ([]int, error) {
	if numDraftLayers <= 0 || numTargetLayers <= 0 || numDraftLayers > maxLayers || numTargetLayers > maxLayers {
		return nil, fmt.Errorf("%w: cannot derive tap layers for %d drafter layers and %d target layers", ErrInvalidConfig, numDraftLayers, numTargetLayers)
	}
	if numDraftLayers == 1 {
		return []int{numTargetLayers / 2}, nil
	}
	if numTargetLayers < 5 {
		return nil, fmt.Errorf("%w: the tap-layer formula needs at least 5 target layers, have %d", ErrInvalidConfig, numTargetLayers)
	}
	ids := make([]int, numDraftLayers)
	span := float64(numTargetLayers - 4)
	for i := range ids {
		ids[i] = int(math.RoundToEven(1 + float64(i)*span/float64(numDraftLayers-1)))
	}
	return ids, nil
}
