package vecmath

import (
	"bytes"
	"unsafe"
)

// SameBits reports whether a and b hold the same float32 bit patterns: a NaN equals a NaN of the same bits,
// +0 and −0 differ. Rows with the same bits give every kernel the same outputs, which a product may compute
// once (the CPU backend's repeated rows).
func SameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), 4*len(a)), unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b)))
}
