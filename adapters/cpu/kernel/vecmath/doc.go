// Package vecmath holds the CPU backend's vector and row operations, everything it computes besides matrix
// products (package kernel): RMSNorm, RoPE, softmax, the activations and the element-wise arithmetic of the
// exact mode (float64 exp, each element rounded once, so vectorised and scalar forms agree bit for bit), and
// the fast mode's float32 arithmetic (fastmath.go: a clamped polynomial exp and the SiLU, sigmoid, SwiGLU and
// softmax on it; fast_gdn.go: the Gated DeltaNet step; attn.go: the AVX-512 attention kernels), each with its
// assembly (AVX2, AVX-512; gen_gdn.py and gen_attn.py generate gdn_amd64.s and attn_amd64.s) and a portable
// Go form with the same bits.
//
// Every element (or row) is computed alone, in an order that depends only on the operand lengths, so a row's
// result does not depend on the rows beside it or on how a caller splits the work between goroutines.
package vecmath
