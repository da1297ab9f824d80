//go:build amd64 && !purego

package kernel

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly kernels (AVX2 + FMA). Tests flip it to cover the portable path.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dotBF16AVX2 returns Σ x[i]·bf16(w[i]) for n values: 32 per iteration into four 8-lane accumulators, a fixed
// horizontal sum, then the scalar tail in order.
//
//go:noescape
func dotBF16AVX2(x *float32, w *uint16, n int) float32

// dotQ4GroupsAVX2 writes, for each of groups groups of gb bytes (gb a multiple of 16), the sum over the group's
// bytes b_k of lo(b_k)·xe[k] + hi(b_k)·xo[k]: the 4-bit code dot product with x split into even and odd inputs.
//
//go:noescape
func dotQ4GroupsAVX2(codes *byte, xe, xo, out *float32, groups, gb int)

// dotQ8GroupsAVX2 writes, for each of groups groups of gs bytes (gs a multiple of 16), Σ code_j·x[j].
//
//go:noescape
func dotQ8GroupsAVX2(codes *byte, x, out *float32, groups, gs int)
