package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"

	"github.com/higgs-go/higgs/adapters/safetensors"
)

// ErrInexact is wrapped when values cannot be stored in the requested type without changing them (and the
// caller did not ask to round).
var ErrInexact = fmt.Errorf("gguf: not exactly representable")

// f16Exact reports whether v survives a round trip through IEEE half precision unchanged.
func f16Exact(v float32) bool {
	return float16.Fromfloat32(v).Float32() == v // NaN is never exact: weights must be finite
}

// AppendF32 appends vals as little-endian float32.
func AppendF32(dst []byte, vals []float32) []byte {
	for _, v := range vals {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

// AppendF16 appends vals as IEEE half floats. Unless round is set, a value that half precision cannot hold
// exactly is an error wrapping ErrInexact naming its index.
func AppendF16(dst []byte, vals []float32, round bool) ([]byte, error) {
	for i, v := range vals {
		h := float16.Fromfloat32(v)
		if !round && !f16Exact(v) {
			return nil, fmt.Errorf("%w in f16: value %d is %g (nearest f16 %g)", ErrInexact, i, v, h.Float32())
		}
		dst = binary.LittleEndian.AppendUint16(dst, h.Bits())
	}
	return dst, nil
}

// AppendBF16 appends vals as bfloat16, with the same exactness rule as AppendF16.
func AppendBF16(dst []byte, vals []float32, round bool) ([]byte, error) {
	for i, v := range vals {
		h := safetensors.Float32ToBF16(v)
		if !round && safetensors.BF16ToFloat32(h) != v {
			return nil, fmt.Errorf("%w in bf16: value %d is %g (nearest bf16 %g)", ErrInexact, i, v, safetensors.BF16ToFloat32(h))
		}
		dst = binary.LittleEndian.AppendUint16(dst, h)
	}
	return dst, nil
}

// AppendQ8_0Codes appends one Q8_0 block (value = scale·q) from 32 signed codes and its scale, which must be
// exact in f16 (an error wrapping ErrInexact otherwise).
func AppendQ8_0Codes(dst []byte, scale float32, q []int8) ([]byte, error) {
	if len(q) != 32 {
		return nil, fmt.Errorf("gguf: a Q8_0 block holds 32 codes, got %d", len(q))
	}
	if !f16Exact(scale) {
		return nil, fmt.Errorf("%w: Q8_0 scale %g is not an f16 value", ErrInexact, scale)
	}
	dst = binary.LittleEndian.AppendUint16(dst, float16.Fromfloat32(scale).Bits())
	for _, c := range q {
		dst = append(dst, byte(c))
	}
	return dst, nil
}

// AppendQ4_0Codes appends one Q4_0 block (value = scale·(n−8)) from 32 unsigned 4-bit codes n ∈ [0, 15] and
// its f16-exact scale. ggml packs element j in the low nibble of byte j and element j+16 in its high nibble.
func AppendQ4_0Codes(dst []byte, scale float32, n []uint8) ([]byte, error) {
	if len(n) != 32 {
		return nil, fmt.Errorf("gguf: a Q4_0 block holds 32 codes, got %d", len(n))
	}
	if !f16Exact(scale) {
		return nil, fmt.Errorf("%w: Q4_0 scale %g is not an f16 value", ErrInexact, scale)
	}
	dst = binary.LittleEndian.AppendUint16(dst, float16.Fromfloat32(scale).Bits())
	for j := range 16 {
		if n[j] > 15 || n[j+16] > 15 {
			return nil, fmt.Errorf("gguf: Q4_0 codes must be < 16, got %d and %d", n[j], n[j+16])
		}
		dst = append(dst, n[j]|n[j+16]<<4)
	}
	return dst, nil
}

// QuantizeQ8_0 appends row (a multiple of 32 long) quantized as llama.cpp's reference does: per block
// d = max|x|/127 rounded to f16, q = round(x/d). Lossy: for requantizing only.
func QuantizeQ8_0(dst []byte, row []float32) ([]byte, error) {
	if len(row)%32 != 0 {
		return nil, fmt.Errorf("gguf: Q8_0 rows are multiples of 32, got %d", len(row))
	}
	var q [32]int8
	for b := 0; b < len(row); b += 32 {
		amax := float32(0)
		for _, v := range row[b : b+32] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := float16.Fromfloat32(amax / 127).Float32()
		for j, v := range row[b : b+32] {
			if d != 0 {
				q[j] = int8(max(-127, min(127, math.Round(float64(v/d)))))
			} else {
				q[j] = 0
			}
		}
		var err error
		if dst, err = AppendQ8_0Codes(dst, d, q[:]); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// QuantizeQ4_0 appends row quantized as llama.cpp's reference does: per block, m is the value of largest
// magnitude, d = m/−8 rounded to f16, n = clamp(round(x/d)+8, 0, 15). Lossy: for requantizing only.
func QuantizeQ4_0(dst []byte, row []float32) ([]byte, error) {
	if len(row)%32 != 0 {
		return nil, fmt.Errorf("gguf: Q4_0 rows are multiples of 32, got %d", len(row))
	}
	var n [32]uint8
	for b := 0; b < len(row); b += 32 {
		var m float32
		for _, v := range row[b : b+32] {
			if math.Abs(float64(v)) > math.Abs(float64(m)) {
				m = v
			}
		}
		d := float16.Fromfloat32(m / -8).Float32()
		for j, v := range row[b : b+32] {
			if d != 0 {
				n[j] = uint8(max(0, min(15, math.Round(float64(v/d))+8)))
			} else {
				n[j] = 8
			}
		}
		var err error
		if dst, err = AppendQ4_0Codes(dst, d, n[:]); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// Decode expands data of type t (n elements) to float32 the way ggml dequantizes it, for tests and checks.
func Decode(t Type, data []byte, n int) ([]float32, error) {
	size, err := DataSize(t, []uint64{uint64(n)})
	if err != nil {
		return nil, err
	}
	if uint64(len(data)) != size {
		return nil, fmt.Errorf("gguf: %d elements of %s need %d bytes, got %d", n, t, size, len(data))
	}
	out := make([]float32, n)
	switch t {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = float16.Frombits(binary.LittleEndian.Uint16(data[2*i:])).Float32()
		}
	case BF16:
		for i := range out {
			out[i] = safetensors.BF16ToFloat32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case Q8_0:
		for b := range n / 32 {
			blk := data[34*b:]
			d := float16.Frombits(binary.LittleEndian.Uint16(blk)).Float32()
			for j := range 32 {
				out[32*b+j] = d * float32(int8(blk[2+j]))
			}
		}
	case Q4_0:
		for b := range n / 32 {
			blk := data[18*b:]
			d := float16.Frombits(binary.LittleEndian.Uint16(blk)).Float32()
			for j := range 16 {
				out[32*b+j] = d * float32(int(blk[2+j]&15)-8)
				out[32*b+j+16] = d * float32(int(blk[2+j]>>4)-8)
			}
		}
	}
	return out, nil
}
