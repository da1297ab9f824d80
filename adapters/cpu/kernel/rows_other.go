//go:build !amd64 || purego

package kernel

func dotQ4RowsG32AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func dotQ4RowsG64AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func dotQ4RowsG128AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func dotQ8RowsG32AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func dotQ8RowsG64AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func dotQ8RowsG128AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func dotFRowsG32AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func dotFRowsG64AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func dotFRowsG128AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int) {
	noAVX2()
}
func tileF32x6x2AVX2(x *float32, ldx int, w *float32, ldw int, n int, dst *float32, ldd int, scratch *float32) {
	noAVX2()
}
func tileBF16x6x2AVX2(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32) {
	noAVX2()
}
