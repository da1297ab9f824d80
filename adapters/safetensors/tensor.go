package safetensors

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// Tensor is one named tensor of an open Store.
//
// Data is a view into the read-only memory mapping of File: it is valid until the Store is closed, must not be
// written (the mapping is read-only; a write faults) and must not be retained past Close (a read faults).
// Copy what must outlive the Store (Float32 and Uint32 return fresh slices).
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
	// File is the path of the file holding the tensor, for error messages.
	File string
}

// NumElements returns the product of Shape (1 for a scalar, 0 if any dimension is 0).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32 returns the tensor's values as a new float32 slice, converting F32, F16 and BF16 exactly (every F16
// and BF16 value is representable in float32). Other dtypes are an error naming the tensor and file.
func (t *Tensor) Float32() ([]float32, error) {
	if err := t.checkData(); err != nil {
		return nil, err
	}
	dst := make([]float32, t.NumElements())
	if err := t.Float32Into(dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// Float32Into is Float32 without the allocation: dst must have exactly NumElements elements.
func (t *Tensor) Float32Into(dst []float32) error {
	n := t.NumElements()
	if len(dst) != n {
		return fmt.Errorf("tensor %q in %s: destination holds %d values, tensor has %d", t.Name, t.File, len(dst), n)
	}
	if err := t.checkData(); err != nil {
		return err
	}
	if err := decodeFloat32(dst, t.DType, t.Data); err != nil {
		return fmt.Errorf("tensor %q in %s: %w", t.Name, t.File, err)
	}
	return nil
}

// Uint32 returns the tensor's values as a new uint32 slice (a copy; decoded little-endian). Only U32 is
// accepted: MLX packs quantized weights as U32 and reinterpreting another dtype would hide a wrong file.
func (t *Tensor) Uint32() ([]uint32, error) {
	if err := t.checkU32(); err != nil {
		return nil, err
	}
	out := make([]uint32, t.NumElements())
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(t.Data[4*i:])
	}
	return out, nil
}

// Uint32View returns the U32 data as a []uint32 aliasing the mapping, without copying — what a backend wants
// for tens of gigabytes of packed experts. It is only possible when the data is 4-byte aligned in memory
// (true when the header length and the tensor's offset are multiples of 4, as writers that pad the header
// to 8 bytes produce) and the host is little-endian; otherwise ok is false and the caller falls back to
// Uint32. The view has the Data lifetime rules: read-only, invalid after Close.
func (t *Tensor) Uint32View() (v []uint32, ok bool, err error) {
	if err := t.checkU32(); err != nil {
		return nil, false, err
	}
	if len(t.Data) == 0 {
		return []uint32{}, true, nil
	}
	if !hostLittleEndian || uintptr(unsafe.Pointer(&t.Data[0]))%4 != 0 {
		return nil, false, nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4), true, nil
}

// Float32View is Uint32View for F32 tensors: a zero-copy []float32 over the mapping when aligned on a
// little-endian host (ok false otherwise; then use Float32). Other dtypes are an error.
func (t *Tensor) Float32View() (v []float32, ok bool, err error) {
	if t.DType != F32 {
		return nil, false, fmt.Errorf("tensor %q in %s: dtype %s, want F32 for a float32 view", t.Name, t.File, t.DType)
	}
	if err := t.checkData(); err != nil {
		return nil, false, err
	}
	if len(t.Data) == 0 {
		return []float32{}, true, nil
	}
	if !hostLittleEndian || uintptr(unsafe.Pointer(&t.Data[0]))%4 != 0 {
		return nil, false, nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4), true, nil
}

func (t *Tensor) checkU32() error {
	if t.DType != U32 {
		return fmt.Errorf("tensor %q in %s: dtype %s, want U32 (packed quantized weights)", t.Name, t.File, t.DType)
	}
	return t.checkData()
}

// checkData guards hand-built Tensors (the Store only makes consistent ones) against a Data length that does
// not match Shape and DType, so conversions never index out of range.
func (t *Tensor) checkData() error {
	size, ok := t.DType.Size()
	if !ok {
		return fmt.Errorf("tensor %q in %s: unknown dtype %q", t.Name, t.File, t.DType)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %q in %s: negative dimension in shape %v", t.Name, t.File, t.Shape)
		}
	}
	if want := t.NumElements() * size; len(t.Data) != want {
		return fmt.Errorf("tensor %q in %s: %d data bytes, shape %v of %s needs %d", t.Name, t.File, len(t.Data), t.Shape, t.DType, want)
	}
	return nil
}

// FromFloat32 builds an in-memory tensor (for Write) holding vals as dtype F32, F16 or BF16, rounding to
// nearest even when narrowing. len(vals) must equal the product of shape.
func FromFloat32(name string, dtype DType, shape []int, vals []float32) (Tensor, error) {
	t := Tensor{Name: name, DType: dtype, Shape: append([]int(nil), shape...)}
	if n := t.NumElements(); n != len(vals) {
		return Tensor{}, fmt.Errorf("tensor %q: %d values for shape %v (%d elements)", name, len(vals), shape, n)
	}
	data, err := encodeFloat32(dtype, vals)
	if err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	t.Data = data
	return t, nil
}

// FromUint32 builds an in-memory U32 tensor (for Write), e.g. packed quantized weights.
func FromUint32(name string, shape []int, vals []uint32) (Tensor, error) {
	t := Tensor{Name: name, DType: U32, Shape: append([]int(nil), shape...)}
	if n := t.NumElements(); n != len(vals) {
		return Tensor{}, fmt.Errorf("tensor %q: %d values for shape %v (%d elements)", name, len(vals), shape, n)
	}
	t.Data = make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(t.Data[4*i:], v)
	}
	return t, nil
}
