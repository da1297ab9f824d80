# Generates fast_avx2_amd64.s: the ModeFast kernels for CPUs with AVX2 but without AVX512-VNNI (see fast.go
# for the arithmetic, fastref.go for its operation-for-operation Go form, gen_fast.py for the AVX-512 kernels).
# Run: python3 gen_fast_avx2.py
#
# A kernel runs R packed input rows (1, 2 or 4) against a.wrows weight rows, one weight row at a time, decoding
# each 32 code bytes once for all R rows. The integer dot products are VPMADDUBSW (unsigned codes × signed input
# codes, pairs summed to int16) and VPMADDWD against ones (pairs summed to int32): exact, because the codes are
# split into nibbles first (|15·127·2| per int16, |15·127·4| per nibble-form sum of two), so nothing saturates;
# 8-bit codes weigh their high nibble's sums by 16 in VPMADDWD. Each 8-lane vector is one half of the 16
# accumulator lanes, and every lane runs fastDotGo's operations in its order. Masked loads (VPMASKMOVD,
# VMASKMOVPS: lanes past the mask read nothing) keep a partial last chunk and the last biases inside their rows.
import os

out = []


def e(s=""):
    out.append(s)


# fastArgs2 field offsets (fast_avx2.go).
A = dict(codes=0, cstride=8, scales=16, biases=24, sstride=32, sstep=40, wrows=48, xp=56, chunks=64, tail=72,
         xs=80, xss=88, nb16=96, dst=104, ldd=112, perm=120, mscale=128, mscalet=160, mcode=192, mbias=320)


def rec_bytes(nibble):
    return 192 if nibble else 256


def kernel(name, nibble, R):
    RB = rec_bytes(nibble)
    pieces = 2 if nibble else 4  # 32-byte pieces of a chunk's codes
    e(f"// func {name}(a *fastArgs2)")
    e(f"// {R} input rows x 1 weight row at a time, {'4-bit' if nibble else 'byte'} codes.")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-8")
    e("\tMOVQ a+0(FP), AX")
    e(f"\tMOVQ {A['codes']}(AX), DI")
    e(f"\tMOVQ {A['scales']}(AX), R9")
    e(f"\tMOVQ {A['biases']}(AX), R8")
    e(f"\tMOVQ {A['dst']}(AX), DX")
    e(f"\tMOVQ {A['wrows']}(AX), R10")
    e(f"\tMOVQ {A['perm']}(AX), BX")
    e("\tVMOVDQU f2nib<>(SB), Y15")
    e(f"{name}_wrow:")
    e("\tMOVQ DI, R14")  # this weight row's codes, scales and biases
    e("\tMOVQ R9, R15")
    e("\tMOVQ R8, R13")
    for i in range(2 * R):
        e(f"\tVXORPS Y{i}, Y{i}, Y{i}")
    # Bias terms: lane j adds b_g·xs_g (rounded) for g ≡ j (mod 16), in group order; the last 16 groups' biases
    # are masked (the rows' group sums are zero-padded), so the lanes past the groups add +0.
    e(f"\tMOVQ {A['xs']}(AX), SI")
    e(f"\tMOVQ {A['xss']}(AX), R12")
    e(f"\tMOVQ {A['nb16']}(AX), CX")
    e(f"{name}_bias:")
    e("\tCMPQ CX, $1")
    e(f"\tJNE {name}_bfull")
    e(f"\tVMOVDQU {A['mbias']}(AX), Y12")
    e("\tVMASKMOVPS (R13), Y12, Y8")
    e(f"\tVMOVDQU {A['mbias'] + 32}(AX), Y12")
    e("\tVMASKMOVPS 32(R13), Y12, Y9")
    e(f"\tJMP {name}_bdo")
    e(f"{name}_bfull:")
    e("\tVMOVUPS (R13), Y8")
    e("\tVMOVUPS 32(R13), Y9")
    e(f"{name}_bdo:")
    e("\tMOVQ SI, R11")
    for r in range(R):
        e("\tVMULPS (R11), Y8, Y10")
        e(f"\tVADDPS Y10, Y{2 * r}, Y{2 * r}")
        e("\tVMULPS 32(R11), Y9, Y10")
        e(f"\tVADDPS Y10, Y{2 * r + 1}, Y{2 * r + 1}")
        if r < R - 1:
            e("\tADDQ R12, R11")
    e("\tADDQ $64, R13")
    e("\tADDQ $64, SI")
    e("\tDECQ CX")
    e(f"\tJNZ {name}_bias")

    def chunk(masked):
        # The chunk's scales (128/gs of them, or those of the partial chunk), permuted per piece to its lanes.
        e(f"\tVMOVDQU {A['mscalet'] if masked else A['mscale']}(AX), Y14")
        e("\tVMASKMOVPS (R15), Y14, Y13")
        for q in range(pieces):
            h = q % 2
            if masked:
                e(f"\tVMOVDQU {A['mcode'] + 32 * q}(AX), Y14")
                e(f"\tVPMASKMOVD {32 * q}(R14), Y14, Y8")
            else:
                e(f"\tVMOVDQU {32 * q}(R14), Y8")
            e("\tVPSRLW $4, Y8, Y9")
            e("\tVPAND Y15, Y8, Y8")
            e("\tVPAND Y15, Y9, Y9")
            e(f"\tVMOVDQU {32 * q}(BX), Y14")
            e("\tVPERMPS Y13, Y14, Y10")
            for r in range(R):
                o = r * RB
                a = 2 * r + h
                if nibble:
                    e(f"\tVPMADDUBSW {o + 32 * q}(SI), Y8, Y11")
                    e(f"\tVPMADDUBSW {o + 64 + 32 * q}(SI), Y9, Y12")
                    e("\tVPADDW Y12, Y11, Y11")
                    e("\tVPMADDWD f2ones<>(SB), Y11, Y11")
                else:
                    e(f"\tVPMADDUBSW {o + 32 * q}(SI), Y8, Y11")
                    e(f"\tVPMADDUBSW {o + 32 * q}(SI), Y9, Y12")
                    e("\tVPMADDWD f2ones<>(SB), Y11, Y11")
                    e("\tVPMADDWD f2sixteens<>(SB), Y12, Y12")
                    e("\tVPADDD Y12, Y11, Y11")
                e("\tVCVTDQ2PS Y11, Y11")
                e(f"\tVMULPS {o + 128 + 32 * (q if not nibble else q)}(SI), Y11, Y11")
                e("\tVMULPS Y10, Y11, Y11")
                e(f"\tVADDPS Y11, Y{a}, Y{a}")

    e(f"\tMOVQ {A['xp']}(AX), SI")
    e(f"\tMOVQ {A['sstep']}(AX), R12")
    e(f"\tMOVQ {A['chunks']}(AX), CX")
    e("\tTESTQ CX, CX")
    e(f"\tJE {name}_tail")
    e(f"{name}_chunk:")
    if R == 1:
        e("\tPREFETCHT0 1024(R14)")
    chunk(False)
    e(f"\tADDQ ${64 if nibble else 128}, R14")
    e("\tADDQ R12, R15")
    e(f"\tADDQ ${R * RB}, SI")
    e("\tDECQ CX")
    e(f"\tJNZ {name}_chunk")
    e(f"{name}_tail:")
    e(f"\tCMPQ {A['tail']}(AX), $0")
    e(f"\tJE {name}_reduce")
    chunk(True)
    e(f"{name}_reduce:")
    # dst[r·ldd] = the lanes summed by halving: (i, i+8), (i, i+4), (i, i+2), (0, 1).
    e(f"\tMOVQ {A['ldd']}(AX), CX")
    e("\tMOVQ DX, R11")
    for r in range(R):
        v = 2 * r
        e(f"\tVADDPS Y{v + 1}, Y{v}, Y{v}")
        e(f"\tVEXTRACTF128 $1, Y{v}, X10")
        e(f"\tVADDPS X10, X{v}, X{v}")
        e(f"\tVPERMILPS $0x4e, X{v}, X10")
        e(f"\tVADDPS X10, X{v}, X{v}")
        e(f"\tVMOVSHDUP X{v}, X10")
        e(f"\tVADDSS X10, X{v}, X{v}")
        e(f"\tVMOVSS X{v}, (R11)")
        if r < R - 1:
            e("\tADDQ CX, R11")
    e(f"\tADDQ {A['cstride']}(AX), DI")
    e(f"\tADDQ {A['sstride']}(AX), R9")
    e(f"\tADDQ {A['sstride']}(AX), R8")
    e("\tADDQ $4, DX")
    e("\tDECQ R10")
    e(f"\tJNZ {name}_wrow")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


def quantizer(name, nibble):
    # quantizeFastGo for one row: first every group's sum (16 lanes from +0 in order as two 8-lane vectors,
    # halved to four, then (q0+q1)+(q2+q3) by two VHADDPS), then per block of 32 inputs amax (as bits, VPMAXUD),
    # d = amax/127, inv = 1/d, codes = RNE(x·inv) (VCVTPS2DQ under the default rounding), packed to bytes in
    # input order (nibble form: even inputs' codes, then odd ones'), and d once per lane. Blocks with amax <
    # 2^-100 get zero codes and d = 0; with amax ≥ +Inf, zero codes and d = NaN.
    e(f"// func {name}(dst *byte, stride int, xs, x *float32, groups, gs int)")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-48")
    e("\tMOVQ dst+0(FP), R8")
    e("\tMOVQ stride+8(FP), R13")
    e("\tMOVQ xs+16(FP), R9")
    e("\tMOVQ x+24(FP), SI")
    e("\tMOVQ groups+32(FP), R10")
    e("\tMOVQ gs+40(FP), R11")
    e("\tMOVQ SI, DI")  # the group loop's input pointer
    e("\tMOVQ R10, R12")
    e(f"{name}_group:")
    e("\tVXORPS Y0, Y0, Y0")
    e("\tVXORPS Y1, Y1, Y1")
    e("\tXORQ CX, CX")
    e(f"{name}_scan:")
    e("\tVADDPS (DI)(CX*4), Y0, Y0")
    e("\tVADDPS 32(DI)(CX*4), Y1, Y1")
    e("\tADDQ $16, CX")
    e("\tCMPQ CX, R11")
    e(f"\tJLT {name}_scan")
    e("\tVADDPS Y1, Y0, Y0")
    e("\tVEXTRACTF128 $1, Y0, X1")
    e("\tVADDPS X1, X0, X0")
    e("\tVHADDPS X0, X0, X0")
    e("\tVHADDPS X0, X0, X0")
    e("\tVMOVSS X0, (R9)")
    e("\tADDQ $4, R9")
    e("\tLEAQ (DI)(R11*4), DI")
    e("\tDECQ R12")
    e(f"\tJNZ {name}_group")
    # Blocks: R10 = blocks left, DX = block index within the chunk.
    e("\tIMULQ R11, R10")
    e("\tSHRQ $5, R10")
    e("\tXORQ DX, DX")
    e("\tVPBROADCASTD f2abs<>(SB), Y15")
    e("\tVMOVDQU f2perm<>(SB), Y14")
    if nibble:
        e("\tVMOVDQU f2eo<>(SB), Y13")
    e("\tMOVL $0x42fe0000, AX")  # 127.0
    e("\tVMOVD AX, X12")
    e("\tMOVL $0x3f800000, AX")  # 1.0
    e("\tVMOVD AX, X11")
    e(f"{name}_block:")
    # BX: the block's code offset in the record; DI: its steps' offset.
    e("\tMOVQ DX, BX")
    e(f"\tSHLQ ${4 if nibble else 5}, BX")
    e("\tLEAQ 128(BX), DI")
    e("\tVMOVUPS (SI), Y0")
    e("\tVMOVUPS 32(SI), Y1")
    e("\tVMOVUPS 64(SI), Y2")
    e("\tVMOVUPS 96(SI), Y3")
    e("\tVPAND Y15, Y0, Y4")
    e("\tVPAND Y15, Y1, Y5")
    e("\tVPMAXUD Y5, Y4, Y4")
    e("\tVPAND Y15, Y2, Y5")
    e("\tVPMAXUD Y5, Y4, Y4")
    e("\tVPAND Y15, Y3, Y5")
    e("\tVPMAXUD Y5, Y4, Y4")
    e("\tVEXTRACTI128 $1, Y4, X5")
    e("\tVPMAXUD X5, X4, X4")
    e("\tVPSHUFD $0x4e, X4, X5")
    e("\tVPMAXUD X5, X4, X4")
    e("\tVPSHUFD $0xb1, X4, X5")
    e("\tVPMAXUD X5, X4, X4")
    e("\tVMOVD X4, AX")
    e("\tCMPL AX, $0x0d800000")
    e(f"\tJB {name}_zero")
    e("\tCMPL AX, $0x7f800000")
    e(f"\tJAE {name}_nan")
    e("\tVDIVSS X12, X4, X6")  # d = amax / 127
    e("\tVBROADCASTSS X6, Y7")
    if nibble:
        e("\tVMOVUPS X7, (R8)(DI*1)")
    else:
        e("\tVMOVUPS Y7, (R8)(DI*1)")
    e("\tVDIVSS X6, X11, X6")  # inv = 1 / d
    e("\tVBROADCASTSS X6, Y6")
    for i in range(4):
        e(f"\tVMULPS Y6, Y{i}, Y{i}")
        e(f"\tVCVTPS2DQ Y{i}, Y{i}")
    e("\tVPACKSSDW Y1, Y0, Y0")
    e("\tVPACKSSDW Y3, Y2, Y2")
    e("\tVPACKSSWB Y2, Y0, Y0")
    e("\tVPERMD Y0, Y14, Y0")  # the 32 codes in input order
    if nibble:
        e("\tVPSHUFB Y13, Y0, Y0")  # per 16: the even inputs' codes, then the odd ones'
        e("\tVPERMQ $0xd8, Y0, Y0")  # the 16 even codes, then the 16 odd ones
        e("\tVMOVDQU X0, (R8)(BX*1)")
        e("\tVEXTRACTI128 $1, Y0, 64(R8)(BX*1)")
    else:
        e("\tVMOVDQU Y0, (R8)(BX*1)")
    e(f"{name}_next:")
    e("\tADDQ $128, SI")
    e("\tINCQ DX")
    e("\tCMPQ DX, $4")
    e(f"\tJLT {name}_same")
    e("\tXORQ DX, DX")
    e("\tADDQ R13, R8")
    e(f"{name}_same:")
    e("\tDECQ R10")
    e(f"\tJNZ {name}_block")
    e("\tVZEROUPPER")
    e("\tRET")
    e(f"{name}_nan:")
    e("\tMOVL $0x7fc00000, AX")
    e(f"\tJMP {name}_special")
    e(f"{name}_zero:")
    e("\tXORL AX, AX")
    e(f"{name}_special:")
    e("\tVMOVD AX, X7")
    e("\tVPBROADCASTD X7, Y7")
    e("\tVPXOR Y0, Y0, Y0")
    if nibble:
        e("\tVMOVUPS X7, (R8)(DI*1)")
        e("\tVMOVDQU X0, (R8)(BX*1)")
        e("\tVMOVDQU X0, 64(R8)(BX*1)")
    else:
        e("\tVMOVUPS Y7, (R8)(DI*1)")
        e("\tVMOVDQU Y0, (R8)(BX*1)")
    e(f"\tJMP {name}_next")
    e()


e("// Code generated by gen_fast_avx2.py; DO NOT EDIT.")
e()
e("//go:build amd64 && !purego")
e()
e('#include "textflag.h"')
e()
e("// f2nib: the low-nibble byte mask; f2ones and f2sixteens: VPMADDWD weights.")
for i in range(8):
    e(f"DATA f2nib<>+{4*i}(SB)/4, $0x0f0f0f0f")
e("GLOBL f2nib<>(SB), RODATA|NOPTR, $32")
for i in range(8):
    e(f"DATA f2ones<>+{4*i}(SB)/4, $0x00010001")
e("GLOBL f2ones<>(SB), RODATA|NOPTR, $32")
for i in range(8):
    e(f"DATA f2sixteens<>+{4*i}(SB)/4, $0x00100010")
e("GLOBL f2sixteens<>(SB), RODATA|NOPTR, $32")
e("// f2abs: the float magnitude mask; f2perm: VPERMD indices putting VPACKSSWB's dwords in input order;")
e("// f2eo: VPSHUFB indices putting each 16 codes' even ones first, then the odd ones.")
e("DATA f2abs<>+0(SB)/4, $0x7fffffff")
e("GLOBL f2abs<>(SB), RODATA|NOPTR, $4")
for i, v in enumerate([0, 4, 1, 5, 2, 6, 3, 7]):
    e(f"DATA f2perm<>+{4*i}(SB)/4, ${v}")
e("GLOBL f2perm<>(SB), RODATA|NOPTR, $32")
eo = [2 * i for i in range(8)] + [2 * i + 1 for i in range(8)]
for half in range(2):
    for k in range(2):
        v = sum(eo[8 * k + j] << (8 * j) for j in range(8))
        e(f"DATA f2eo<>+{16*half + 8*k}(SB)/8, $0x{v:016x}")
e("GLOBL f2eo<>(SB), RODATA|NOPTR, $32")
e()
for nibble in (True, False):
    form = "Q4" if nibble else "Q8"
    for R in (1, 2, 4):
        kernel(f"fast{form}R{R}AVX2", nibble, R)
quantizer("quantizeFastQ4AVX2", True)
quantizer("quantizeFastQ8AVX2", False)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_avx2_amd64.s"), "w").write("\n".join(out) + "\n")
