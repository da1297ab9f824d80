# Generates fast_amd64.s: the ModeFast kernels (see fast.go for the arithmetic they implement and fastref.go for
# its operation-for-operation Go form). Run: python3 gen_fast.py
#
# Two code forms: "nibble" (4-bit codes read straight from the packed bytes) and "byte" (8-bit codes, and 2-,
# 3-, 5- and 6-bit codes widened to bytes by the caller). A kernel runs R packed input rows (a block written by
# the quantizer: per chunk of 128 inputs, row after row, a record of the row's int8 codes and its steps) against
# W weight rows at a time, decoding each 64-byte step of every weight row once for all R rows, with
# VPDPBUSD integer dot products. Registers 16-31 force EVEX encodings (AVX512-VNNI; the VEX AVX-VNNI forms may
# be missing).
import os

out = []


def e(s=""):
    out.append(s)


# fastArgs field offsets (fast.go).
A = dict(codes=0, cstride=8, scales=16, biases=24, sstride=32, sstep=40, ngroups=48, xp=56, chunks=64, tail=72,
         xs=80, xss=88, nb16=96, dst=104, ldd=112, perm=120, kscale=128, kcode0=136, klane0=144, kcode1=152,
         klane1=160, kscalet=168, kbias=176)
# Prefetch distance (bytes ahead in the codes) for the one-row kernels, which stream the weights from memory.
FPF = 2048
# Prefetch distance (bytes ahead in the scales and biases) for the one-row kernels.
FPFB = int(os.environ.get("FPFB", "1024"))


def rec_bytes(nibble):
    # One row's record per chunk: 128 code bytes, then the steps (16 floats for nibble lanes of 8 inputs, 32 for
    # byte lanes of 4).
    return 192 if nibble else 256


def tree(v, dst):
    # Halving sum of the 16 lanes of Zv into Xdst's low lane: (i, i+8), (i, i+4), (i, i+2), (0, 1).
    e(f"\tVEXTRACTF64X4 $1, Z{v}, Y30")
    e(f"\tVADDPS Y30, Y{v}, Y{v}")
    e(f"\tVEXTRACTF32X4 $1, Y{v}, X30")
    e(f"\tVADDPS X30, X{v}, X{v}")
    e(f"\tVPERMILPS $0x4e, X{v}, X30")
    e(f"\tVADDPS X30, X{v}, X{v}")
    e(f"\tVMOVSHDUP X{v}, X30")
    e(f"\tVADDSS X30, X{v}, X{dst}")


def kernel(name, nibble, R, W):
    RB = rec_bytes(nibble)
    acc = lambda r, w: r * W + w
    e(f"// func {name}(a *fastArgs)")
    e(f"// {R} input rows x {W} weight rows at a time, {'4-bit' if nibble else 'byte'} codes.")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-8")
    e("\tMOVQ a+0(FP), AX")
    e(f"\tMOVQ {A['cstride']}(AX), BX")
    e(f"\tMOVQ {A['sstride']}(AX), R12")
    e(f"\tMOVQ {A['sstep']}(AX), R13")
    e(f"\tMOVQ {A['perm']}(AX), CX")
    e("\tVMOVDQU32 (CX), Z28")
    if not nibble:
        e("\tVMOVDQU32 64(CX), Z29")
    else:
        e("\tMOVL $0x0f, CX")
        e("\tVPBROADCASTB CX, Z31")
    e(f"\tKMOVQ {A['kscale']}(AX), K1")
    e("\tXORQ R14, R14")  # byte offset of the current weight rows' codes
    e("\tXORQ R15, R15")  # byte offset of their scales and biases
    e(f"\tMOVQ {A['dst']}(AX), DX")
    e(f"\tMOVQ {A['ngroups']}(AX), R10")
    e(f"{name}_wrows:")
    e(f"\tMOVQ {A['codes']}(AX), DI")
    e("\tADDQ R14, DI")
    e(f"\tMOVQ {A['scales']}(AX), R9")
    e("\tADDQ R15, R9")
    e(f"\tMOVQ {A['xp']}(AX), SI")
    if R == 1:
        # The biases are read only after a row's products, too late for the hardware prefetcher to keep up
        # with the codes' stream: fetch those of the rows FPFB bytes on (and the scales) ahead of time.
        e(f"\tMOVQ {A['biases']}(AX), R8")
        e("\tADDQ R15, R8")
        for w in range(W):
            e(f"\tPREFETCHT0 {FPFB + 64 * w}(R8)")
            e(f"\tPREFETCHT0 {FPFB + 64 * w}(R9)")
    for i in range(R * W):
        e(f"\tVPXORD Z{i}, Z{i}, Z{i}")

    def step_nibble(masked):
        for w in range(W):
            lo, hi = 16 + 2 * w, 17 + 2 * w
            src = "(DI)" if w == 0 else "(DI)(BX*1)"
            if masked:
                e(f"\tVMOVDQU8.Z {src}, K2, Z{lo}")
            else:
                e(f"\tVMOVDQU8 {src}, Z{lo}")
            e(f"\tVPSRLW $4, Z{lo}, Z{hi}")
            e(f"\tVPANDD Z31, Z{lo}, Z{lo}")
            e(f"\tVPANDD Z31, Z{hi}, Z{hi}")
            ssrc = "(R9)" if w == 0 else "(R9)(R12*1)"
            e(f"\tVMOVUPS.Z {ssrc}, {'K4' if masked else 'K1'}, Z30")
            e(f"\tVPERMPS Z30, Z28, Z{20 + w}")
        for r in range(R):
            o = r * RB
            e(f"\tVMOVDQU8 {o}(SI), Z22")
            e(f"\tVMOVDQU8 {o + 64}(SI), Z23")
            e(f"\tVMOVUPS {o + 128}(SI), Z24")
            for w in range(W):
                t = 25 + w
                e(f"\tVPXORD Z{t}, Z{t}, Z{t}")
                e(f"\tVPDPBUSD Z22, Z{16 + 2 * w}, Z{t}")
                e(f"\tVPDPBUSD Z23, Z{17 + 2 * w}, Z{t}")
                e(f"\tVCVTDQ2PS Z{t}, Z{t}")
                e(f"\tVMULPS Z24, Z{t}, Z{t}")
                e(f"\tVMULPS Z{20 + w}, Z{t}, Z{t}")
                a = acc(r, w)
                if masked:
                    e(f"\tVADDPS Z{t}, Z{a}, K3, Z{a}")
                else:
                    e(f"\tVADDPS Z{t}, Z{a}, Z{a}")

    def step_byte(masked):
        for w in range(W):
            ssrc = "(R9)" if w == 0 else "(R9)(R12*1)"
            e(f"\tVMOVUPS.Z {ssrc}, {'K4' if masked else 'K1'}, Z{18 + w}")
        for s in range(2):
            km, kl = ("K2", "K3") if s == 0 else ("K5", "K6")
            for w in range(W):
                src = f"{64 * s}(DI)" if w == 0 else f"{64 * s}(DI)(BX*1)"
                if masked:
                    e(f"\tVMOVDQU8.Z {src}, {km}, Z{16 + w}")
                else:
                    e(f"\tVMOVDQU8 {src}, Z{16 + w}")
                e(f"\tVPERMPS Z{18 + w}, Z{28 + s}, Z{20 + w}")
            for r in range(R):
                o = r * RB
                e(f"\tVMOVDQU8 {o + 64 * s}(SI), Z22")
                e(f"\tVMOVUPS {o + 128 + 64 * s}(SI), Z24")
                for w in range(W):
                    t = 25 + w
                    e(f"\tVPXORD Z{t}, Z{t}, Z{t}")
                    e(f"\tVPDPBUSD Z22, Z{16 + w}, Z{t}")
                    e(f"\tVCVTDQ2PS Z{t}, Z{t}")
                    e(f"\tVMULPS Z24, Z{t}, Z{t}")
                    e(f"\tVMULPS Z{20 + w}, Z{t}, Z{t}")
                    a = acc(r, w)
                    if masked:
                        e(f"\tVADDPS Z{t}, Z{a}, {kl}, Z{a}")
                    else:
                        e(f"\tVADDPS Z{t}, Z{a}, Z{a}")

    # Bias terms first: per (r, w) lane j adds b_g·xs_g (rounded) for the groups g ≡ j (mod 16), in group order;
    # the products then add onto those lanes.
    e(f"\tMOVQ {A['biases']}(AX), R9")
    e("\tADDQ R15, R9")
    e(f"\tMOVQ {A['xs']}(AX), SI")
    e(f"\tMOVQ {A['xss']}(AX), R8")
    e(f"\tMOVQ {A['nb16']}(AX), CX")
    e("\tMOVL $0xffff, R11")
    e("\tKMOVQ R11, K7")
    e(f"{name}_bias:")
    e("\tCMPQ CX, $1")
    e(f"\tJNE {name}_bfull")
    e(f"\tKMOVQ {A['kbias']}(AX), K7")
    e(f"{name}_bfull:")
    for w in range(W):
        src = "(R9)" if w == 0 else "(R9)(R12*1)"
        e(f"\tVMOVUPS.Z {src}, K7, Z{16 + w}")
    e("\tMOVQ SI, R11")
    for r in range(R):
        e("\tVMOVUPS (R11), Z22")
        for w in range(W):
            t = 25 + w
            e(f"\tVMULPS Z22, Z{16 + w}, Z{t}")
            a = acc(r, w)
            e(f"\tVADDPS Z{t}, Z{a}, K7, Z{a}")
        if r < R - 1:
            e("\tADDQ R8, R11")
    e("\tADDQ $64, R9")
    e("\tADDQ $64, SI")
    e("\tDECQ CX")
    e(f"\tJNZ {name}_bias")
    e(f"\tMOVQ {A['scales']}(AX), R9")
    e("\tADDQ R15, R9")
    e(f"\tMOVQ {A['xp']}(AX), SI")
    step = step_nibble if nibble else step_byte
    cb = 64 if nibble else 128  # code bytes per chunk
    e(f"\tMOVQ {A['chunks']}(AX), CX")
    e("\tTESTQ CX, CX")
    e(f"\tJE {name}_tail")
    e(f"{name}_chunk:")
    if R == 1:
        e(f"\tPREFETCHT0 {FPF}(DI)")
        if not nibble:
            e(f"\tPREFETCHT0 {FPF + 64}(DI)")
        if W == 2:
            e(f"\tPREFETCHT0 {FPF}(DI)(BX*1)")
            if not nibble:
                e(f"\tPREFETCHT0 {FPF + 64}(DI)(BX*1)")
    step(False)
    e(f"\tADDQ ${cb}, DI")
    e("\tADDQ R13, R9")
    e(f"\tADDQ ${R * RB}, SI")
    e("\tDECQ CX")
    e(f"\tJNZ {name}_chunk")
    e(f"{name}_tail:")
    e(f"\tCMPQ {A['tail']}(AX), $0")
    e(f"\tJE {name}_reduce")
    e(f"\tKMOVQ {A['kcode0']}(AX), K2")
    e(f"\tKMOVQ {A['klane0']}(AX), K3")
    e(f"\tKMOVQ {A['kscalet']}(AX), K4")
    if not nibble:
        e(f"\tKMOVQ {A['kcode1']}(AX), K5")
        e(f"\tKMOVQ {A['klane1']}(AX), K6")
    step(True)
    e(f"{name}_reduce:")
    # dst[r·ldd + 4w] = tree(acc).
    e(f"\tMOVQ {A['ldd']}(AX), CX")
    e("\tMOVQ DX, R11")
    for r in range(R):
        for w in range(W):
            a = acc(r, w)
            tree(a, a)
            e(f"\tVMOVSS X{a}, {4 * w}(R11)")
        if r < R - 1:
            e("\tADDQ CX, R11")
    # Next W weight rows.
    e("\tMOVQ BX, CX")
    e(f"\tIMULQ ${W}, CX")
    e("\tADDQ CX, R14")
    e("\tMOVQ R12, CX")
    e(f"\tIMULQ ${W}, CX")
    e("\tADDQ CX, R15")
    e(f"\tADDQ ${4 * W}, DX")
    e("\tDECQ R10")
    e(f"\tJNZ {name}_wrows")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


def quantizer(name, nibble, pair=False):
    # quantizeFastGo's operations for one row: the group sums (16 lanes from +0 in order, halved to 4, then
    # (q0+q1)+(q2+q3)), then per block of 32 inputs amax (as bits), d = amax/127, inv = 1/d, xq = RNE(x·inv)
    # (VCVTPS2DQ under the default rounding) placed per the form, and d once per lane. Blocks with
    # amax < 2^-100 get zero codes and d = 0; with amax ≥ +Inf, zero codes and d = NaN. With pair, amax and d
    # are per pair of blocks (64 inputs; gs a multiple of 64), each block's codes and steps placed as before.
    RB = rec_bytes(nibble)
    e(f"// func {name}(dst *byte, stride int, xs, x *float32, groups, gs int)")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-48")
    e("\tMOVQ dst+0(FP), R8")  # the current chunk's record
    e("\tMOVQ stride+8(FP), R13")
    e("\tMOVQ xs+16(FP), R9")
    e("\tMOVQ x+24(FP), SI")
    e("\tMOVQ groups+32(FP), R10")
    e("\tMOVQ gs+40(FP), R11")
    e("\tXORQ DX, DX")  # the block's index within its chunk, 0..3
    e("\tMOVL $0x7fffffff, AX")
    e("\tVPBROADCASTD AX, Z31")
    e("\tMOVL $0x42fe0000, AX")  # 127.0
    e("\tVMOVD AX, X30")
    e("\tMOVL $0x3f800000, AX")  # 1.0
    e("\tVMOVD AX, X29")
    if nibble:
        e("\tVMOVDQU32 fq8even<>(SB), Z28")
        e("\tVMOVDQU32 fq8odd<>(SB), Z27")
    e(f"{name}_group:")
    e("\tTESTQ R10, R10")
    e(f"\tJE {name}_done")
    e("\tVPXORD Z17, Z17, Z17")
    e("\tXORQ CX, CX")
    e(f"{name}_scan:")
    e("\tVADDPS (SI)(CX*4), Z17, Z17")
    e("\tADDQ $16, CX")
    e("\tCMPQ CX, R11")
    e(f"\tJLT {name}_scan")
    e("\tVEXTRACTF64X4 $1, Z17, Y18")
    e("\tVADDPS Y18, Y17, Y17")
    e("\tVEXTRACTF32X4 $1, Y17, X18")
    e("\tVADDPS X18, X17, X17")
    e("\tVMOVAPS X17, X0")
    e("\tVHADDPS X0, X0, X0")
    e("\tVHADDPS X0, X0, X0")
    e("\tVMOVSS X0, (R9)")
    e("\tXORQ CX, CX")  # floats into the group
    e(f"{name}_block:")
    # BX: this block's code offset in the record; DI: its steps' offset.
    if nibble:
        e("\tMOVQ DX, BX")
        e("\tSHLQ $4, BX")
        e("\tLEAQ 128(BX), DI")
    else:
        e("\tMOVQ DX, BX")
        e("\tSHLQ $5, BX")
        e("\tLEAQ 128(BX), DI")
    e("\tVMOVUPS (SI)(CX*4), Z21")
    e("\tVMOVUPS 64(SI)(CX*4), Z22")
    e("\tVPANDD Z31, Z21, Z16")
    e("\tVPANDD Z31, Z22, Z19")
    e("\tVPMAXUD Z19, Z16, Z16")
    if pair:
        e("\tVMOVUPS 128(SI)(CX*4), Z24")
        e("\tVMOVUPS 192(SI)(CX*4), Z25")
        e("\tVPANDD Z31, Z24, Z19")
        e("\tVPMAXUD Z19, Z16, Z16")
        e("\tVPANDD Z31, Z25, Z19")
        e("\tVPMAXUD Z19, Z16, Z16")
    e("\tVEXTRACTI64X4 $1, Z16, Y18")
    e("\tVPMAXUD Y18, Y16, Y16")
    e("\tVEXTRACTI32X4 $1, Y16, X18")
    e("\tVPMAXUD X18, X16, X16")
    e("\tVPSHUFD $0x4e, X16, X18")
    e("\tVPMAXUD X18, X16, X16")
    e("\tVPSHUFD $0xb1, X16, X18")
    e("\tVPMAXUD X18, X16, X16")
    e("\tVMOVD X16, AX")
    e("\tCMPL AX, $0x0d800000")
    e(f"\tJB {name}_zero")
    e("\tCMPL AX, $0x7f800000")
    e(f"\tJAE {name}_nan")
    e("\tVDIVSS X30, X16, X1")  # d = amax / 127
    e("\tVBROADCASTSS X1, Z3")
    e("\tVDIVSS X1, X29, X2")  # inv = 1 / d
    e("\tVBROADCASTSS X2, Z20")
    for h, (lo, hi) in enumerate([(21, 22), (24, 25)] if pair else [(21, 22)]):
        cb = db = 16 * h if nibble else 32 * h  # the block's codes' and steps' offsets from the pair's
        if nibble:
            e(f"\tVMOVUPS X3, {db}(R8)(DI*1)")
        else:
            e(f"\tVMOVUPS Y3, {db}(R8)(DI*1)")
        e(f"\tVMULPS Z{lo}, Z20, Z{lo}")
        e(f"\tVMULPS Z{hi}, Z20, Z{hi}")
        e(f"\tVCVTPS2DQ Z{lo}, Z{lo}")
        e(f"\tVCVTPS2DQ Z{hi}, Z{hi}")
        if nibble:
            e(f"\tVMOVDQA32 Z{lo}, Z23")
            e(f"\tVPERMT2D Z{hi}, Z28, Z23")  # even lanes of lo:hi
            e(f"\tVPERMT2D Z{hi}, Z27, Z{lo}")  # odd lanes
            e(f"\tVPMOVDB Z23, {cb}(R8)(BX*1)")
            e(f"\tVPMOVDB Z{lo}, {64 + 16 * h}(R8)(BX*1)")
        else:
            e(f"\tVPMOVDB Z{lo}, {cb}(R8)(BX*1)")
            e(f"\tVPMOVDB Z{hi}, {32 * h + 16}(R8)(BX*1)")
    e(f"{name}_nextblock:")
    e(f"\tADDQ ${2 if pair else 1}, DX")
    e("\tCMPQ DX, $4")
    e(f"\tJLT {name}_samechunk")
    e("\tXORQ DX, DX")
    e("\tADDQ R13, R8")
    e(f"{name}_samechunk:")
    e(f"\tADDQ ${64 if pair else 32}, CX")
    e("\tCMPQ CX, R11")
    e(f"\tJLT {name}_block")
    e("\tLEAQ (SI)(R11*4), SI")
    e("\tADDQ $4, R9")
    e("\tDECQ R10")
    e(f"\tJMP {name}_group")
    e(f"{name}_nan:")
    e("\tMOVL $0x7fc00000, AX")
    e(f"\tJMP {name}_special")
    e(f"{name}_zero:")
    e("\tXORL AX, AX")
    e(f"{name}_special:")
    e("\tVMOVD AX, X3")
    e("\tVPBROADCASTD X3, Y3")
    e("\tVPXOR X4, X4, X4")
    for h in range(2 if pair else 1):
        if nibble:
            e(f"\tVMOVUPS X3, {16 * h}(R8)(DI*1)")
            e(f"\tVMOVDQU X4, {16 * h}(R8)(BX*1)")
            e(f"\tVMOVDQU X4, {64 + 16 * h}(R8)(BX*1)")
        else:
            e(f"\tVMOVUPS Y3, {32 * h}(R8)(DI*1)")
            e(f"\tVMOVDQU X4, {32 * h}(R8)(BX*1)")
            e(f"\tVMOVDQU X4, {32 * h + 16}(R8)(BX*1)")
    e(f"\tJMP {name}_nextblock")
    e(f"{name}_done:")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


e("// Code generated by gen_fast.py; DO NOT EDIT.")
e()
e("//go:build amd64 && !purego")
e()
e('#include "textflag.h"')
e()
e("// fq8even and fq8odd select the even and odd dwords of a pair of vectors (VPERMT2D indices).")
for i in range(16):
    e(f"DATA fq8even<>+{4*i}(SB)/4, ${2*i}")
e("GLOBL fq8even<>(SB), RODATA|NOPTR, $64")
for i in range(16):
    e(f"DATA fq8odd<>+{4*i}(SB)/4, ${2*i+1}")
e("GLOBL fq8odd<>(SB), RODATA|NOPTR, $64")
e()
for nibble in (True, False):
    form = "Q4" if nibble else "Q8"
    for R in (1, 2, 4, 8):
        for W in (1, 2):
            kernel(f"fast{form}R{R}W{W}AVX512", nibble, R, W)
quantizer("quantizeFastQ4AVX512", True)
quantizer("quantizeFastQ8AVX512", False)
quantizer("quantizeFastPairQ4AVX512", True, True)
quantizer("quantizeFastPairQ8AVX512", False, True)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_amd64.s"), "w").write("\n".join(out) + "\n")
