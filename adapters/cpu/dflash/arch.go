package dflash

import (
	"errors"
	"fmt"
	"math"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/ports"
)

var errNoTaps = errors.New("no tap layers")

// Arch is the drafter's shape and DFlash settings, resolved from its config.json.
type Arch struct {
	HiddenSize       int
	NumLayers        int
	NumHeads         int
	NumKVHeads       int
	HeadDim          int
	IntermediateSize int
	RMSNormEps       float64
	RopeTheta        float64
	BlockSize        int
	TapLayers        []int
	MaskToken        ports.Token
	VocabSize        int    // the drafter config's vocab_size; 0 when absent
	SlidingWindows   []int  // per layer: 0 full attention, W > 0 sliding window (keys with |Δposition| < W)
	Causal           []bool // per layer: block queries see block keys at or before their slot only
	// EmbedScale multiplies the noise-block embeddings (dflash_config.input_embedding_scale; 1 when absent).
	EmbedScale      float64
	NumTargetLayers int // informational (training-time target depth); 0 when absent
	HasMaskToken    bool
	// Rope is the drafter's RoPE scaling (zero: plain RoPE); MaxPositions its max_position_embeddings, which
	// YaRN's frequencies depend on.
	Rope              hfmodel.RopeScaling
	MaxPositions      int
	TieWordEmbeddings bool // irrelevant to the drafter, kept for reporting
}

// Validate checks the drafter's own consistency (not yet against a target).
func (a Arch) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s %d must be > 0", name, v))
		}
	}
	pos("hidden_size", a.HiddenSize)
	pos("num_hidden_layers", a.NumLayers)
	pos("num_attention_heads", a.NumHeads)
	pos("num_key_value_heads", a.NumKVHeads)
	pos("head_dim", a.HeadDim)
	pos("intermediate_size", a.IntermediateSize)
	if a.NumHeads > 0 && a.NumKVHeads > 0 && a.NumHeads%a.NumKVHeads != 0 {
		errs = append(errs, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", a.NumHeads, a.NumKVHeads))
	}
	if a.HeadDim%2 != 0 {
		errs = append(errs, fmt.Errorf("head_dim %d must be even for RoPE", a.HeadDim))
	}
	if !(a.RMSNormEps > 0) || math.IsInf(a.RMSNormEps, 0) {
		errs = append(errs, fmt.Errorf("rms_norm_eps %v must be > 0", a.RMSNormEps))
	}
	if !(a.RopeTheta > 0) || math.IsInf(a.RopeTheta, 0) {
		errs = append(errs, fmt.Errorf("rope_theta %v must be > 0", a.RopeTheta))
	}
	switch a.Rope.Type {
	case "", hfmodel.RopeLinear:
	case hfmodel.RopeYaRN:
		if a.MaxPositions <= 0 {
			errs = append(errs, errors.New("YaRN RoPE needs max_position_embeddings"))
		}
	default:
		errs = append(errs, fmt.Errorf("rope_scaling type %q is not implemented by the CPU drafter", a.Rope.Type))
	}
	if a.BlockSize < 2 {
		errs = append(errs, fmt.Errorf("block_size %d must be ≥ 2", a.BlockSize))
	}
	if len(a.TapLayers) == 0 {
		errs = append(errs, fmt.Errorf("dflash_config.target_layer_ids: %w", errNoTaps))
	}
	seen := map[int]bool{}
	for _, id := range a.TapLayers {
		if id < 0 {
			errs = append(errs, fmt.Errorf("target layer id %d is negative", id))
		}
		if seen[id] {
			errs = append(errs, fmt.Errorf("target layer id %d listed twice", id))
		}
		seen[id] = true
	}
	if !a.HasMaskToken {
		errs = append(errs, errors.New("dflash_config.mask_token_id is missing"))
	} else if a.MaskToken < 0 {
		errs = append(errs, fmt.Errorf("mask_token_id %d is negative", a.MaskToken))
	}
	if len(a.SlidingWindows) != 0 && len(a.SlidingWindows) != a.NumLayers {
		errs = append(errs, fmt.Errorf("%d layer types for %d layers", len(a.SlidingWindows), a.NumLayers))
	}
	if len(a.Causal) != 0 && len(a.Causal) != a.NumLayers {
		errs = append(errs, fmt.Errorf("%d causal flags for %d layers", len(a.Causal), a.NumLayers))
	}
	if math.IsNaN(a.EmbedScale) || math.IsInf(a.EmbedScale, 0) || a.EmbedScale < 0 {
		errs = append(errs, fmt.Errorf("input_embedding_scale %v must be a finite number ≥ 0", a.EmbedScale))
	}
	for i, w := range a.SlidingWindows {
		if w < 0 {
			errs = append(errs, fmt.Errorf("layer %d: sliding window %d must be ≥ 0", i, w))
		}
	}
	return errors.Join(errs...)
}

// CheckTarget refuses a target the drafter cannot work with: another hidden size, a tap layer outside the
// target, a mask id outside its vocabulary, or a drafter declaring another vocabulary size.
func (a Arch) CheckTarget(info ports.ModelInfo) error {
	var errs []error
	if a.HiddenSize != info.HiddenSize {
		errs = append(errs, fmt.Errorf("drafter hidden_size %d differs from the target's %d", a.HiddenSize, info.HiddenSize))
	}
	nl := len(info.LayerKinds)
	for _, id := range a.TapLayers {
		if id < 0 || id >= nl {
			errs = append(errs, fmt.Errorf("tap layer %d is outside the target's %d layers (0..%d)", id, nl, nl-1))
		}
	}
	if a.HasMaskToken && (a.MaskToken < 0 || int(a.MaskToken) >= info.VocabSize) {
		errs = append(errs, fmt.Errorf("mask_token_id %d is outside the target's vocabulary of %d", a.MaskToken, info.VocabSize))
	}
	if a.VocabSize > 0 && a.VocabSize != info.VocabSize {
		errs = append(errs, fmt.Errorf("drafter vocab_size %d differs from the target's %d", a.VocabSize, info.VocabSize))
	}
	return errors.Join(errs...)
}
