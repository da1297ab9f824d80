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

// func dotQ4GroupsAVX2(codes *byte, xe, xo, out *float32, groups, gb int)
TEXT ·dotQ4GroupsAVX2(SB), NOSPLIT, $0-48
	MOVQ codes+0(FP), DI
	MOVQ xe+8(FP), SI
	MOVQ xo+16(FP), R8
	MOVQ out+24(FP), R9
	MOVQ groups+32(FP), R10
	MOVQ gb+40(FP), R11
	MOVL $0x0f, BX
	VMOVD BX, X15
	VPBROADCASTD X15, Y15

q4group:
	TESTQ R10, R10
	JE    q4done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

q4loop:
	VPMOVZXBD   (DI)(AX*1), Y4
	VPSRLD      $4, Y4, Y5
	VPAND       Y15, Y4, Y4
	VCVTDQ2PS   Y4, Y4
	VCVTDQ2PS   Y5, Y5
	VFMADD231PS (SI)(AX*4), Y4, Y0
	VFMADD231PS (R8)(AX*4), Y5, Y1
	VPMOVZXBD   8(DI)(AX*1), Y6
	VPSRLD      $4, Y6, Y7
	VPAND       Y15, Y6, Y6
	VCVTDQ2PS   Y6, Y6
	VCVTDQ2PS   Y7, Y7
	VFMADD231PS 32(SI)(AX*4), Y6, Y2
	VFMADD231PS 32(R8)(AX*4), Y7, Y3
	ADDQ        $16, AX
	CMPQ        AX, R11
	JLT         q4loop

	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	MOVSS        X0, (R9)
	ADDQ         $4, R9
	ADDQ         R11, DI
	LEAQ         (SI)(R11*4), SI
	LEAQ         (R8)(R11*4), R8
	DECQ         R10
	JMP          q4group

q4done:
	VZEROUPPER
	RET

// func dotQ8GroupsAVX2(codes *byte, x, out *float32, groups, gs int)
TEXT ·dotQ8GroupsAVX2(SB), NOSPLIT, $0-40
	MOVQ codes+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ out+16(FP), R9
	MOVQ groups+24(FP), R10
	MOVQ gs+32(FP), R11

q8group:
	TESTQ R10, R10
	JE    q8done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ   AX, AX

q8loop:
	VPMOVZXBD   (DI)(AX*1), Y4
	VCVTDQ2PS   Y4, Y4
	VFMADD231PS (SI)(AX*4), Y4, Y0
	VPMOVZXBD   8(DI)(AX*1), Y5
	VCVTDQ2PS   Y5, Y5
	VFMADD231PS 32(SI)(AX*4), Y5, Y1
	ADDQ        $16, AX
	CMPQ        AX, R11
	JLT         q8loop

	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	MOVSS        X0, (R9)
	ADDQ         $4, R9
	ADDQ         R11, DI
	LEAQ         (SI)(R11*4), SI
	DECQ         R10
	JMP          q8group

q8done:
	VZEROUPPER
	RET
