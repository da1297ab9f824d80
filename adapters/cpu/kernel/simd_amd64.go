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

// dotBF16x2AVX2 is dotBF16AVX2 for two input rows against one weight row (out[0], out[1]); per row it runs
// exactly dotBF16AVX2's operations, so results do not depend on how rows are paired.
//
//go:noescape
func dotBF16x2AVX2(x0, x1 *float32, w *uint16, n int, out *float32)

// dotQ4RowAVX2 returns Σ_g scales[g]·Σ_{k<gb} (lo(b_k)·xe[k] + hi(b_k)·xo[k]) over groups groups of gb bytes,
// folding each group's scale into one vector accumulator (one horizontal sum per row).
//
//go:noescape
func dotQ4RowAVX2(codes *byte, xe, xo, scales *float32, groups, gb int) float32

// dotQ4Row2AVX2 is dotQ4RowAVX2 for two input rows sharing one decode of the codes (out[0], out[1]); per row
// the same operations as dotQ4RowAVX2.
//
//go:noescape
func dotQ4Row2AVX2(codes *byte, xe0, xo0, xe1, xo1, scales *float32, groups, gb int, out *float32)

// dotF32AVX2 returns Σ x[i]·w[i] (the same lane structure as dotBF16AVX2).
//
//go:noescape
func dotF32AVX2(x, w *float32, n int) float32

// dotF32x2AVX2 is dotF32AVX2 for two input rows against one weight row (out[0], out[1]).
//
//go:noescape
func dotF32x2AVX2(x0, x1, w *float32, n int, out *float32)

// dotQ8RowAVX2 returns Σ_g scales[g]·Σ_{j<gs} code_j·x[j] over groups groups of gs bytes, folding each group's
// scale into one vector accumulator.
//
//go:noescape
func dotQ8RowAVX2(codes *byte, x, scales *float32, groups, gs int) float32

// dotQ8Row2AVX2 is dotQ8RowAVX2 for two input rows sharing one decode of the codes (out[0], out[1]).
//
//go:noescape
func dotQ8Row2AVX2(codes *byte, x0, x1, scales *float32, groups, gs int, out *float32)

// dotCodesRowAVX2 returns Σ_g scales[g]·Σ_{j<gs} codes[j]·x[j] for codes already widened to float32 (the bit
// widths without a direct kernel), folding each group's scale into one vector accumulator.
//
//go:noescape
func dotCodesRowAVX2(codes, x, scales *float32, groups, gs int) float32

// dotCodesRow2AVX2 is dotCodesRowAVX2 for two input rows (out[0], out[1]); per row the same operations.
//
//go:noescape
func dotCodesRow2AVX2(codes, x0, x1, scales *float32, groups, gs int, out *float32)
