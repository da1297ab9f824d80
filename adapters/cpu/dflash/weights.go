package dflash

import (
	"fmt"
	"strings"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/cpu/weights"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// weightSet resolves the drafter's canonical tensor names (MODEL-REFERENCE §2.3, no `model.` prefix) against a
// checkpoint that may carry a `model.` prefix, and records which tensors were consumed so unexpected ones are
// refused.
type weightSet struct {
	st    *safetensors.Store
	names map[string]string // canonical → stored name
	pool  *kernel.Pool
	quant *hfmodel.Quantization // config's quantization block, nil when absent
}

func newWeightSet(st *safetensors.Store, pool *kernel.Pool) (*weightSet, error) {
	ws := &weightSet{st: st, names: map[string]string{}, pool: pool}
	for _, n := range st.Names() {
		c := strings.TrimPrefix(n, "model.")
		if prev, dup := ws.names[c]; dup {
			return nil, fmt.Errorf("%s: tensors %q and %q both map to %q", st.Where(), prev, n, c)
		}
		ws.names[c] = n
	}
	return ws, nil
}

func (w *weightSet) has(name string) bool { _, ok := w.names[name]; return ok }

func (w *weightSet) tensor(name string) (*safetensors.Tensor, error) {
	stored, ok := w.names[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w: %q", w.st.Where(), safetensors.ErrMissingTensor, name)
	}
	return w.st.Tensor(stored)
}

// vector loads a 1-D float tensor of length n (norm weights) as a fresh float32 slice.
func (w *weightSet) vector(name string, n int) ([]float32, error) {
	t, err := w.tensor(name)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 1 || t.Shape[0] != n {
		return nil, fmt.Errorf("tensor %q in %s: shape %v, want [%d]", name, t.File, t.Shape, n)
	}
	return t.Float32()
}

// linear loads the Linear `name` with logical weight [out, in] with the loader the target uses
// (adapters/cpu/weights): float (F32/F16/BF16) or MLX affine-quantized (`name.weight` U32 plus `name.scales`
// and `name.biases`), whose bits and group size are the config's for the module, or follow from the shapes
// when the config has no quantization block.
func (w *weightSet) linear(name string, out, in int) (*kernel.Linear, error) {
	stored, ok := w.names[name+".weight"]
	if !ok {
		return nil, fmt.Errorf("%s: %w: %q", w.st.Where(), safetensors.ErrMissingTensor, name+".weight")
	}
	var spec *quant.Spec
	if w.has(name+".scales") && w.quant != nil {
		s, ok := w.quant.For(name)
		if !ok {
			// The rule hfmodel.Checkpoint.QuantSpec applies for targets and the MLX drafter.
			return nil, fmt.Errorf("%s: %s: stored quantized but config.json marks it not quantized", w.st.Where(), name)
		}
		spec = &s
	}
	l, err := weights.LoadLinear(w.st, strings.TrimSuffix(stored, ".weight"), spec, out, in)
	if err != nil {
		return nil, err
	}
	l.Pool = w.pool
	return l, nil
}

// unused lists stored tensors nothing consumed, by their stored names.
func (w *weightSet) unused() error {
	if u := w.st.Unused(); len(u) > 0 {
		if len(u) > 8 {
			u = append(u[:8:8], fmt.Sprintf("… (%d more)", len(u)-8))
		}
		return fmt.Errorf("%s: unexpected tensors for a DFlash drafter: %s", w.st.Where(), strings.Join(u, ", "))
	}
	return nil
}
