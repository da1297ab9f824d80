package dflash

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// The CPU target lends its embedding and LM head.
var _ Target = (*cpu.Target)(nil)

// Options tune Load.
type Options struct {
	// Pool runs the drafter's kernels; share the target's pool so both use the same workers. nil means a new
	// pool of Threads workers.
	Pool *kernel.Pool
	// Threads sizes the pool when Pool is nil; 0 means GOMAXPROCS.
	Threads int
	// TapLayers, when non-nil, overrides the config's target_layer_ids (for drafters published without them).
	TapLayers []int
	// AllowDerivedTapLayers lets a drafter without target_layer_ids use the reference formula of
	// MODEL-REFERENCE §1.3 (round-half-to-even); by default such a drafter is refused, because the formula is
	// wrong for most published checkpoints.
	AllowDerivedTapLayers bool
	// ShrinkBlocks makes a Draft call with bs < BlockSize() run a block of only bs slots (anchor + bs−1
	// masks). By default such a call still runs the trained block (anchor + BlockSize()−1 masks) and returns
	// its first bs−1 proposals: DFlash denoises the block jointly with bidirectional attention and drafters are
	// trained on full blocks only, so fewer mask slots change every slot's prediction and acceptance collapses
	// (demo drafter, block 16: τ 1.12 at bs 2 shrunk against the first slot of the full block's 2.07 at bs 16).
	// The block forward costs the drafter's layers on BlockSize rows either way; only the LM head (the larger
	// cost on a big vocabulary) is limited to the bs−1 returned rows. Set it to reproduce the authors' loop,
	// which drafts shortened blocks literally.
	ShrinkBlocks bool
}

// Load reads a DFlash drafter from dir (config.json in either published layout + safetensors weights, float or
// MLX-quantized, with or without a `model.` prefix) and binds it to target. Every incompatibility with the
// target (hidden size, tap layers, mask id, vocabulary) and every missing, misshapen or unexpected tensor is
// refused here, before any generation.
func Load(ctx context.Context, dir string, target Target, opts Options) (*Drafter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a, cfg, err := ResolveArch(dir, target.Info(), opts.TapLayers, opts.AllowDerivedTapLayers)
	if err != nil {
		return nil, err
	}
	pool := opts.Pool
	if pool == nil {
		pool = kernel.NewPool(opts.Threads)
	}
	d, err := loadWeights(dir, a, target, pool, cfg.Quantization)
	if err != nil {
		return nil, err
	}
	d.shrink = opts.ShrinkBlocks
	if err := ctx.Err(); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// ResolveArch reads dir's drafter config (and the extras the authors' code keeps beside it) and resolves it
// against the target described by info, with every check Load makes before reading weights: the DFlash config
// rules live here once, for this package and for other backends' drafters. tapLayers and allowDerived are
// Options.TapLayers and Options.AllowDerivedTapLayers.
func ResolveArch(dir string, info ports.ModelInfo, tapLayers []int, allowDerived bool) (Arch, *hfmodel.DrafterConfig, error) {
	cfg, err := hfmodel.LoadDrafterConfig(dir)
	if err != nil {
		return Arch{}, nil, fmt.Errorf("drafter %s: %w", dir, err)
	}
	if tapLayers != nil {
		cfg.TargetLayerIDs = append([]int(nil), tapLayers...)
	}
	cfg.AllowDerivedTapLayers = allowDerived
	a, err := ArchFromConfig(cfg, info)
	if err == nil {
		err = readExtras(dir, &a)
	}
	if err == nil {
		err = a.Validate()
	}
	if err != nil {
		return Arch{}, nil, fmt.Errorf("drafter %s: %w", dir, err)
	}
	return a, cfg, nil
}

// ArchFromConfig resolves a parsed drafter config against the target it will draft for: the tap layers (per
// DrafterConfig.ResolveTapLayers: explicit ids win and an informational num_target_layers that disagrees with
// the target is tolerated) and every compatibility check of Arch.CheckTarget.
func ArchFromConfig(cfg *hfmodel.DrafterConfig, info ports.ModelInfo) (Arch, error) {
	a := Arch{HiddenSize: cfg.HiddenSize, NumLayers: cfg.NumHiddenLayers, NumHeads: cfg.NumAttentionHeads,
		NumKVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDim, IntermediateSize: cfg.IntermediateSize,
		RMSNormEps: cfg.RMSNormEps, RopeTheta: cfg.RopeTheta, BlockSize: cfg.BlockSize,
		MaskToken: cfg.MaskTokenID, HasMaskToken: cfg.MaskTokenID >= 0, VocabSize: cfg.VocabSize,
		NumTargetLayers: cfg.NumTargetLayers, Rope: cfg.RopeScaling, MaxPositions: cfg.MaxPositionEmbeddings}
	a.EmbedScale = 1
	for _, t := range cfg.LayerTypes {
		w := 0
		if t == hfmodel.DrafterSlidingAttention {
			w = cfg.SlidingWindow
		}
		a.SlidingWindows = append(a.SlidingWindows, w)
		// The authors' reference makes sliding layers causal unless config is_causal says otherwise.
		a.Causal = append(a.Causal, w > 0)
	}
	taps, _, err := cfg.ResolveTapLayers(len(info.LayerKinds))
	a.TapLayers = taps
	if err != nil {
		// Still report the other problems at once.
		return a, errors.Join(err, a.CheckTarget(info))
	}
	if err := errors.Join(a.Validate(), a.CheckTarget(info)); err != nil {
		return a, err
	}
	return a, nil
}

// loadWeights maps dir's safetensors and builds a drafter of architecture a bound to target. q, when non-nil,
// is the config's quantization, cross-checked against the bits and group size the tensor shapes imply.
func loadWeights(dir string, a Arch, target Target, pool *kernel.Pool, q *hfmodel.Quantization) (*Drafter, error) {
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("drafter weights: %w", err)
	}
	ws, err := newWeightSet(st, pool)
	if err == nil {
		ws.quant = q
		var d *Drafter
		if d, err = build(a, ws, target, pool); err == nil {
			d.closeFns = append(d.closeFns, st.Close)
			return d, nil
		}
	}
	_ = st.Close()
	return nil, fmt.Errorf("drafter %s: %w", dir, err)
}
