//go:build amd64 && !purego

package kernel

import "golang.org/x/sys/cpu"

// useF16C selects the f16 kernels (AVX2 + FMA + F16C's VCVTPH2PS). Tests flip it to cover the portable path.
var useF16C = useAVX2 && cpu.X86.HasF16C

// dotF16AVX2 returns Σ x[i]·f16(w[i]) for n values with exactly dotF32AVX2's operations on the widened
// weights: 32 per iteration into four 8-lane accumulators, a fixed horizontal sum, then the scalar tail in
// order.
//
//go:noescape
func dotF16AVX2(x *float32, w *uint16, n int) float32

// The f16 tiles: tileBF16x4x2AVX2, tileBF16x6x2AVX2 and tileBF16x4x4AVX512 with the weights widened by
// VCVTPH2PS, so every element runs dotF16AVX2's (dotF32AVX2's) operations (gen_tile.py).

//go:noescape
func tileF16x4x2AVX2(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32)

//go:noescape
func tileF16x6x2AVX2(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32)

//go:noescape
func tileF16x4x4AVX512(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte)

// tileF16x1x4AVX512 is tileF16x4x4AVX512 for one input row (a decode step).
//
//go:noescape
func tileF16x1x4AVX512(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte)

// widenF16AVX2 converts n half-precision values at src to float32 at dst (exact).
//
//go:noescape
func widenF16AVX2(dst *float32, src *uint16, n int)
