//go:build amd64 && !purego

package vecmath

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly loops (AVX2 + FMA). Tests flip it to cover the portable path.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// useAVX512 selects the AVX-512 (F, VL, BW) kernels: the attention kernels and the wider Gated DeltaNet steps
// (the same bits as AVX2's).
var useAVX512 = useAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW

// addScaledAVX2 is AddScaled's loop for n floats (a multiple of 8): dst[j] + float32(a·x[j]).
//
//go:noescape
func addScaledAVX2(dst, x *float32, a float32, n int)

// decayRank1AVX2 is DecayRank1 over rows rows of dk floats (dk a multiple of 8).
//
//go:noescape
func decayRank1AVX2(S, S0, khat, delta *float32, alpha float32, rows, dk int)

// decayRank1AVX512 is decayRank1AVX2 on 16 lanes (dk a multiple of 16).
//
//go:noescape
func decayRank1AVX512(S, S0, khat, delta *float32, alpha float32, rows, dk int)

// The fast mode's attention kernels (gen_attn.py; attn.go).

//go:noescape
func attnScoresAVX512(s *float32, lds int, q *float32, nq int, k *float32, kstride, n, d int, scale float32)

//go:noescape
func attnValuesAVX512(o, s *float32, lds, nq int, v *float32, vstride, n, d int)

// The fast-mode activations over n floats (a positive multiple of 8); see fastmath.go.

//go:noescape
func siluFastAVX2(dst, x *float32, n int)

//go:noescape
func sigmoidFastAVX2(dst, x *float32, n int)

//go:noescape
func expFastAVX2(dst, x *float32, n int)

//go:noescape
func expSubFastAVX512(dst, x *float32, n int, m float32)

//go:noescape
func swigluFastAVX2(dst, gate, up *float32, n int)

// gdnStepAVX512 and gdnStepAVX2 are GDNStepFast for n a positive multiple of 32; out gets o and d.
//
//go:noescape
func gdnStepAVX512(S, src, k, q *float32, n int, alpha, beta, v float32, out *[2]float32)

//go:noescape
func gdnStepAVX2(S, src, k, q *float32, n int, alpha, beta, v float32, out *[2]float32)

// gdnStep4AVX512 is gdnStepAVX512 on four rows side by side (gen_gdn.py): rows r < 4 at S + r·stride and
// src + r·stride, v[r]; out[r] gets row r's o, out[4+r] its δ.
//
//go:noescape
func gdnStep4AVX512(S, src, k, q *float32, n, stride int, alpha, beta float32, v *float32, out *[8]float32)

// gdnRun4x64AVX512 is gdnStep4AVX512 over T steps of four 64-value rows held in registers (gen_gdn.py): the rows
// at src + 64r are read once and written to S + 64r after the last step; step t reads k, q and v at t·kvStride
// floats, α and β at t·abStride, and writes o at t·oStride and δ at d + t·dStride. gdnRun2x128AVX512 is the
// same on two 128-value rows.
//
//go:noescape
func gdnRun4x64AVX512(S, src, k, q, v, alpha, beta, o, d *float32, T, kvStride, abStride, oStride, dStride int)

//go:noescape
func gdnRun2x128AVX512(S, src, k, q, v, alpha, beta, o, d *float32, T, kvStride, abStride, oStride, dStride int)

// gdnStep2AVX2 is gdnStepAVX2 on two rows side by side (gen_gdn.py): rows r < 2 at S + r·stride and
// src + r·stride, v[r]; out[r] gets row r's o, out[2+r] its δ.
//
//go:noescape
func gdnStep2AVX2(S, src, k, q *float32, n, stride int, alpha, beta float32, v *float32, out *[4]float32)
