package hfmodel

import (
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

// DrafterArch is a DFlash drafter's shape and settings, resolved from its config against the target it
// drafts for: what a backend builds the drafter from. Every DFlash config rule is checked once, by
// ParseDrafterConfig (the drafter's own consistency) and ResolveDrafter (its fit to the target).
type DrafterArch struct {
	HiddenSize, NumLayers, NumHeads, NumKVHeads, HeadDim, IntermediateSize int
	RMSNormEps, RopeTheta                                                  float64
	BlockSize                                                              int
	TapLayers                                                              []int
	MaskToken                                                              ports.Token
	VocabSize                                                              int    // the drafter config's vocab_size
	SlidingWindows                                                         []int  // per layer: 0 full attention, W > 0 keys with |Δposition| < W
	Causal                                                                 []bool // per layer: block queries see block keys at or before their slot only
	// EmbedScale multiplies the noise-block embeddings (input_embedding_scale; 1 when absent).
	EmbedScale      float64
	NumTargetLayers int // informational (training-time target depth); 0 when absent
	// Rope is the drafter's RoPE scaling (zero: plain RoPE); MaxPositions its max_position_embeddings, which
	// YaRN's frequencies depend on.
	Rope         RopeScaling
	MaxPositions int
	// Generation is 1 (DFlash) or 2 (DFlash2); 0 in an arch built by hand means 1.
	Generation int
	// DFlash2: convolution taps and channels per group, the selector's rank and candidates per position.
	ConvKernel, ConvGroup, SelectorRank, SelectorTopK int
	// OutputMultiplier (0 in an arch built by hand means 1) and LogitSoftcap (0: none) are compute_logits'
	// transforms of the drafter's logits: logits·m, then c·tanh(logits/c).
	OutputMultiplier, LogitSoftcap float64
}

// V2 reports whether a is a DFlash2 drafter.
func (a DrafterArch) V2() bool { return a.Generation == 2 }

// Clone returns a copy sharing no slices with a.
func (a DrafterArch) Clone() DrafterArch {
	a.TapLayers = slices.Clone(a.TapLayers)
	a.SlidingWindows = slices.Clone(a.SlidingWindows)
	a.Causal = slices.Clone(a.Causal)
	return a
}

// ResolveDrafter reads dir's drafter config and resolves it against the target described by info. tapLayers,
// when non-nil, overrides the config's target_layer_ids (for drafters published without them); allowDerived
// lets a drafter without them use the reference formula (DrafterConfig.AllowDerivedTapLayers).
func ResolveDrafter(dir string, info ports.ModelInfo, tapLayers []int, allowDerived bool) (DrafterArch, *DrafterConfig, error) {
	cfg, err := LoadDrafterConfig(dir)
	if err != nil {
		return DrafterArch{}, nil, fmt.Errorf("drafter %s: %w", dir, err)
	}
	if tapLayers != nil {
		cfg.TargetLayerIDs = slices.Clone(tapLayers)
	}
	cfg.AllowDerivedTapLayers = allowDerived
	a, err := DrafterArchFrom(cfg, info)
	if err != nil {
		return DrafterArch{}, nil, fmt.Errorf("drafter %s: %w", dir, err)
	}
	return a, cfg, nil
}

// DrafterArchFrom resolves a parsed drafter config against the target it will draft for: the tap layers (per
// DrafterConfig.ResolveTapLayers: explicit ids win and an informational num_target_layers that disagrees with
// the target is tolerated) and every compatibility check of CheckTarget, all reported at once.
func DrafterArchFrom(cfg *DrafterConfig, info ports.ModelInfo) (DrafterArch, error) {
	a := DrafterArch{HiddenSize: cfg.HiddenSize, NumLayers: cfg.NumHiddenLayers, NumHeads: cfg.NumAttentionHeads,
		NumKVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDim, IntermediateSize: cfg.IntermediateSize,
		RMSNormEps: cfg.RMSNormEps, RopeTheta: cfg.RopeTheta, BlockSize: cfg.BlockSize,
		MaskToken: cfg.MaskTokenID, VocabSize: cfg.VocabSize, EmbedScale: cfg.EmbedScale,
		NumTargetLayers: cfg.NumTargetLayers, Rope: cfg.RopeScaling, MaxPositions: cfg.MaxPositionEmbeddings,
		Generation: cfg.Generation, ConvKernel: cfg.ConvKernelSize, ConvGroup: cfg.ConvGroupSize,
		SelectorRank: cfg.SelectorRank, SelectorTopK: cfg.SelectorTopK,
		OutputMultiplier: cfg.OutputMultiplier, LogitSoftcap: cfg.FinalLogitSoftcap}
	for _, t := range cfg.LayerTypes {
		w := 0
		if t == DrafterSlidingAttention {
			w = cfg.SlidingWindow
		}
		a.SlidingWindows = append(a.SlidingWindows, w)
		// The authors' reference makes sliding layers causal unless is_causal says otherwise.
		c := w > 0
		if cfg.IsCausal != nil {
			c = *cfg.IsCausal
		}
		a.Causal = append(a.Causal, c)
	}
	taps, _, err := cfg.ResolveTapLayers(len(info.LayerKinds))
	a.TapLayers = taps
	return a, errors.Join(err, a.CheckTarget(info))
}

// CheckTarget refuses a target the drafter cannot work with: another hidden size, a tap layer outside the
// target, a mask id outside its vocabulary, or a drafter declaring another vocabulary size.
func (a DrafterArch) CheckTarget(info ports.ModelInfo) error {
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
	if a.MaskToken < 0 || int(a.MaskToken) >= info.VocabSize {
		errs = append(errs, fmt.Errorf("mask_token_id %d is outside the target's vocabulary of %d", a.MaskToken, info.VocabSize))
	}
	if a.VocabSize > 0 && a.VocabSize != info.VocabSize {
		errs = append(errs, fmt.Errorf("drafter vocab_size %d differs from the target's %d", a.VocabSize, info.VocabSize))
	}
	return errors.Join(errs...)
}
