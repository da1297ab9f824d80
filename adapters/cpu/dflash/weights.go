package dflash

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unsafe"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/hfmodel"
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

// linear loads the Linear `name` with logical weight [out, in]: float (F32/F16/BF16) or MLX affine-quantized
// (`name.weight` U32 plus `name.scales` and `name.biases`; bits and group size follow from the shapes).
func (w *weightSet) linear(name string, out, in int) (*kernel.Linear, error) {
	wt, err := w.tensor(name + ".weight")
	if err != nil {
		return nil, err
	}
	if w.has(name + ".scales") {
		return w.quantLinear(name, wt, out, in)
	}
	if len(wt.Shape) != 2 || wt.Shape[0] != out || wt.Shape[1] != in {
		return nil, fmt.Errorf("tensor %q in %s: shape %v, want [%d %d]", wt.Name, wt.File, wt.Shape, out, in)
	}
	var l *kernel.Linear
	switch wt.DType {
	case safetensors.F32:
		v, ok, err := wt.Float32View()
		if err != nil {
			return nil, err
		}
		if !ok {
			if v, err = wt.Float32(); err != nil {
				return nil, err
			}
		}
		l, err = kernel.NewF32(out, in, v)
		if err != nil {
			return nil, fmt.Errorf("tensor %q in %s: %w", wt.Name, wt.File, err)
		}
	case safetensors.BF16:
		l, err = kernel.NewBF16(out, in, bf16Bits(wt.Data))
		if err != nil {
			return nil, fmt.Errorf("tensor %q in %s: %w", wt.Name, wt.File, err)
		}
	default:
		v, err := wt.Float32()
		if err != nil {
			return nil, err
		}
		if l, err = kernel.NewF32(out, in, v); err != nil {
			return nil, fmt.Errorf("tensor %q in %s: %w", wt.Name, wt.File, err)
		}
	}
	l.Pool = w.pool
	return l, nil
}

func (w *weightSet) quantLinear(name string, wt *safetensors.Tensor, out, in int) (*kernel.Linear, error) {
	sc, err := w.tensor(name + ".scales")
	if err != nil {
		return nil, err
	}
	bi, err := w.tensor(name + ".biases")
	if err != nil {
		return nil, err
	}
	if len(wt.Shape) != 2 || len(sc.Shape) != 2 || wt.Shape[0] != out || sc.Shape[0] != out || sc.Shape[1] <= 0 ||
		in%sc.Shape[1] != 0 || (wt.Shape[1]*32)%in != 0 {
		return nil, fmt.Errorf("quantized %q in %s: weight %v, scales %v do not fit logical [%d %d]", name, wt.File, wt.Shape, sc.Shape, out, in)
	}
	if !equal(sc.Shape, bi.Shape) {
		return nil, fmt.Errorf("quantized %q in %s: biases %v differ from scales %v", name, wt.File, bi.Shape, sc.Shape)
	}
	q := kernel.Quant{Bits: wt.Shape[1] * 32 / in, Group: in / sc.Shape[1]}
	codes, ok, err := wt.Uint32View()
	if err != nil {
		return nil, err
	}
	if !ok {
		if codes, err = wt.Uint32(); err != nil {
			return nil, err
		}
	}
	q.Codes = codes
	if q.Scales, err = sc.Float32(); err != nil {
		return nil, err
	}
	if q.Biases, err = bi.Float32(); err != nil {
		return nil, err
	}
	if spec, ok := w.quant.For(name); w.quant != nil && ok && (spec.Bits != q.Bits || spec.GroupSize != q.Group) {
		return nil, fmt.Errorf("quantized %q in %s: shapes imply %d-bit/g%d but config.json says %s", name, wt.File, q.Bits, q.Group, spec)
	}
	l, err := kernel.NewQuant(out, in, q)
	if err != nil {
		return nil, fmt.Errorf("quantized %q in %s: %w", name, wt.File, err)
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

// bf16Bits views raw little-endian BF16 bytes as uint16s without copying when aligned, else copies.
func bf16Bits(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(&b[0]))%2 == 0 && littleEndian {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
	}
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
