//go:build amd64 && !purego

package machine

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly loops (AVX2 + FMA): the vector unit the CPU kernels use.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// streamSumAVX2 sums n floats (n a multiple of 64) with loads only; see StreamSum.
//
//go:noescape
func streamSumAVX2(p *float32, n int) float32

// fmaPeakAVX2 runs iters iterations of 12 independent 8-lane FMAs; see FMAPeak.
func fmaPeakAVX2(iters int) float32
