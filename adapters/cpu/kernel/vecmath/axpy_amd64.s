//go:build amd64 && !purego

#include "textflag.h"

// func addScaledAVX2(dst, x *float32, a float32, n int)
// dst[j] = dst[j] + a·x[j] for n floats (n a multiple of 8): the product rounded (VMULPS), then the add
// (VADDPS), the operations AddScaled's portable form runs, in one pass instead of two.
TEXT ·addScaledAVX2(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	VBROADCASTSS a+16(FP), Y15
	MOVQ         n+24(FP), CX
	SHLQ         $2, CX
	ADDQ         DI, CX
	MOVQ         CX, DX
	SUBQ         $96, DX

axpy32:
	CMPQ    DI, DX
	JGE     axpy8
	VMULPS  (SI), Y15, Y0
	VMULPS  32(SI), Y15, Y1
	VMULPS  64(SI), Y15, Y2
	VMULPS  96(SI), Y15, Y3
	VADDPS  (DI), Y0, Y0
	VADDPS  32(DI), Y1, Y1
	VADDPS  64(DI), Y2, Y2
	VADDPS  96(DI), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	JMP     axpy32

axpy8:
	CMPQ    DI, CX
	JGE     axpydone
	VMULPS  (SI), Y15, Y0
	VADDPS  (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	JMP     axpy8

axpydone:
	VZEROUPPER
	RET

// func decayRank1AVX2(S, S0, khat, delta *float32, alpha float32, rows, dk int)
// S[i·dk+j] = float32(alpha·S0[i·dk+j]) + float32(delta[i]·khat[j]) for rows rows of dk floats (dk a multiple of
// 8): ScaleInto's product, then AddScaled's product and add, element by element, in one pass over the rows.
// S may be S0.
TEXT ·decayRank1AVX2(SB), NOSPLIT, $0-56
	MOVQ         S+0(FP), DI
	MOVQ         S0+8(FP), SI
	MOVQ         delta+24(FP), R8
	VBROADCASTSS alpha+32(FP), Y15
	MOVQ         rows+40(FP), CX
	MOVQ         dk+48(FP), R11
	SHLQ         $2, R11

dr1row:
	TESTQ        CX, CX
	JE           dr1done
	VBROADCASTSS (R8), Y14
	MOVQ         khat+16(FP), DX
	XORQ         BX, BX

dr1col:
	VMULPS  (SI)(BX*1), Y15, Y0
	VMULPS  (DX)(BX*1), Y14, Y1
	VADDPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, R11
	JLT     dr1col
	ADDQ    R11, DI
	ADDQ    R11, SI
	ADDQ    $4, R8
	DECQ    CX
	JMP     dr1row

dr1done:
	VZEROUPPER
	RET

// func decayRank1AVX512(S, S0, khat, delta *float32, alpha float32, rows, dk int)
// decayRank1AVX2 on 16 lanes (dk a multiple of 16): the same two products and add for every element, so the same
// bits, with half the instructions. S may be S0 (each vector is read before it is written).
TEXT ·decayRank1AVX512(SB), NOSPLIT, $0-56
	MOVQ         S+0(FP), DI
	MOVQ         S0+8(FP), SI
	MOVQ         delta+24(FP), R8
	VBROADCASTSS alpha+32(FP), Z15
	MOVQ         rows+40(FP), CX
	MOVQ         dk+48(FP), R11
	SHLQ         $2, R11

dr5row:
	TESTQ        CX, CX
	JE           dr5done
	VBROADCASTSS (R8), Z14
	MOVQ         khat+16(FP), DX
	XORQ         BX, BX

dr5col:
	VMULPS  (SI)(BX*1), Z15, Z0
	VMULPS  (DX)(BX*1), Z14, Z1
	VADDPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(BX*1)
	ADDQ    $64, BX
	CMPQ    BX, R11
	JLT     dr5col
	ADDQ    R11, DI
	ADDQ    R11, SI
	ADDQ    $4, R8
	DECQ    CX
	JMP     dr5row

dr5done:
	VZEROUPPER
	RET
