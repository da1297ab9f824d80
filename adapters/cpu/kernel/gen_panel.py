# Generates panel_amd64.s: the fast-mode panel kernels (see panel.go for the layout and the arithmetic, and
# panelRunGo for its operation-for-operation Go form). Run: python3 gen_panel.py
#
# A panel is 16 weight rows whose 32-bit code words are interleaved word by word, so one 64-byte load holds the
# same word of all 16 rows and a VPDPBUSD with a broadcast input word computes 16 weight rows' partial dot
# products at once. A kernel runs R input rows (the packed records of fast.go's quantizer, R per chunk) against
# a.npanels panels: per block of 32 inputs it decodes the panel's codes once (4 words of 4-bit codes as low and
# high nibbles, or 8 words of 8-bit codes) and, per input row, sums the block exactly in int32 (8 VPDPBUSD),
# converts once and scales by the row's step and the weights' group scales. R ≤ 16: Z0-Z15 are the rows'
# accumulators, Z16-Z23 the decoded codes.
import os

from gen_scales import next_group, scales_biases

out = []


def e(s=""):
    out.append(s)


# panelArgs field offsets (panel.go).
# Prefetch distance (bytes ahead in the codes).
PF = int(os.environ.get("PF", "2048"))
A = dict(codes=0, scales=8, biases=16, npanels=24, xp=32, chadj=40, xst=48, ngroups=56, bpg=64, dst=72, ldd=80)


def kernel(name, nibble, R, pair=False):
    # With pair, the inputs come one step per pair of blocks (64 inputs, groups a multiple of 64): a row's integer
    # sum runs over the pair's two blocks before its one conversion. Pair kernels take R ≤ 8 (both blocks' codes
    # stay in registers).
    rec = 192 if nibble else 256  # fastRec
    wbytes = 256 if nibble else 512  # code bytes of one panel block (16 rows x 32 inputs)
    xstep = 16 if nibble else 32  # record bytes of one block's codes (and steps) within a chunk
    nb = 2 if pair else 1  # blocks per conversion
    cbase = 8 if pair else 16  # the first register of the decoded codes
    assert R <= (8 if pair else 16)
    e(f"// func {name}(a *panelArgs)")
    e(f"// {R} input rows, {'4-bit' if nibble else '8-bit'} codes{', one step per 64 inputs' if pair else ''}.")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-8")
    e("\tMOVQ a+0(FP), AX")
    e(f"\tMOVQ {A['codes']}(AX), DI")
    e(f"\tMOVQ {A['scales']}(AX), R9")
    e(f"\tMOVQ {A['biases']}(AX), R8")
    e(f"\tMOVQ {A['dst']}(AX), DX")
    e(f"\tMOVQ {A['npanels']}(AX), R10")
    e(f"\tMOVQ {A['ldd']}(AX), BX")
    if nibble:
        e("\tMOVL $0x0f0f0f0f, CX")
        e("\tVPBROADCASTD CX, Z31")
    e(f"{name}_panel:")
    e(f"\tMOVQ {A['xp']}(AX), SI")
    e(f"\tMOVQ {A['xst']}(AX), R11")
    e("\tMOVQ $4, CX")  # blocks left in the current chunk
    for r in range(R):
        e(f"\tVPXORD Z{r}, Z{r}, Z{r}")
    e(f"\tMOVQ {A['ngroups']}(AX), R12")
    e(f"{name}_group:")
    scales_biases(e, f"{name}_sb")
    # The group's bias term first: acc_r += b·xs_r (product rounded, then the add).
    for r in range(R):
        e(f"\tVMULPS.BCST {4 * r}(R11), Z27, Z26")
        e(f"\tVADDPS Z26, Z{r}, Z{r}")
    e(f"\tMOVQ {A['bpg']}(AX), R13")
    if pair:
        e("\tSHRQ $1, R13")
    e(f"{name}_block:")
    # The codes stream from L3 (or memory) faster than the hardware prefetcher fetches them, at every row count:
    # ask PF bytes ahead (measured on the 306M synth: a 4-row product 1.7 -> 1.4 decode steps, 8 rows 2.3 -> 1.9,
    # 8 clients' batched rounds 1.3x faster; 16 rows a little).
    for v in range(nb * wbytes // 64):
        e(f"\tPREFETCHT0 {PF + 64 * v}(DI)")
    for h in range(nb):
        c0 = cbase + 8 * h
        if nibble:
            for v in range(4):
                lo, hi = c0 + 2 * v, c0 + 1 + 2 * v
                e(f"\tVMOVDQU32 {wbytes * h + 64 * v}(DI), Z{lo}")
                e(f"\tVPSRLW $4, Z{lo}, Z{hi}")
                e(f"\tVPANDD Z31, Z{lo}, Z{lo}")
                e(f"\tVPANDD Z31, Z{hi}, Z{hi}")
        else:
            for v in range(8):
                e(f"\tVMOVDQU32 {wbytes * h + 64 * v}(DI), Z{c0 + v}")
    # Rows in interleaved groups of up to 4, each with its own integer register (converted in place), so the
    # dependent VPDPBUSD chains of neighbouring rows issue side by side.
    regs = [25, 26, 28, 29]
    for r0 in range(0, R, 4):
        grp = list(range(r0, min(r0 + 4, R)))
        for r in grp:
            i = regs[r - r0]
            e(f"\tVPXORD Z{i}, Z{i}, Z{i}")
        nv = 4 if nibble else 8
        for h in range(nb):
            c0 = cbase + 8 * h
            for v in range(nv):
                for half in ((0, 1) if nibble else (0,)):
                    for r in grp:
                        i, o = regs[r - r0], r * rec + xstep * h
                        if nibble:
                            e(f"\tVPDPBUSD.BCST {o + 64 * half + 4 * v}(SI), Z{c0 + 2 * v + half}, Z{i}")
                        else:
                            e(f"\tVPDPBUSD.BCST {o + 4 * v}(SI), Z{c0 + v}, Z{i}")
        for r in grp:
            i, o = regs[r - r0], r * rec
            e(f"\tVCVTDQ2PS Z{i}, Z{i}")
            e(f"\tVMULPS.BCST {o + 128}(SI), Z{i}, Z{i}")
            e(f"\tVMULPS Z24, Z{i}, Z{i}")
            e(f"\tVADDPS Z{i}, Z{r}, Z{r}")
    e(f"\tADDQ ${nb * wbytes}, DI")
    e(f"\tADDQ ${nb * xstep}, SI")
    e(f"\tSUBQ ${nb}, CX")
    e(f"\tJNZ {name}_samechunk")
    e(f"\tADDQ {A['chadj']}(AX), SI")
    e("\tMOVQ $4, CX")
    e(f"{name}_samechunk:")
    e("\tDECQ R13")
    e(f"\tJNZ {name}_block")
    next_group(e)
    e(f"\tADDQ ${4 * R}, R11")
    e("\tDECQ R12")
    e(f"\tJNZ {name}_group")
    # dst[r·ldd + 4j] = acc_r lane j (the 16 weight rows of the panel).
    e("\tMOVQ DX, R14")
    for r in range(R):
        e(f"\tVMOVUPS Z{r}, (R14)")
        if r < R - 1:
            e("\tADDQ BX, R14")
    e("\tADDQ $64, DX")
    e("\tDECQ R10")
    e(f"\tJNZ {name}_panel")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


e("// Code generated by gen_panel.py; DO NOT EDIT.")
e()
e("//go:build amd64 && !purego")
e()
e('#include "textflag.h"')
e()
for nibble in (True, False):
    form = "Q4" if nibble else "Q8"
    for R in (1, 2, 4, 8, 16):
        kernel(f"panel{form}R{R}AVX512", nibble, R)
    for R in (1, 2, 4, 8):
        kernel(f"panelPair{form}R{R}AVX512", nibble, R, True)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "panel_amd64.s"), "w").write("\n".join(out) + "\n")
