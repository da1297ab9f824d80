//go:build amd64 && !purego

#include "textflag.h"

// func dotBF16AVX2(x *float32, w *uint16, n int) float32
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-32, DX

bf16loop:
	CMPQ AX, DX
	JGE  bf16reduce
	VPMOVZXWD   (DI)(AX*2), Y4
	VPSLLD      $16, Y4, Y4
	VFMADD231PS (SI)(AX*4), Y4, Y0
	VPMOVZXWD   16(DI)(AX*2), Y5
	VPSLLD      $16, Y5, Y5
	VFMADD231PS 32(SI)(AX*4), Y5, Y1
	VPMOVZXWD   32(DI)(AX*2), Y6
	VPSLLD      $16, Y6, Y6
	VFMADD231PS 64(SI)(AX*4), Y6, Y2
	VPMOVZXWD   48(DI)(AX*2), Y7
	VPSLLD      $16, Y7, Y7
	VFMADD231PS 96(SI)(AX*4), Y7, Y3
	ADDQ        $32, AX
	JMP         bf16loop

bf16reduce:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0

bf16tail:
	CMPQ        AX, CX
	JGE         bf16done
	MOVWLZX     (DI)(AX*2), BX
	SHLL        $16, BX
	VMOVD       BX, X2
	VFMADD231SS (SI)(AX*4), X2, X0
	INCQ        AX
	JMP         bf16tail

bf16done:
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotBF16x2AVX2(x0, x1 *float32, w *uint16, n int, out *float32)
// Two rows against one bf16 weight row: per row exactly the operations of dotBF16AVX2.
TEXT ·dotBF16x2AVX2(SB), NOSPLIT, $0-40
	MOVQ x0+0(FP), SI
	MOVQ x1+8(FP), R8
	MOVQ w+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-32, DX

b2loop:
	CMPQ AX, DX
	JGE  b2reduce
	VPMOVZXWD   (DI)(AX*2), Y8
	VPSLLD      $16, Y8, Y8
	VPMOVZXWD   16(DI)(AX*2), Y9
	VPSLLD      $16, Y9, Y9
	VPMOVZXWD   32(DI)(AX*2), Y10
	VPSLLD      $16, Y10, Y10
	VPMOVZXWD   48(DI)(AX*2), Y11
	VPSLLD      $16, Y11, Y11
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	VFMADD231PS 64(SI)(AX*4), Y10, Y2
	VFMADD231PS 96(SI)(AX*4), Y11, Y3
	VFMADD231PS (R8)(AX*4), Y8, Y4
	VFMADD231PS 32(R8)(AX*4), Y9, Y5
	VFMADD231PS 64(R8)(AX*4), Y10, Y6
	VFMADD231PS 96(R8)(AX*4), Y11, Y7
	ADDQ        $32, AX
	JMP         b2loop

b2reduce:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VADDPS       Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS       X5, X4, X4
	VHADDPS      X4, X4, X4
	VHADDPS      X4, X4, X4

b2tail:
	CMPQ        AX, CX
	JGE         b2done
	MOVWLZX     (DI)(AX*2), BX
	SHLL        $16, BX
	VMOVD       BX, X2
	VFMADD231SS (SI)(AX*4), X2, X0
	VFMADD231SS (R8)(AX*4), X2, X4
	INCQ        AX
	JMP         b2tail

b2done:
	VZEROUPPER
	MOVSS X0, (R9)
	MOVSS X4, 4(R9)
	RET

// func dotQ4RowAVX2(codes *byte, xe, xo, scales *float32, groups, gb int) float32
// Σ_g scales[g]·(Σ over the group's bytes of lo·xe + hi·xo), the scale folded into a vector accumulator.
TEXT ·dotQ4RowAVX2(SB), NOSPLIT, $0-52
	MOVQ codes+0(FP), DI
	MOVQ xe+8(FP), SI
	MOVQ xo+16(FP), R8
	MOVQ scales+24(FP), R9
	MOVQ groups+32(FP), R10
	MOVQ gb+40(FP), R11
	MOVL $0x0f, BX
	VMOVD BX, X15
	VPBROADCASTD X15, Y15
	VXORPS Y13, Y13, Y13

r1group:
	TESTQ R10, R10
	JE    r1done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

r1loop:
	VPMOVZXBD   (DI)(AX*1), Y8
	VPSRLD      $4, Y8, Y9
	VPAND       Y15, Y8, Y8
	VCVTDQ2PS   Y8, Y8
	VCVTDQ2PS   Y9, Y9
	VPMOVZXBD   8(DI)(AX*1), Y10
	VPSRLD      $4, Y10, Y11
	VPAND       Y15, Y10, Y10
	VCVTDQ2PS   Y10, Y10
	VCVTDQ2PS   Y11, Y11
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS (R8)(AX*4), Y9, Y1
	VFMADD231PS 32(SI)(AX*4), Y10, Y2
	VFMADD231PS 32(R8)(AX*4), Y11, Y3
	ADDQ        $16, AX
	CMPQ        AX, R11
	JLT         r1loop

	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VBROADCASTSS (R9), Y12
	VFMADD231PS  Y12, Y0, Y13
	ADDQ         $4, R9
	ADDQ         R11, DI
	LEAQ         (SI)(R11*4), SI
	LEAQ         (R8)(R11*4), R8
	DECQ         R10
	JMP          r1group

r1done:
	VEXTRACTF128 $1, Y13, X1
	VADDPS       X1, X13, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func dotQ4Row2AVX2(codes *byte, xe0, xo0, xe1, xo1, scales *float32, groups, gb int, out *float32)
// dotQ4RowAVX2 for two input rows sharing one decode of the codes; per row the same operations.
TEXT ·dotQ4Row2AVX2(SB), NOSPLIT, $0-72
	MOVQ codes+0(FP), DI
	MOVQ xe0+8(FP), SI
	MOVQ xo0+16(FP), R8
	MOVQ xe1+24(FP), R12
	MOVQ xo1+32(FP), R13
	MOVQ scales+40(FP), R9
	MOVQ groups+48(FP), R10
	MOVQ gb+56(FP), R11
	MOVQ out+64(FP), DX
	MOVL $0x0f, BX
	VMOVD BX, X15
	VPBROADCASTD X15, Y15
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14

r2group:
	TESTQ R10, R10
	JE    r2done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ   AX, AX

r2loop:
	VPMOVZXBD   (DI)(AX*1), Y8
	VPSRLD      $4, Y8, Y9
	VPAND       Y15, Y8, Y8
	VCVTDQ2PS   Y8, Y8
	VCVTDQ2PS   Y9, Y9
	VPMOVZXBD   8(DI)(AX*1), Y10
	VPSRLD      $4, Y10, Y11
	VPAND       Y15, Y10, Y10
	VCVTDQ2PS   Y10, Y10
	VCVTDQ2PS   Y11, Y11
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS (R8)(AX*4), Y9, Y1
	VFMADD231PS 32(SI)(AX*4), Y10, Y2
	VFMADD231PS 32(R8)(AX*4), Y11, Y3
	VFMADD231PS (R12)(AX*4), Y8, Y4
	VFMADD231PS (R13)(AX*4), Y9, Y5
	VFMADD231PS 32(R12)(AX*4), Y10, Y6
	VFMADD231PS 32(R13)(AX*4), Y11, Y7
	ADDQ        $16, AX
	CMPQ        AX, R11
	JLT         r2loop

	VBROADCASTSS (R9), Y12
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VFMADD231PS  Y12, Y0, Y13
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VADDPS       Y6, Y4, Y4
	VFMADD231PS  Y12, Y4, Y14
	ADDQ         $4, R9
	ADDQ         R11, DI
	LEAQ         (SI)(R11*4), SI
	LEAQ         (R8)(R11*4), R8
	LEAQ         (R12)(R11*4), R12
	LEAQ         (R13)(R11*4), R13
	DECQ         R10
	JMP          r2group

r2done:
	VEXTRACTF128 $1, Y13, X1
	VADDPS       X1, X13, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VEXTRACTF128 $1, Y14, X1
	VADDPS       X1, X14, X4
	VHADDPS      X4, X4, X4
	VHADDPS      X4, X4, X4
	VZEROUPPER
	MOVSS X0, (DX)
	MOVSS X4, 4(DX)
	RET

// func dotF32AVX2(x, w *float32, n int) float32
// Σ x[i]·w[i]: 32 per iteration into four 8-lane accumulators, a fixed horizontal sum, then the tail in order.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-32, DX

f1loop:
	CMPQ AX, DX
	JGE  f1reduce
	VMOVUPS     (DI)(AX*4), Y8
	VMOVUPS     32(DI)(AX*4), Y9
	VMOVUPS     64(DI)(AX*4), Y10
	VMOVUPS     96(DI)(AX*4), Y11
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	VFMADD231PS 64(SI)(AX*4), Y10, Y2
	VFMADD231PS 96(SI)(AX*4), Y11, Y3
	ADDQ        $32, AX
	JMP         f1loop

f1reduce:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0

f1tail:
	CMPQ        AX, CX
	JGE         f1done
	VMOVSS      (DI)(AX*4), X2
	VFMADD231SS (SI)(AX*4), X2, X0
	INCQ        AX
	JMP         f1tail

f1done:
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotF32x2AVX2(x0, x1, w *float32, n int, out *float32)
// dotF32AVX2 for two input rows against one weight row; per row exactly the same operations.
TEXT ·dotF32x2AVX2(SB), NOSPLIT, $0-40
	MOVQ x0+0(FP), SI
	MOVQ x1+8(FP), R8
	MOVQ w+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-32, DX

f2loop:
	CMPQ AX, DX
	JGE  f2reduce
	VMOVUPS     (DI)(AX*4), Y8
	VMOVUPS     32(DI)(AX*4), Y9
	VMOVUPS     64(DI)(AX*4), Y10
	VMOVUPS     96(DI)(AX*4), Y11
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	VFMADD231PS 64(SI)(AX*4), Y10, Y2
	VFMADD231PS 96(SI)(AX*4), Y11, Y3
	VFMADD231PS (R8)(AX*4), Y8, Y4
	VFMADD231PS 32(R8)(AX*4), Y9, Y5
	VFMADD231PS 64(R8)(AX*4), Y10, Y6
	VFMADD231PS 96(R8)(AX*4), Y11, Y7
	ADDQ        $32, AX
	JMP         f2loop

f2reduce:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VADDPS       Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS       X5, X4, X4
	VHADDPS      X4, X4, X4
	VHADDPS      X4, X4, X4

f2tail:
	CMPQ        AX, CX
	JGE         f2done
	VMOVSS      (DI)(AX*4), X2
	VFMADD231SS (SI)(AX*4), X2, X0
	VFMADD231SS (R8)(AX*4), X2, X4
	INCQ        AX
	JMP         f2tail

f2done:
	VZEROUPPER
	MOVSS X0, (R9)
	MOVSS X4, 4(R9)
	RET

// func dotQ8RowAVX2(codes *byte, x, scales *float32, groups, gs int) float32
// Σ_g scales[g]·Σ_{j<gs} code_j·x[j] over groups groups of gs bytes, the scale folded into a vector accumulator.
TEXT ·dotQ8RowAVX2(SB), NOSPLIT, $0-44
	MOVQ codes+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ scales+16(FP), R9
	MOVQ groups+24(FP), R10
	MOVQ gs+32(FP), R11
	VXORPS Y13, Y13, Y13

e1group:
	TESTQ R10, R10
	JE    e1done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ   AX, AX

e1loop:
	VPMOVZXBD   (DI)(AX*1), Y8
	VCVTDQ2PS   Y8, Y8
	VPMOVZXBD   8(DI)(AX*1), Y9
	VCVTDQ2PS   Y9, Y9
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	ADDQ        $16, AX
	CMPQ        AX, R11
	JLT         e1loop

	VADDPS       Y1, Y0, Y0
	VBROADCASTSS (R9), Y12
	VFMADD231PS  Y12, Y0, Y13
	ADDQ         $4, R9
	ADDQ         R11, DI
	LEAQ         (SI)(R11*4), SI
	DECQ         R10
	JMP          e1group

e1done:
	VEXTRACTF128 $1, Y13, X1
	VADDPS       X1, X13, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET

// func dotQ8Row2AVX2(codes *byte, x0, x1, scales *float32, groups, gs int, out *float32)
// dotQ8RowAVX2 for two input rows sharing one decode of the codes; per row the same operations.
TEXT ·dotQ8Row2AVX2(SB), NOSPLIT, $0-56
	MOVQ codes+0(FP), DI
	MOVQ x0+8(FP), SI
	MOVQ x1+16(FP), R8
	MOVQ scales+24(FP), R9
	MOVQ groups+32(FP), R10
	MOVQ gs+40(FP), R11
	MOVQ out+48(FP), DX
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14

e2group:
	TESTQ R10, R10
	JE    e2done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	XORQ   AX, AX

e2loop:
	VPMOVZXBD   (DI)(AX*1), Y8
	VCVTDQ2PS   Y8, Y8
	VPMOVZXBD   8(DI)(AX*1), Y9
	VCVTDQ2PS   Y9, Y9
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	VFMADD231PS (R8)(AX*4), Y8, Y4
	VFMADD231PS 32(R8)(AX*4), Y9, Y5
	ADDQ        $16, AX
	CMPQ        AX, R11
	JLT         e2loop

	VBROADCASTSS (R9), Y12
	VADDPS       Y1, Y0, Y0
	VFMADD231PS  Y12, Y0, Y13
	VADDPS       Y5, Y4, Y4
	VFMADD231PS  Y12, Y4, Y14
	ADDQ         $4, R9
	ADDQ         R11, DI
	LEAQ         (SI)(R11*4), SI
	LEAQ         (R8)(R11*4), R8
	DECQ         R10
	JMP          e2group

e2done:
	VEXTRACTF128 $1, Y13, X1
	VADDPS       X1, X13, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VEXTRACTF128 $1, Y14, X1
	VADDPS       X1, X14, X4
	VHADDPS      X4, X4, X4
	VHADDPS      X4, X4, X4
	VZEROUPPER
	MOVSS X0, (DX)
	MOVSS X4, 4(DX)
	RET

// func dotCodesRowAVX2(codes, x, scales *float32, groups, gs int) float32
// Σ_g scales[g]·Σ_{j<gs} codes[j]·x[j] with codes already widened to float32 (bit widths without a direct
// kernel); gs is a multiple of 16.
TEXT ·dotCodesRowAVX2(SB), NOSPLIT, $0-44
	MOVQ codes+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ scales+16(FP), R9
	MOVQ groups+24(FP), R10
	MOVQ gs+32(FP), R11
	VXORPS Y13, Y13, Y13

c1group:
	TESTQ R10, R10
	JE    c1done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ   AX, AX

c1loop:
	VMOVUPS     (DI)(AX*4), Y8
	VMOVUPS     32(DI)(AX*4), Y9
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	ADDQ        $16, AX
	CMPQ        AX, R11
	JLT         c1loop

	VADDPS       Y1, Y0, Y0
	VBROADCASTSS (R9), Y12
	VFMADD231PS  Y12, Y0, Y13
	ADDQ         $4, R9
	LEAQ         (DI)(R11*4), DI
	LEAQ         (SI)(R11*4), SI
	DECQ         R10
	JMP          c1group

c1done:
	VEXTRACTF128 $1, Y13, X1
	VADDPS       X1, X13, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET

// func dotCodesRow2AVX2(codes, x0, x1, scales *float32, groups, gs int, out *float32)
// dotCodesRowAVX2 for two input rows; per row the same operations.
TEXT ·dotCodesRow2AVX2(SB), NOSPLIT, $0-56
	MOVQ codes+0(FP), DI
	MOVQ x0+8(FP), SI
	MOVQ x1+16(FP), R8
	MOVQ scales+24(FP), R9
	MOVQ groups+32(FP), R10
	MOVQ gs+40(FP), R11
	MOVQ out+48(FP), DX
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14

c2group:
	TESTQ R10, R10
	JE    c2done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	XORQ   AX, AX

c2loop:
	VMOVUPS     (DI)(AX*4), Y8
	VMOVUPS     32(DI)(AX*4), Y9
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	VFMADD231PS (R8)(AX*4), Y8, Y4
	VFMADD231PS 32(R8)(AX*4), Y9, Y5
	ADDQ        $16, AX
	CMPQ        AX, R11
	JLT         c2loop

	VBROADCASTSS (R9), Y12
	VADDPS       Y1, Y0, Y0
	VFMADD231PS  Y12, Y0, Y13
	VADDPS       Y5, Y4, Y4
	VFMADD231PS  Y12, Y4, Y14
	ADDQ         $4, R9
	LEAQ         (DI)(R11*4), DI
	LEAQ         (SI)(R11*4), SI
	LEAQ         (R8)(R11*4), R8
	DECQ         R10
	JMP          c2group

c2done:
	VEXTRACTF128 $1, Y13, X1
	VADDPS       X1, X13, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VEXTRACTF128 $1, Y14, X1
	VADDPS       X1, X14, X4
	VHADDPS      X4, X4, X4
	VHADDPS      X4, X4, X4
	VZEROUPPER
	MOVSS X0, (DX)
	MOVSS X4, 4(DX)
	RET

// func unpackBitsAVX2(dst *float32, src *byte, blocks, bits int, ctl *byte, shifts *uint32, mask uint32)
// Widens blocks of 8 codes of a little-endian bits-bit stream (bits ≤ 6: a code spans at most two bytes) to
// exact float32: each block's 8 source bytes (only the first bits belong to it) are broadcast, ctl moves the
// two bytes holding code k into dword k, shifts[k] drops the bits below it and mask keeps bits bits.
TEXT ·unpackBitsAVX2(SB), NOSPLIT, $0-52
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         blocks+16(FP), CX
	MOVQ         bits+24(FP), DX
	MOVQ         ctl+32(FP), AX
	VMOVDQU      (AX), Y1
	MOVQ         shifts+40(FP), AX
	VMOVDQU      (AX), Y2
	MOVL         mask+48(FP), AX
	VMOVD        AX, X3
	VPBROADCASTD X3, Y3
	TESTQ        CX, CX
	JE           ubdone

ubloop:
	VPBROADCASTQ (SI), Y0
	VPSHUFB      Y1, Y0, Y0
	VPSRLVD      Y2, Y0, Y0
	VPAND        Y3, Y0, Y0
	VCVTDQ2PS    Y0, Y0
	VMOVUPS      Y0, (DI)
	ADDQ         DX, SI
	ADDQ         $32, DI
	DECQ         CX
	JNE          ubloop

ubdone:
	VZEROUPPER
	RET

// func unpackBytesAVX512(dst *byte, src *byte, blocks, bits int, ctl *byte, shifts *uint32, mask uint32)
// unpackBitsAVX2 writing each code as one byte (VPMOVDB) instead of a float32.
TEXT ·unpackBytesAVX512(SB), NOSPLIT, $0-52
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         blocks+16(FP), CX
	MOVQ         bits+24(FP), DX
	MOVQ         ctl+32(FP), AX
	VMOVDQU      (AX), Y1
	MOVQ         shifts+40(FP), AX
	VMOVDQU      (AX), Y2
	MOVL         mask+48(FP), AX
	VMOVD        AX, X3
	VPBROADCASTD X3, Y3
	TESTQ        CX, CX
	JE           uydone

uyloop:
	VPBROADCASTQ (SI), Y0
	VPSHUFB      Y1, Y0, Y0
	VPSRLVD      Y2, Y0, Y0
	VPAND        Y3, Y0, Y0
	VPMOVDB      Y0, X0
	VMOVQ        X0, (DI)
	ADDQ         DX, SI
	ADDQ         $8, DI
	DECQ         CX
	JNE          uyloop

uydone:
	VZEROUPPER
	RET

// func dotQbRowsAVX512(codes *byte, rowBytes int, xp, scales, biases, xsT *float32, groups, steps, nrows int, dst *float32, stepBytes int, tab *byte)
// dotQ8Rows1AVX512 (one packed input row, 8-bit layout) against nrows consecutive weight rows of 2-, 3-, 5- or
// 6-bit codes, widening each step's 16 codes in registers: their 16 source bytes are broadcast to the four
// 128-bit lanes, tab's shuffle (64 bytes) moves code k's two bytes into dword k, tab's shifts (16 dwords) and
// mask (16 dwords, after them) cut it out, exactly the values the 8-bit codes hold. dst[o] = scaled product +
// bias term. Each step reads 16 bytes from its start, 16-2·bits past a row's end at its last step: the caller
// keeps that read inside the codes.
TEXT ·dotQbRowsAVX512(SB), NOSPLIT, $0-96
	MOVQ      codes+0(FP), CX
	MOVQ      rowBytes+8(FP), R8
	MOVQ      scales+24(FP), R9
	MOVQ      biases+32(FP), R12
	MOVQ      nrows+64(FP), R14
	MOVQ      dst+72(FP), DX
	MOVQ      stepBytes+80(FP), BX
	MOVQ      tab+88(FP), AX
	VMOVDQU64 (AX), Z20
	VMOVDQU64 64(AX), Z21
	VMOVDQU64 128(AX), Z22

qbrow:
	MOVQ   xp+16(FP), SI
	MOVQ   xsT+40(FP), R13
	MOVQ   groups+48(FP), R10
	MOVQ   CX, DI
	VXORPS Y0, Y0, Y0
	VXORPS X13, X13, X13

qbgroup:
	VPXORD Z16, Z16, Z16
	MOVQ   steps+56(FP), R11

qbstep:
	VBROADCASTI32X4 (DI), Z8
	VPSHUFB         Z20, Z8, Z8
	VPSRLVD         Z21, Z8, Z8
	VPANDD          Z22, Z8, Z8
	VCVTDQ2PS       Z8, Z8
	VFMADD231PS     (SI), Z8, Z16
	ADDQ            $64, SI
	ADDQ            BX, DI
	DECQ            R11
	JNE             qbstep

	VBROADCASTSS  (R9), Y12
	VEXTRACTF64X4 $1, Z16, Y10
	VADDPS        Y10, Y16, Y16
	VFMADD231PS   Y12, Y16, Y0
	VMOVSS        (R12), X11
	VMULSS        (R13), X11, X11
	VADDSS        X11, X13, X13
	ADDQ          $4, R9
	ADDQ          $4, R12
	ADDQ          $4, R13
	DECQ          R10
	JNE           qbgroup

	VEXTRACTF128 $1, Y0, X10
	VADDPS       X10, X0, X10
	VHADDPS      X10, X10, X10
	VHADDPS      X10, X10, X10
	VADDSS       X13, X10, X10
	VMOVSS       X10, (DX)
	ADDQ         $4, DX
	ADDQ         R8, CX
	DECQ         R14
	JNE          qbrow
	VZEROUPPER
	RET
