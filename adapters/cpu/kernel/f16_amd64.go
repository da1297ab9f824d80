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

// widenF16AVX2 converts n half-precision values at src to float32 at dst (exact).
//
//go:noescape
func widenF16AVX2(dst *float32, src *uint16, n int)
