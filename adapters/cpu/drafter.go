package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// DrafterOptions tune LoadDrafter.
type DrafterOptions struct {
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

// Drafter is a loaded DFlash drafter bound to one CPU target, whose embedding, LM head and worker pool it
// shares. It is immutable after loading and safe for concurrent use; each generation opens its own session.
type Drafter struct {
	t      *Target
	m      *model.Drafter[*weight]
	shrink bool
	store  *safetensors.Store
}

var (
	_ ports.Drafter      = (*Drafter)(nil)
	_ ports.DraftSession = (*DraftSession)(nil)
)

// LoadDrafter reads a DFlash drafter from dir (config.json in either published layout + safetensors
// weights, float or MLX-quantized, with or without a `model.` prefix) and binds it to target. Every
// incompatibility with the target (hidden size, tap layers, mask id, vocabulary) and every missing, misshapen
// or unexpected tensor is refused here, before any generation.
func LoadDrafter(ctx context.Context, dir string, target *Target, opts DrafterOptions) (*Drafter, error) {
	if target == nil {
		return nil, errors.New("cpu drafter: no target")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a, cfg, err := hfmodel.ResolveDrafter(dir, target.Info(), opts.TapLayers, opts.AllowDerivedTapLayers)
	if err != nil {
		return nil, err
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("drafter weights: %w", err)
	}
	d, err := buildDrafter(st, a, cfg, target)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("drafter %s: %w", dir, err), st.Close())
	}
	d.shrink = opts.ShrinkBlocks
	return d, nil
}

func buildDrafter(st *safetensors.Store, a hfmodel.DrafterArch, cfg *hfmodel.DrafterConfig, target *Target) (*Drafter, error) {
	ck, err := hfmodel.NewCheckpoint(st)
	if err != nil {
		return nil, err
	}
	m, err := model.LoadDrafter(&loader{ck: ck, quant: cfg.Quantization, pool: target.pool}, ck, a, target.m)
	if err != nil {
		return nil, err
	}
	if err := ck.Unused(); err != nil {
		return nil, fmt.Errorf("a DFlash drafter: %w", err)
	}
	return &Drafter{t: target, m: m, store: st}, nil
}

// Arch returns the drafter's resolved architecture (a copy).
func (d *Drafter) Arch() hfmodel.DrafterArch { return d.m.Arch.Clone() }

// BlockSize is the block size the drafter was trained for (anchor included).
func (d *Drafter) BlockSize() int { return d.m.Arch.BlockSize }

// TapLayers lists the target layers whose outputs the drafter consumes, in order (a copy).
func (d *Drafter) TapLayers() []int { return slices.Clone(d.m.Arch.TapLayers) }

// ShrinksBlocks reports whether a short Draft call runs a shortened block (DrafterOptions.ShrinkBlocks)
// instead of the trained one.
func (d *Drafter) ShrinksBlocks() bool { return d.shrink }

// MaskToken is the id the noise block is filled with.
func (d *Drafter) MaskToken() ports.Token { return d.m.Arch.MaskToken }

// NewSession opens a draft session with an empty context cache.
func (d *Drafter) NewSession(ctx context.Context) (ports.DraftSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	kv := make([]*kvCache, len(d.m.Layers))
	for i := range kv {
		kv[i] = &kvCache{}
	}
	return &DraftSession{d: d, kv: kv}, nil
}

// Close releases the weights' memory mapping. Sessions must not be used afterwards.
func (d *Drafter) Close() error {
	if d.store == nil {
		return nil
	}
	err := d.store.Close()
	d.store = nil
	return err
}
