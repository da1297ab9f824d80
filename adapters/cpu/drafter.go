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

// DrafterOptions tune LoadDrafter (see model.DrafterOptions).
type DrafterOptions = model.DrafterOptions

// Drafter is a loaded DFlash drafter bound to one CPU target, whose embedding, LM head and worker pool it
// shares. It is immutable after loading and safe for concurrent use; each generation opens its own session.
type Drafter struct {
	t     *Target
	m     *model.Drafter[*weight]
	opts  DrafterOptions
	store *safetensors.Store
}

var (
	_ ports.Drafter         = (*Drafter)(nil)
	_ ports.DraftSession    = (*DraftSession)(nil)
	_ ports.SamplingDrafter = (*DraftSession)(nil)
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
	d.opts = opts
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

// BlockSize is the drafter's configured block_size (anchor included): the default block, not a bound.
func (d *Drafter) BlockSize() int { return d.m.Arch.BlockSize }

// TapLayers lists the target layers whose outputs the drafter consumes, in order (a copy).
func (d *Drafter) TapLayers() []int { return slices.Clone(d.m.Arch.TapLayers) }

// MaskToken is the id the noise block is filled with.
func (d *Drafter) MaskToken() ports.Token { return d.m.Arch.MaskToken }

// NewSession opens a draft session with an empty context cache.
func (d *Drafter) NewSession(ctx context.Context) (ports.DraftSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &DraftSession{d: d, kv: model.PerLayer[kvCache](len(d.m.Layers))}, nil
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
