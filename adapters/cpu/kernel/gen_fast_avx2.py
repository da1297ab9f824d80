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
e()
for nibble in (True, False):
    form = "Q4" if nibble else "Q8"
    for R in (1, 2, 4):
        kernel(f"fast{form}R{R}AVX2", nibble, R)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_avx2_amd64.s"), "w").write("\n".join(out) + "\n")
