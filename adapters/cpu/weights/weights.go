// Package weights builds kernel values (Linear layers, vectors) from safetensors tensors, for the CPU target and
// the CPU DFlash drafter alike. Float weights stay in their stored form where the kernels can use it directly
// (F32, BF16 and F16, zero-copy over the mapping when aligned). MLX affine-quantized
// Linears (`<name>.weight` U32 + `<name>.scales` + `<name>.biases`) stay packed.
package weights

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// IsQuantized reports whether the Linear at base (module path without ".weight") is stored quantized: the MLX
// loader rule is "an override spec exists or <base>.scales exists"; callers pass the override as spec.
func IsQuantized(st *safetensors.Store, base string, spec *quant.Spec) bool {
	return spec != nil || st.Has(base+".scales")
}

// LoadLinear loads the Linear whose weight is `<base>.weight` with logical shape [out, in]. spec is the
// checkpoint's quantization for this module (nil when not quantized per config); when nil but `<base>.scales`
// exists, bits and group size are inferred from the shapes (in is known). The result borrows the store's
// mapping when it can: keep the store open while the Linear is used.
func LoadLinear(st *safetensors.Store, base string, spec *quant.Spec, out, in int) (*kernel.Linear, error) {
	return LoadTensorLinear(st, base+".weight", base, spec, out, in)
}

// LoadTensorLinear is LoadLinear with the weight tensor named explicitly (HF fused expert tensors have no
// ".weight" suffix); scales and biases are looked up as `<base>.scales` / `<base>.biases`.
func LoadTensorLinear(st *safetensors.Store, weightName, base string, spec *quant.Spec, out, in int) (*kernel.Linear, error) {
	l, err := loadMatrix(st, weightName, base, spec, []int{out, in})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// LoadStacked loads stacked experts [E, out, in] (`<base>.weight`, possibly quantized) as one Linear per expert;
// the experts are row views of one [E·out, in] matrix.
func LoadStacked(st *safetensors.Store, weightName, base string, spec *quant.Spec, experts, out, in int) ([]*kernel.Linear, error) {
	l, err := loadMatrix(st, weightName, base, spec, []int{experts, out, in})
	if err != nil {
		return nil, err
	}
	res := make([]*kernel.Linear, experts)
	for e := range res {
		if res[e], err = l.Rows(e*out, (e+1)*out); err != nil {
			return nil, fmt.Errorf("%s expert %d: %w", weightName, e, err)
		}
	}
	return res, nil
}

// loadMatrix loads a float or quantized weight of logical shape dims ([out,in] or [E,out,in]) as one Linear
// with rows = product of all but the last dim.
func loadMatrix(st *safetensors.Store, weightName, base string, spec *quant.Spec, dims []int) (*kernel.Linear, error) {
	in := dims[len(dims)-1]
	rows := 1
	for _, d := range dims[:len(dims)-1] {
		rows *= d
	}
	t, err := st.Tensor(weightName)
	if err != nil {
		return nil, err
	}
	if !IsQuantized(st, base, spec) {
		if !slices.Equal(t.Shape, dims) {
			return nil, fmt.Errorf("tensor %q in %s: shape %v, want %v", weightName, t.File, t.Shape, dims)
		}
		return floatLinear(t, rows, in)
	}
	sc, err := st.Tensor(base + ".scales")
	if err != nil {
		return nil, fmt.Errorf("quantized %s: %w", base, err)
	}
	bi, err := st.Tensor(base + ".biases")
	if err != nil {
		return nil, fmt.Errorf("quantized %s: %w", base, err)
	}
	s, err := hfmodel.CheckQuantizedLinear(spec, t.Shape, sc.Shape, bi.Shape, dims)
	if err != nil {
		return nil, fmt.Errorf("quantized %s: %w", base, err)
	}
	codes, ok, err := t.Uint32View()
	if err != nil {
		return nil, err
	}
	if !ok {
		if codes, err = t.Uint32(); err != nil {
			return nil, err
		}
	}
	scales, err := sc.Float32()
	if err != nil {
		return nil, err
	}
	biases, err := bi.Float32()
	if err != nil {
		return nil, err
	}
	l, err := kernel.NewQuant(rows, in, kernel.Quant{Bits: s.Bits, Group: s.GroupSize, Codes: codes, Scales: scales, Biases: biases})
	if err != nil {
		return nil, fmt.Errorf("quantized %s: %w", base, err)
	}
	return l, nil
}

func floatLinear(t *safetensors.Tensor, rows, in int) (*kernel.Linear, error) {
	switch t.DType {
	case safetensors.F32:
		v, ok, err := t.Float32View()
		if err != nil {
			return nil, err
		}
		if !ok {
			if v, err = t.Float32(); err != nil {
				return nil, err
			}
		}
		return kernel.NewF32(rows, in, v)
	case safetensors.BF16:
		return kernel.NewBF16(rows, in, uint16s(t.Data))
	case safetensors.F16:
		// Kept as half precision: a decode step reads 2 bytes a weight, not the 4 of a float32 widening, and the
		// kernels compute the widened weights' exact bits.
		return kernel.NewF16(rows, in, uint16s(t.Data))
	}
	if t.DType == safetensors.U32 {
		return nil, fmt.Errorf("tensor %q in %s: packed U32 weight without its .scales/.biases (or no quantization in config.json)", t.Name, t.File)
	}
	return nil, fmt.Errorf("tensor %q in %s: dtype %s not supported for a Linear weight", t.Name, t.File, t.DType)
}

// uint16s views little-endian BF16 or F16 bytes as uint16 without copying when aligned (amd64/arm64 are little-endian),
// else copies. safetensors has no uint16 view, hence this local helper.
func uint16s(b []byte) []uint16 {
	if len(b) == 0 {
		return []uint16{}
	}
	if uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
	}
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return v
}

// Vector loads a float tensor with exactly n elements (any shape whose product is n, e.g. [n] or [n,1,1]) as a
// fresh float32 slice.
func Vector(st *safetensors.Store, name string, n int) ([]float32, error) {
	t, err := st.Tensor(name)
	if err != nil {
		return nil, err
	}
	if t.NumElements() != n {
		return nil, fmt.Errorf("tensor %q in %s: shape %v, want %d elements", name, t.File, t.Shape, n)
	}
	return t.Float32()
}
