package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/x448/float16"
)

// DType is a safetensors element type, spelled as in the file header ("F32", "BF16", "U32", ...).
type DType string

// The element types the format defines. Only F32, F16 and BF16 convert to float32 and only U32 to uint32; the
// others are still parsed and validated so that a file holding them can be opened.
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	U8     DType = "U8"
	BOOL   DType = "BOOL"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
	F8E8M0 DType = "F8_E8M0"
)

// Size returns the number of bytes of one element and whether the dtype is known.
func (d DType) Size() (int, bool) {
	switch d {
	case F64, I64, U64:
		return 8, true
	case F32, I32, U32:
		return 4, true
	case F16, BF16, I16, U16:
		return 2, true
	case I8, U8, BOOL, F8E4M3, F8E5M2, F8E8M0:
		return 1, true
	}
	return 0, false
}

// hostLittleEndian reports whether the machine stores integers little-endian, which decides whether a
// zero-copy typed view of file bytes is possible.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// BF16ToFloat32 widens a bfloat16 bit pattern exactly.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBF16 narrows with round-to-nearest-even, keeping NaNs NaN (a plain truncation could turn a NaN with
// only low mantissa bits into an infinity).
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// decodeFloat32 converts len(dst) elements of data (dtype dt, little-endian) into dst. The caller checked
// that data holds exactly len(dst) elements.
func decodeFloat32(dst []float32, dt DType, data []byte) error {
	switch dt {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = float16.Frombits(binary.LittleEndian.Uint16(data[2*i:])).Float32()
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	default:
		return fmt.Errorf("dtype %s does not convert to float32", dt)
	}
	return nil
}

// encodeFloat32 writes vals as dtype dt (F32, F16 or BF16; narrowing rounds to nearest even).
func encodeFloat32(dt DType, vals []float32) ([]byte, error) {
	switch dt {
	case F32:
		out := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		return out, nil
	case F16:
		out := make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], float16.Fromfloat32(v).Bits())
		}
		return out, nil
	case BF16:
		out := make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], Float32ToBF16(v))
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %s is not a float dtype this encoder writes (F32, F16, BF16)", dt)
}
