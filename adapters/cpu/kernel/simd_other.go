//go:build !amd64 || purego

package kernel

// useAVX2 is always false here: only the portable kernels exist on this platform or with the purego tag.
var useAVX2 = false

func noAVX2() { panic("kernel: no AVX2 kernels on this platform") }

func dotBF16AVX2(x *float32, w *uint16, n int) float32              { noAVX2(); return 0 }
func dotBF16x2AVX2(x0, x1 *float32, w *uint16, n int, out *float32) { noAVX2() }
func dotF32AVX2(x, w *float32, n int) float32                       { noAVX2(); return 0 }
func dotF32x2AVX2(x0, x1, w *float32, n int, out *float32)          { noAVX2() }
func dotQ4RowAVX2(codes *byte, xe, xo, scales *float32, groups, gb int) float32 {
	noAVX2()
	return 0
}
func dotQ4Row2AVX2(codes *byte, xe0, xo0, xe1, xo1, scales *float32, groups, gb int, out *float32) {
	noAVX2()
}
func dotQ8RowAVX2(codes *byte, x, scales *float32, groups, gs int) float32 { noAVX2(); return 0 }
func dotQ8Row2AVX2(codes *byte, x0, x1, scales *float32, groups, gs int, out *float32) {
	noAVX2()
}
func dotCodesRowAVX2(codes, x, scales *float32, groups, gs int) float32 { noAVX2(); return 0 }
func dotCodesRow2AVX2(codes, x0, x1, scales *float32, groups, gs int, out *float32) {
	noAVX2()
}

var useAVX512 = false

func tileF32x4x2AVX2(x *float32, ldx int, w *float32, ldw int, n int, dst *float32, ldd int, scratch *float32) {
	noAVX2()
}
func tileBF16x4x2AVX2(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32) {
	noAVX2()
}
func tileF32x4x4AVX512(x *float32, ldx int, w *float32, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte) {
	noAVX2()
}
func tileBF16x4x4AVX512(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte) {
	noAVX2()
}
func tileF32x1x4AVX512(x *float32, ldx int, w *float32, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte) {
	noAVX2()
}
func tileBF16x1x4AVX512(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte) {
	noAVX2()
}

func dotQ4Rows8AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32) {
	noAVX2()
}
func dotQ4Rows4AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32) {
	noAVX2()
}
func dotQ8Rows8AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32) {
	noAVX2()
}
func dotQ8Rows4AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32) {
	noAVX2()
}
func dotQ4Rows8StateAVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32) {
	noAVX2()
}
func dotQ4Rows4StateAVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32) {
	noAVX2()
}
func dotQ8Rows8StateAVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32) {
	noAVX2()
}
func dotQ8Rows4StateAVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32) {
	noAVX2()
}
func dotQ4Row1G32AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, nrows int, dst *float32) {
	noAVX2()
}
func dotQ4Row1G64AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, nrows int, dst *float32) {
	noAVX2()
}
func dotQ4Row1G128AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, nrows int, dst *float32) {
	noAVX2()
}
func dotQ8Rows1AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32) {
	noAVX2()
}

func dotQ4Rows4x2StateAVX512(codes *byte, rowBytes int, xp, scales, biases, xsT *float32, ng, groups, gb int, state *float32) {
	noAVX2()
}
func dotQ8Rows4x2StateAVX512(codes *byte, rowBytes int, xp, scales, biases, xsT *float32, ng, groups, gb int, state *float32) {
	noAVX2()
}

func dotQ4Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ4Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ8Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ8Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}

func unpackBitsAVX2(dst *float32, src *byte, blocks, bits int, ctl *byte, shifts *uint32, mask uint32) {
	noAVX2()
}

func unpackBytesAVX512(dst *byte, src *byte, blocks, bits int, ctl *byte, shifts *uint32, mask uint32) {
	noAVX2()
}

func dotQbRowsAVX512(codes *byte, rowBytes int, xp, scales, biases, xsT *float32, groups, steps, nrows int, dst *float32, stepBytes int, tab *byte) {
	noAVX2()
}

func dotQ2Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ2Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ3Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ3Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ5Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ5Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ6Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ6Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}

func dotQ2Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ3Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ4Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ5Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ6Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
func dotQ8Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int) {
	noAVX2()
}
