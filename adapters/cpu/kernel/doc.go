// Package kernel holds the deterministic matrix products of the pure-Go reference backend: Linear, against
// f32, bf16, f16 and MLX affine-quantized weights, in both kernel modes, and the Pool its loops run on (a
// workers.Pool with the kernel mode). The vector and row operations (RMSNorm, RoPE, softmax, the activations,
// the fast mode's float32 arithmetic, its Gated DeltaNet step and attention kernels) are package vecmath's.
//
// Determinism contract: every output element is computed by exactly one goroutine with a reduction order that
// depends only on the operand lengths, never on the number of rows in the call, on how rows are tiled or
// paired, or on the worker count. A block of T rows therefore gives bit-identical results to T one-row calls,
// for any GOMAXPROCS.
//
// Two implementations exist and each is deterministic on its own; they give different bits from each other:
//   - amd64 with AVX2+FMA (detected at start-up): hand-written assembly (simd_amd64.s) for f32 and bf16 dot
//     products (32 lanes per step in four 8-lane accumulators, fixed horizontal sum, ordered scalar tail) and
//     for quantized rows (4- and 8-bit codes read straight from the packed bytes, other widths widened once per
//     weight row; each group's scale folded into a vector accumulator). Two input rows share one pass over a
//     weight row, with per-row operations identical to the one-row kernels.
//     Blocks of 4 input rows × 2 weight rows (f32/bf16) go through tile kernels that run each element's chains
//     one after another with the same operations; the AVX-512 tiles (4 × 4, and 8/4-row 4- and 8-bit kernels
//     that share one decode of the codes) use 16-lane vectors holding two of those 8-lane chains side by side
//     and add them in the same order, so on a CPU with AVX-512 (F, VL, BW) the bits equal the AVX2 kernels'.
//     Multi-row 4/8-bit products run along In in L1-sized blocks, keeping each element's accumulator between
//     blocks (no operation changes); blocks of 16 input rows (groups of 32 or 64) decode each group of codes
//     once for all 16 rows, two weight rows at a time. 2-, 3-, 5- and 6-bit codes are widened (AVX2/AVX-512
//     shuffles and variable shifts, 8 codes per step): to float32 rows for the AVX2 kernels, and with AVX-512 to
//     bytes, a chunk of weight rows at a time, for the 8-bit kernels, whose operations the AVX2 ones share.
//     gen_tile.py generates tile_amd64.s. Without AVX-512, products of 3 or more rows at every quantized width
//     go through the AVX2 multi-row kernels (quantrows.go; gen_rows.py generates rows_amd64.s): each group of
//     a weight row's codes is decoded into registers once and applied to every input row in turn, along In
//     in L1-sized blocks, each element's accumulator waiting in memory between groups (2-, 3-, 5- and 6-bit
//     codes widened to float32 a chunk of weight rows at a time); f32/bf16 blocks of 6 rows go through 6 × 2
//     AVX2 tiles. Per element the operations stay the one-row kernels'.
//     f16 weights (f16.go) compute exactly the f32 kernels' bits on the widened weights: where the CPU has
//     F16C, dotF16AVX2 and f16 twins of the f32 tiles (gen_tile.py) widen them in registers with VCVTPH2PS;
//     without it a block of weight rows is widened into scratch for the f32 kernels.
//   - everywhere else, or with the purego build tag: pure Go plus github.com/viterin/vek (vek32.Dot has a fixed
//     reduction order for a given length).
//
// ModeFast (a Pool's kernel mode, opt-in; see fast.go) lives beside these reference kernels: quantized
// products (every width) with inputs quantized to int8 per block of 32 and integer dot products, R input
// rows × W weight rows per kernel call so each step of codes is decoded once for up to 8 rows: AVX512-VNNI
// (gen_fast.py generates fast_amd64.s) or, without VNNI, AVX2 (VPMADDUBSW on nibble-split codes, up to 4
// rows; gen_fast_avx2.py generates fast_avx2_amd64.s). The fast mode's float32 SiLU, sigmoid and Gated
// DeltaNet step are vecmath's (SiLUFast, GDNStepFast). It is not bit-identical to the reference, but it keeps
// the same contract within itself (independent of rows, worker count and CPU: the portable Go path in
// fastref.go gives the kernels' bits).
//
// Quantized products use y_r = Σ_g (s_rg·Σ_{j∈g} q_rj x_j + b_rg·Σ_{j∈g} x_j) on the packed codes; no matrix is
// ever dequantized as a whole.
//
// It is exported (rather than internal) so the DFlash drafter package can share the Linear type, the kernels
// and the worker pool with the target.
package kernel
