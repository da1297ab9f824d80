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

// useAVX512 selects the multi-row tiles that use AVX-512 (F, VL, BW): 32 registers and 16-lane vectors that
// hold two 8-lane chains side by side.
// They run the same per-element operations as the AVX2 one-row kernels, so the bits do not change with it.
var useAVX512 = useAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW

// The tile kernels compute a block of R input rows × O weight rows; every element runs exactly the one-row
// kernel's operations (its four 8-lane chains, one after another instead of interleaved, combined and summed
// horizontally in the same order). n must be a positive multiple of 32; ldx, ldw and ldd are row strides in
// elements; scratch holds 2·R·O·8 floats.

//go:noescape
func tileF32x4x2AVX2(x *float32, ldx int, w *float32, ldw int, n int, dst *float32, ldd int, scratch *float32)

//go:noescape
func tileBF16x4x2AVX2(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32)

// The AVX-512 tiles also prefetch 8·n bytes from pf into L2 while they run (forwardDenseAVX2 points pf at the
// next tile's weights), so a tile's weights arrive while the previous tile computes from cache.

//go:noescape
func tileF32x4x4AVX512(x *float32, ldx int, w *float32, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte)

//go:noescape
func tileBF16x4x4AVX512(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte)

// tileF32x1x4AVX512 and tileBF16x1x4AVX512 are the 4 × 4 tiles for one input row (a decode step): 4 weight
// rows streamed at once, each element with dotF32AVX2's (dotBF16AVX2's) operations.

//go:noescape
func tileF32x1x4AVX512(x *float32, ldx int, w *float32, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte)

//go:noescape
func tileBF16x1x4AVX512(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte)

// The quantized row kernels run dotQ4RowAVX2/dotQ8RowAVX2 for 8, 4 or 1 input rows sharing one decode of each
// 16 code bytes, with x packed per 16-byte step (packQuantRows) and 16-lane vectors holding two of the one-row
// kernel's chains. They also compute each row's bias term Σ_g b_g·xs_rg (xsT: group sums as [group][row]) in
// the scalar loop's order. out[r] gets row r's scaled product and out[R+r] its bias term.

//go:noescape
func dotQ4Rows8AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32)

//go:noescape
func dotQ4Rows4AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32)

//go:noescape
func dotQ8Rows8AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32)

//go:noescape
func dotQ8Rows4AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32)

// The 4-bit one-row kernels are specialised by group size (steps unrolled, codes prefetched ahead) and run
// nrows consecutive weight rows, dst[o] = scaled product + bias term. dotQ8Rows1AVX512 is quantrows with R = 1.

//go:noescape
func dotQ8Rows1AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32)

//go:noescape
func dotQ4Row1G32AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, nrows int, dst *float32)

//go:noescape
func dotQ4Row1G64AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, nrows int, dst *float32)

//go:noescape
func dotQ4Row1G128AVX512(codes *byte, xp, scales, biases, xsT *float32, groups, nrows int, dst *float32)

// The State variants run the 8- and 4-row kernels over a range of groups, resuming from and saving to state
// (row r's 8-lane scaled accumulator at state[8r:8r+8], its bias term at state[8R+r]), so a product can be
// split along In into cache-sized blocks without changing any operation; finishQuant adds the horizontal sum.

//go:noescape
func dotQ4Rows8StateAVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32)

//go:noescape
func dotQ4Rows4StateAVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32)

//go:noescape
func dotQ8Rows8StateAVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32)

//go:noescape
func dotQ8Rows4StateAVX512(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32)

// The 4x2 State kernels run dotQ4Rows4StateAVX512/dotQ8Rows4StateAVX512 for two weight rows at once (codes
// rowBytes apart, scales and biases ng apart), loading each packed input vector once for both; state[0:36]
// belongs to the first weight row and state[36:72] to the second.

//go:noescape
func dotQ4Rows4x2StateAVX512(codes *byte, rowBytes int, xp, scales, biases, xsT *float32, ng, groups, gb int, state *float32)

//go:noescape
func dotQ8Rows4x2StateAVX512(codes *byte, rowBytes int, xp, scales, biases, xsT *float32, ng, groups, gb int, state *float32)

// unpackBitsAVX2 widens blocks·8 codes of a bits-bit stream (2, 3, 5 or 6 bits) at src to float32 at dst
// with the tables of unpackTabs; each block reads 8 bytes from its start (see unpackStream for the tail).
//
//go:noescape
func unpackBitsAVX2(dst *float32, src *byte, blocks, bits int, ctl *byte, shifts *uint32, mask uint32)

// unpackBytesAVX512 is unpackBitsAVX2 writing one byte per code.
//
//go:noescape
func unpackBytesAVX512(dst *byte, src *byte, blocks, bits int, ctl *byte, shifts *uint32, mask uint32)

// dotQbRowsAVX512 is dotQ8Rows1AVX512 for nrows weight rows of 2-, 3-, 5- or 6-bit codes, widened in registers
// with the tables of qbTabs (see simd_amd64.s).
//
//go:noescape
func dotQbRowsAVX512(codes *byte, rowBytes int, xp, scales, biases, xsT *float32, groups, steps, nrows int, dst *float32, stepBytes int, tab *byte)

// The 16x2 kernels (gen_tile.py quant16x2) run 16 packed input rows against weight rows o and o+1 (codes
// next bytes on, scales and biases nextS bytes on; 0 and 0 repeat row o), decoding each group of codes once
// for all 16 rows; per element the operations of dotQ4RowAVX2/dotQ8RowAVX2. Row i's results go to dst[i·ldd]
// and (nout 2) dst[i·ldd+1] for i < nrows (the rows past nrows are padding); state is 288 floats of scratch.

//go:noescape
func dotQ4Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ4Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ8Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ8Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

// The 16x2 kernels of 2-, 3-, 5- and 6-bit codes are the 8-bit ones widening each step's codes in registers.

//go:noescape
func dotQ2Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ2Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ3Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ3Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ5Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ5Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ6Rows16x2G32AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ6Rows16x2G64AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ2Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ3Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ4Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ5Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ6Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

//go:noescape
func dotQ8Rows16x2G128AVX512(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)
