//go:build amd64 && !purego

#include "textflag.h"

// func streamSumAVX2(p *float32, n int) float32
// Sums n floats (n a multiple of 64) with eight independent accumulators: 256 bytes of loads per iteration and
// nothing else, so the loop runs at the memory system's read bandwidth.
TEXT ·streamSumAVX2(SB), NOSPLIT, $0-20
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	SHLQ   $2, CX
	ADDQ   SI, CX

streamloop:
	CMPQ   SI, CX
	JGE    streamdone
	VADDPS (SI), Y0, Y0
	VADDPS 32(SI), Y1, Y1
	VADDPS 64(SI), Y2, Y2
	VADDPS 96(SI), Y3, Y3
	VADDPS 128(SI), Y4, Y4
	VADDPS 160(SI), Y5, Y5
	VADDPS 192(SI), Y6, Y6
	VADDPS 224(SI), Y7, Y7
	ADDQ   $256, SI
	JMP    streamloop

streamdone:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VADDPS       Y2, Y0, Y0
	VADDPS       Y6, Y4, Y4
	VADDPS       Y4, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func fmaPeakAVX2(iters int) float32
// iters iterations of 12 independent register-to-register 8-lane FMAs (24 FLOP each): enough chains to cover
// the FMA latency on every current x86 core, no memory traffic, so it runs at the core's f32 FMA peak.
TEXT ·fmaPeakAVX2(SB), NOSPLIT, $0-12
	MOVQ iters+0(FP), CX
	MOVL $0x3f800000, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x3f7fffff, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

peakloop:
	TESTQ CX, CX
	JE    peakdone
	VFMADD231PS Y14, Y15, Y0
	VFMADD231PS Y14, Y15, Y1
	VFMADD231PS Y14, Y15, Y2
	VFMADD231PS Y14, Y15, Y3
	VFMADD231PS Y14, Y15, Y4
	VFMADD231PS Y14, Y15, Y5
	VFMADD231PS Y14, Y15, Y6
	VFMADD231PS Y14, Y15, Y7
	VFMADD231PS Y14, Y15, Y8
	VFMADD231PS Y14, Y15, Y9
	VFMADD231PS Y14, Y15, Y10
	VFMADD231PS Y14, Y15, Y11
	DECQ        CX
	JMP         peakloop

peakdone:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y2, Y0, Y0
	VADDPS       Y3, Y0, Y0
	VADDPS       Y4, Y0, Y0
	VADDPS       Y5, Y0, Y0
	VADDPS       Y6, Y0, Y0
	VADDPS       Y7, Y0, Y0
	VADDPS       Y8, Y0, Y0
	VADDPS       Y9, Y0, Y0
	VADDPS       Y10, Y0, Y0
	VADDPS       Y11, Y0, Y0
	VZEROUPPER
	MOVSS X0, ret+8(FP)
	RET
