# Generates rows_amd64.s: the AVX2 multi-row quantized kernels (quantrows.go drives them).
#
# One call runs nout weight rows × nrows input rows over a block of groups. Each group of a weight row is
# decoded once into registers (Y0..Y7) and applied to every input row in turn, with per element exactly the
# operations of the one-row AVX2 kernels (dotQ4RowAVX2, dotQ8RowAVX2, dotCodesRowAVX2 in simd_amd64.s): the
# same 8-lane chains over the group's steps, combined in the same order, the group's scale folded into the
# element's accumulator with one FMA, and the bias term Σ_g b_g·xs_g (product rounded, then added, in group
# order) beside it. Only the loop order changes: the accumulators wait in memory (state, bstate) between
# groups, blocks and calls, and groups too long for the registers keep their chains in cs between halves.
import os

out = []


def e(s=""):
    out.append(s)


# kind: (bytes of codes per step, steps' x bytes, decoded registers per step, chains)
KINDS = {
    "Q4": (16, 128, 4, 4),  # 16 bytes = 32 nibbles; x per step [16 even | 16 odd]
    "Q8": (16, 64, 2, 2),   # 16 codes
    "F": (64, 64, 2, 2),    # 16 codes already widened to float32
}


def decode(kind, k, off):
    """Decodes one step of codes at off(DI) into Y(k)..: the one-row kernel's operands, chain by chain."""
    if kind == "Q4":
        for h in range(2):
            lo, hi = f"Y{k+2*h}", f"Y{k+2*h+1}"
            e(f"\tVPMOVZXBD {off+8*h}(DI), {lo}")
            e(f"\tVPSRLD $4, {lo}, {hi}")
            e(f"\tVPAND rowsmask<>(SB), {lo}, {lo}")
            e(f"\tVCVTDQ2PS {lo}, {lo}")
            e(f"\tVCVTDQ2PS {hi}, {hi}")
    elif kind == "Q8":
        for h in range(2):
            e(f"\tVPMOVZXBD {off+8*h}(DI), Y{k+h}")
            e(f"\tVCVTDQ2PS Y{k+h}, Y{k+h}")
    else:
        for h in range(2):
            e(f"\tVMOVUPS {off+32*h}(DI), Y{k+h}")


def xoffsets(kind):
    """x offsets within a step of chain c's operand (the one-row kernel's pairing of codes and inputs)."""
    if kind == "Q4":
        # lo(bytes 0-7)·xe[0:8], hi(bytes 0-7)·xo[0:8], lo(bytes 8-15)·xe[8:16], hi(bytes 8-15)·xo[8:16]
        return [0, 64, 32, 96]
    return [0, 32]


def kernel(kind, gs):
    name = f"dot{kind}RowsG{gs}AVX2"
    cbytes, xbytes, rps, nch = KINDS[kind]
    per = gs // 32 if kind == "Q4" else gs // 16  # steps per group
    hold = 8 // rps                                # steps whose codes fit Y0..Y7
    parts = [list(range(p, min(p + hold, per))) for p in range(0, per, hold)]
    gcb = per * cbytes
    chains = [f"Y{9+c}" for c in range(nch)]
    e(f"// func {name}(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-136")
    e("\tMOVQ nrows+72(FP), R14")
    e("\tSHLQ $5, R14")       # nrows·32: the end of a row loop's state offsets
    e("\tMOVQ ldx+24(FP), DX")
    e("\tMOVQ cs+104(FP), R15")
    e("\tXORQ CX, CX")
    e(f"{name}_row:")
    e("\tCMPQ CX, nout+80(FP)")
    e(f"\tJGE {name}_done")
    # Weight row CX: codes, scales, biases, its state and bias terms; inputs and group sums from the start.
    e("\tMOVQ CX, AX")
    e("\tIMULQ rowBytes+8(FP), AX")
    e("\tMOVQ codes+0(FP), DI")
    e("\tADDQ AX, DI")
    e("\tMOVQ CX, AX")
    e("\tIMULQ ngb+48(FP), AX")
    e("\tMOVQ scales+32(FP), R9")
    e("\tADDQ AX, R9")
    e("\tMOVQ biases+40(FP), R10")
    e("\tADDQ AX, R10")
    e("\tMOVQ CX, AX")
    e("\tIMULQ R14, AX")
    e("\tMOVQ state+88(FP), R12")
    e("\tADDQ AX, R12")
    e("\tMOVQ nrows+72(FP), AX")
    e("\tADDQ $7, AX")
    e("\tANDQ $-8, AX")
    e("\tIMULQ CX, AX")
    e("\tMOVQ bstate+96(FP), R13")
    e("\tLEAQ (R13)(AX*4), R13")
    e("\tMOVQ xp+16(FP), SI")
    e("\tMOVQ xsT+56(FP), R11")
    e("\tMOVQ groups+64(FP), BX")
    e(f"{name}_group:")
    e("\tTESTQ BX, BX")
    e(f"\tJE {name}_next")
    # Prefetches: the codes pfd bytes on (the caller points them at this row's next block, from the last block
    # at the next call's first), and the next weight row's scales and biases. A block's weight rows are
    # rowBytes apart, a stride the hardware prefetchers follow late.
    e("\tMOVQ pfd+112(FP), AX")
    for off in range(0, gcb, 64):
        e(f"\tPREFETCHT0 {off}(DI)(AX*1)")
    e("\tMOVQ ngb+48(FP), AX")
    e("\tPREFETCHT0 (R9)(AX*1)")
    e("\tPREFETCHT0 (R10)(AX*1)")
    for p, steps in enumerate(parts):
        last = p == len(parts) - 1
        for i, s in enumerate(steps):
            decode(kind, rps * i, s * cbytes)
        if last:
            e("\tVBROADCASTSS (R9), Y8")
        e("\tMOVQ SI, R8")
        e("\tXORQ AX, AX")
        lbl = f"{name}_p{p}"
        e(f"{lbl}:")
        for c, y in enumerate(chains):
            if p == 0:
                e(f"\tVXORPS {y}, {y}, {y}")
            else:
                e(f"\tVMOVUPS {32*c}(R15)(AX*4), {y}")
        for i, s in enumerate(steps):
            for c, y in enumerate(chains):
                e(f"\tVFMADD231PS {s*xbytes + xoffsets(kind)[c]}(R8), Y{rps*i + c}, {y}")
        if not last:
            for c, y in enumerate(chains):
                e(f"\tVMOVUPS {y}, {32*c}(R15)(AX*4)")
        else:
            if nch == 4:
                e("\tVADDPS Y10, Y9, Y9")
                e("\tVADDPS Y12, Y11, Y11")
                e("\tVADDPS Y11, Y9, Y9")
            else:
                e("\tVADDPS Y10, Y9, Y9")
            e("\tVMOVUPS (R12)(AX*1), Y13")
            e("\tVFMADD231PS Y8, Y9, Y13")
            e("\tVMOVUPS Y13, (R12)(AX*1)")
        e("\tADDQ DX, R8")
        e("\tADDQ $32, AX")
        e("\tCMPQ AX, R14")
        e(f"\tJLT {lbl}")
    # The bias terms of 8 rows at a time (rows past nrows are padding with zero group sums).
    e("\tMOVQ nrows+72(FP), R8")
    e("\tADDQ $7, R8")
    e("\tANDQ $-8, R8")
    e("\tSHLQ $2, R8")       # rpad·4: the end of the bias terms' offsets
    e("\tVBROADCASTSS (R10), Y14")
    e("\tXORQ AX, AX")
    e(f"{name}_bias:")
    e("\tVMULPS (R11)(AX*1), Y14, Y15")
    e("\tVADDPS (R13)(AX*1), Y15, Y15")
    e("\tVMOVUPS Y15, (R13)(AX*1)")
    e("\tADDQ $32, AX")
    e("\tCMPQ AX, R8")
    e(f"\tJLT {name}_bias")
    e("\tADDQ AX, R11")       # AX = rpad·4: the next group's sums
    e(f"\tADDQ ${gcb}, DI")
    e("\tADDQ $4, R9")
    e("\tADDQ $4, R10")
    e(f"\tADDQ ${4*gs}, SI")
    e("\tDECQ BX")
    e(f"\tJMP {name}_group")
    e(f"{name}_next:")
    # With dst (the call holding the last groups), weight row CX's elements are done: dst[r·ldd + CX] gets the
    # one-row kernel's horizontal sum of the accumulator plus the bias term.
    e("\tMOVQ dst+120(FP), R8")
    e("\tTESTQ R8, R8")
    e(f"\tJE {name}_inc")
    e("\tLEAQ (R8)(CX*4), R8")
    e("\tMOVQ ldd+128(FP), R9")
    e("\tMOVQ R14, R10")
    e("\tSHRQ $3, R10")       # nrows·4: the end of the bias terms' offsets
    e("\tXORQ AX, AX")
    e(f"{name}_fin:")
    e("\tVMOVUPS (R12)(AX*8), X0")
    e("\tVADDPS 16(R12)(AX*8), X0, X0")
    e("\tVHADDPS X0, X0, X0")
    e("\tVHADDPS X0, X0, X0")
    e("\tVADDSS (R13)(AX*1), X0, X0")
    e("\tVMOVSS X0, (R8)")
    e("\tADDQ R9, R8")
    e("\tADDQ $4, AX")
    e("\tCMPQ AX, R10")
    e(f"\tJLT {name}_fin")
    e(f"{name}_inc:")
    e("\tINCQ CX")
    e(f"\tJMP {name}_row")
    e(f"{name}_done:")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


e("// Code generated by gen_rows.py; DO NOT EDIT.")
e()
e("//go:build amd64 && !purego")
e()
e('#include "textflag.h"')
e()
for i in range(8):
    e(f"DATA rowsmask<>+{4*i}(SB)/4, $0x0f")
e("GLOBL rowsmask<>(SB), RODATA|NOPTR, $32")
e()
for kind in ("Q4", "Q8", "F"):
    for gs in (32, 64, 128):
        kernel(kind, gs)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "rows_amd64.s"), "w").write("\n".join(out) + "\n")
