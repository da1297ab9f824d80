//go:build amd64 && !purego

#include "textflag.h"

// func dotF16AVX2(x *float32, w *uint16, n int) float32
// dotF32AVX2's loop, reduction and tail, each weight vector widened from 8 halves by VCVTPH2PS.
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
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

h1loop:
	CMPQ AX, DX
	JGE  h1reduce
	VCVTPH2PS   (DI)(AX*2), Y8
	VCVTPH2PS   16(DI)(AX*2), Y9
	VCVTPH2PS   32(DI)(AX*2), Y10
	VCVTPH2PS   48(DI)(AX*2), Y11
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	VFMADD231PS 64(SI)(AX*4), Y10, Y2
	VFMADD231PS 96(SI)(AX*4), Y11, Y3
	ADDQ        $32, AX
	JMP         h1loop

h1reduce:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0

h1tail:
	CMPQ        AX, CX
	JGE         h1done
	MOVWLZX     (DI)(AX*2), BX
	VMOVD       BX, X2
	VCVTPH2PS   X2, X2
	VFMADD231SS (SI)(AX*4), X2, X0
	INCQ        AX
	JMP         h1tail

h1done:
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func widenF16AVX2(dst *float32, src *uint16, n int)
TEXT ·widenF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-8, DX

wloop:
	CMPQ      AX, DX
	JGE       wtail
	VCVTPH2PS (SI)(AX*2), Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	JMP       wloop

wtail:
	CMPQ      AX, CX
	JGE       wdone
	MOVWLZX   (SI)(AX*2), BX
	VMOVD     BX, X0
	VCVTPH2PS X0, X0
	VMOVSS    X0, (DI)(AX*4)
	INCQ      AX
	JMP       wtail

wdone:
	VZEROUPPER
	RET
