//go:build !amd64 || purego

package kernel

var useAVX2 = false

func dotBF16AVX2(x *float32, w *uint16, n int) float32 {
	panic("kernel: no AVX2 kernels on this platform")
}
func dotQ4GroupsAVX2(codes *byte, xe, xo, out *float32, g, gb int) {
	panic("kernel: no AVX2 kernels on this platform")
}
func dotQ8GroupsAVX2(codes *byte, x, out *float32, g, gs int) {
	panic("kernel: no AVX2 kernels on this platform")
}

func dotBF16x2AVX2(x0, x1 *float32, w *uint16, n int, out *float32) {
	panic("kernel: no AVX2 kernels on this platform")
}
func dotQ4RowAVX2(codes *byte, xe, xo, scales *float32, groups, gb int) float32 {
	panic("kernel: no AVX2 kernels on this platform")
}
func dotQ4Row2AVX2(codes *byte, xe0, xo0, xe1, xo1, scales *float32, groups, gb int, out *float32) {
	panic("kernel: no AVX2 kernels on this platform")
}
func dotF32AVX2(x, w *float32, n int) float32 { panic("kernel: no AVX2 kernels on this platform") }
func dotF32x2AVX2(x0, x1, w *float32, n int, out *float32) {
	panic("kernel: no AVX2 kernels on this platform")
}
