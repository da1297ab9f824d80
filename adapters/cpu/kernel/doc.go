// Package kernel holds the deterministic CPU kernels of the pure-Go reference backend: matrix products against
// f32, bf16 and MLX affine-quantized weights, RMSNorm, RoPE, softmax and the small element-wise functions.
//
// Determinism contract: every output element is computed by exactly one goroutine with a reduction order that
// depends only on the operand lengths, never on the number of rows in the call or on the worker count. A block
// of T rows therefore gives bit-identical results to T one-row calls, for any GOMAXPROCS. Element-wise vector
// helpers use github.com/viterin/vek only for operations that round each element once (mul, add), which gives
// the same bits as scalar code; dot products use vek32.Dot, whose reduction order is fixed for a given length
// (AVX2+FMA on capable CPUs, a pure-Go loop elsewhere — results may differ between those two machines, never
// between runs on one machine).
//
// It is exported (rather than internal) so the DFlash drafter package can share weights loading, kernels and the
// worker pool with the target.
package kernel
