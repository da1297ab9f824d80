//go:build !amd64 || purego

package kernel

// useF16C is always false here: only the portable kernels exist on this platform or with the purego tag.
var useF16C = false

func dotF16AVX2(x *float32, w *uint16, n int) float32 { noAVX2(); return 0 }
func widenF16AVX2(dst *float32, src *uint16, n int)   { noAVX2() }
func tileF16x4x2AVX2(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32) {
	noAVX2()
}
func tileF16x6x2AVX2(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32) {
	noAVX2()
}
func tileF16x1x4AVX512(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte) {
	noAVX2()
}
func tileF16x4x4AVX512(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte) {
	noAVX2()
}
