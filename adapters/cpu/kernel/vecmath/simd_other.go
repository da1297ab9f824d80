//go:build !amd64 || purego

package vecmath

// useAVX2 and useAVX512 are always false here: only the portable loops exist on this platform or with the
// purego tag.
var useAVX2, useAVX512 = false, false

func noAVX2() { panic("vecmath: no AVX2 kernels on this platform") }

func addScaledAVX2(dst, x *float32, a float32, n int)                           { noAVX2() }
func decayRank1AVX2(S, S0, khat, delta *float32, alpha float32, rows, dk int)   { noAVX2() }
func decayRank1AVX512(S, S0, khat, delta *float32, alpha float32, rows, dk int) { noAVX2() }

func attnScoresAVX512(s *float32, lds int, q *float32, nq int, k *float32, kstride, n, d int, scale float32) {
	noAVX2()
}
func attnValuesAVX512(o, s *float32, lds, nq int, v *float32, vstride, n, d int) { noAVX2() }

func siluFastAVX2(dst, x *float32, n int)                { noAVX2() }
func sigmoidFastAVX2(dst, x *float32, n int)             { noAVX2() }
func expFastAVX2(dst, x *float32, n int)                 { noAVX2() }
func expSubFastAVX512(dst, x *float32, n int, m float32) { noAVX2() }
func swigluFastAVX2(dst, gate, up *float32, n int)       { noAVX2() }

func gdnStepAVX2(S, src, k, q *float32, n int, alpha, beta, v float32, out *[2]float32)   { noAVX2() }
func gdnStepAVX512(S, src, k, q *float32, n int, alpha, beta, v float32, out *[2]float32) { noAVX2() }
func gdnStep4AVX512(S, src, k, q *float32, n, stride int, alpha, beta float32, v *float32, out *[8]float32) {
	noAVX2()
}
func gdnStep2AVX2(S, src, k, q *float32, n, stride int, alpha, beta float32, v *float32, out *[4]float32) {
	noAVX2()
}
func gdnRun4x64AVX512(S, src, k, q, v, alpha, beta, o, d *float32, T, kvStride, abStride, oStride, dStride int) {
	noAVX2()
}
func gdnRun2x128AVX512(S, src, k, q, v, alpha, beta, o, d *float32, T, kvStride, abStride, oStride, dStride int) {
	noAVX2()
}
