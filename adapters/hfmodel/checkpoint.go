package hfmodel

import (
	"fmt"
	"strings"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// Checkpoint is a safetensors store seen through canonical tensor names (NormaliseName): the name table the
// backends' target loaders (and the MLX drafter's) look weights up in, so the prefix rules, the duplicate
// check, the missing-tensor error and the quantized-or-not rule are written once.
type Checkpoint struct {
	// Store is the underlying store; loaders read tensors from it by their stored names.
	Store *safetensors.Store
	names map[string]string // canonical → stored
}

// NewCheckpoint indexes st by canonical name. Tensors a text-only engine never uses (vision tower, projector,
// MTP head) are marked used at once, so they never count as unexpected; two stored names that normalise to
// the same canonical one are an error.
func NewCheckpoint(st *safetensors.Store) (*Checkpoint, error) {
	ck := &Checkpoint{Store: st, names: map[string]string{}}
	for _, n := range st.Names() {
		c, keep := NormaliseName(n)
		if !keep {
			st.MarkUsed(n)
			continue
		}
		if prev, dup := ck.names[c]; dup {
			return nil, fmt.Errorf("tensors %q and %q both normalise to %q", prev, n, c)
		}
		ck.names[c] = n
	}
	return ck, nil
}

// Has reports whether the checkpoint stores the tensor with canonical name c.
func (ck *Checkpoint) Has(c string) bool { _, ok := ck.names[c]; return ok }

// Stored returns the stored name of canonical tensor c; a missing tensor wraps safetensors.ErrMissingTensor.
func (ck *Checkpoint) Stored(c string) (string, error) {
	n, ok := ck.names[c]
	if !ok {
		return "", fmt.Errorf("%w: %q (canonical name) in %s", safetensors.ErrMissingTensor, c, ck.Store.Where())
	}
	return n, nil
}

// Tensor returns canonical tensor c (marking it used).
func (ck *Checkpoint) Tensor(c string) (*safetensors.Tensor, error) {
	n, err := ck.Stored(c)
	if err != nil {
		return nil, err
	}
	return ck.Store.Tensor(n)
}

// MarkUsed marks the stored canonical tensors cs as consumed without reading them (absent ones are skipped).
func (ck *Checkpoint) MarkUsed(cs ...string) {
	for _, c := range cs {
		if n, ok := ck.names[c]; ok {
			ck.Store.MarkUsed(n)
		}
	}
}

// Unused is an error naming (the first 20 of) the stored tensors nothing read or marked used, or nil: a
// loader calls it last, so a checkpoint with tensors the model does not know is refused, not half-used.
func (ck *Checkpoint) Unused() error {
	un := ck.Store.Unused()
	if len(un) == 0 {
		return nil
	}
	n := len(un)
	const show = 20
	if n > show {
		un = append(un[:show:show], fmt.Sprintf("… and %d more", n-show))
	}
	return fmt.Errorf("unexpected tensors in checkpoint (%d): %v", n, un)
}

// QuantSpec says how canonical module c is stored. quantized is whether <c>.scales exists (the MLX rule); for
// a quantized module, spec is q's setting for c, or nil when q is nil (no quantization block: the caller
// infers bits and group size from the shapes). A module stored quantized that q marks not quantized is an
// error.
func (ck *Checkpoint) QuantSpec(q *Quantization, c string) (spec *quant.Spec, quantized bool, err error) {
	if !ck.Has(c + ".scales") {
		return nil, false, nil
	}
	if q == nil {
		return nil, true, nil
	}
	s, ok := q.For(c)
	if !ok {
		return nil, true, fmt.Errorf("%s: stored quantized but config.json marks it not quantized", c)
	}
	return &s, true, nil
}

// ZeroCentredNorms reports whether the RMSNorm weights of a hybrid (Gated DeltaNet) checkpoint are stored
// zero-centred, so a loader must add 1 to them (docs/model-math.md#zero-centred-norms). HF hybrid checkpoints store w
// for a norm that scales by (1+w); MLX conversions have folded the 1 in, recognisable by a quantization block, by
// stacked switch_mlp expert keys, or by the first GDN layer's conv1d stored [C,Kc,1] instead of HF's [C,1,Kc].
// Dense qwen3 norms are never zero-centred.
func (ck *Checkpoint) ZeroCentredNorms(cfg *TextConfig) bool {
	if !cfg.Hybrid() || cfg.Quantization != nil {
		return false
	}
	for c := range ck.names {
		if strings.Contains(c, ".switch_mlp.") {
			return false
		}
	}
	for i, k := range cfg.LayerTypes {
		if k != ports.LayerRecurrent {
			continue
		}
		if t, err := ck.Tensor(fmt.Sprintf("layers.%d.linear_attn.conv1d.weight", i)); err == nil && len(t.Shape) == 3 && t.Shape[2] == 1 && t.Shape[1] != 1 {
			return false
		}
		break
	}
	return true
}
