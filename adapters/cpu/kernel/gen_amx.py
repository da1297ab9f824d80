# Generates amx_amd64.s: the fast-mode panel kernels on AMX tiles (see amx.go; the arithmetic is panel.go's,
# operation for operation, so a row's outputs carry the bits the VNNI panel kernels give it). Run:
# python3 gen_amx.py
#
# They take the panel form's 64-input blocks (groups of 64 or 128; the quantizer's pair form: one step per 64
# inputs) and blocks of 16 input rows. Per block the integer dot products of the 16 rows with the panel's 16
# weight rows are one tile product (TDPBSUD: signed int8 input codes × unsigned weight codes, summed exactly in
# int32, like VPDPBUSD; K = 64), stored to the stack, then converted and scaled per row exactly as the VNNI
# kernels do. The 8-bit panel layout is a tile's B operand as it is (a 64-byte row holds the same 4 inputs of 16
# weight rows); 4-bit codes are unpacked into bytes (per 32 inputs, 4 rows of low nibbles then 4 of high
# nibbles) in a small ring, five blocks ahead. The input codes come as tile rows (amxInputs: per 32 inputs, the
# codes in the order the weight rows take them; per 64-input block the rows side by side). Tile instructions
# wait in order on their operands, and a vector load of sums a tile store wrote waits for the store to reach
# the cache: so each block's product is issued three blocks ahead of its conversion and stored one block ahead
# of it, on two alternating tile sets and a ring of three buffers, through all of a call's panels.
#
# The Go assembler has no AMX mnemonics: they are emitted as bytes (the encoders below, checked against GNU as's
# encodings of the same instructions).
import os

from gen_scales import next_group, scales_biases

out = []


def e(s=""):
    out.append(s)


# panelArgs field offsets (panel.go).
A = dict(codes=0, scales=8, biases=16, npanels=24, xp=32, chadj=40, xst=48, ngroups=56, bpg=64, dst=72, ldd=80,
         cfg=88, xa=96, wbuf=104)  # then gen_scales.py's
PF = 2048  # prefetch distance in the codes (gen_panel.py's)

# General-purpose register numbers for the encodings.
GPR = dict(AX=0, CX=1, DX=2, BX=3, SP=4, BP=5, SI=6, DI=7, R8=8, R9=9, R10=10, R11=11, R12=12, R13=13, R14=14,
           R15=15)


def vex3(r, x, b, mmmmm, w, vvvv, l, pp):
    # The three-byte VEX prefix: R, X, B are the high bits of reg, index and base (stored inverted).
    b1 = ((0 if r else 0x80) | (0 if x else 0x40) | (0 if b else 0x20) | mmmmm)
    b2 = (w << 7) | ((~vvvv & 15) << 3) | (l << 2) | pp
    return [0xC4, b1, b2]


PP = {"NP": 0, "66": 1, "F3": 2, "F2": 3}


def sibmem(reg, base, index, disp):
    # ModRM + SIB (+ disp) for [base + index*1 + disp]; reg is the tile number. SP can't be an index.
    bn, xn = GPR[base], GPR[index]
    assert xn != 4
    if disp == 0 and bn & 7 != 5:
        mod, d = 0, []
    elif -128 <= disp < 128:
        mod, d = 1, [disp & 0xFF]
    else:
        mod, d = 2, list((disp & 0xFFFFFFFF).to_bytes(4, "little"))
    return [(mod << 6) | ((reg & 7) << 3) | 4, ((xn & 7) << 3) | (bn & 7)] + d, xn >= 8, bn >= 8


def tileloadd(t, base, index, disp=0):
    m, x, b = sibmem(t, base, index, disp)
    return vex3(False, x, b, 2, 0, 0, 0, PP["F2"]) + [0x4B] + m


def tilestored(t, base, index, disp=0):
    m, x, b = sibmem(t, base, index, disp)
    return vex3(False, x, b, 2, 0, 0, 0, PP["F3"]) + [0x4B] + m


def tdpbsud(c, a, b):
    # c += a·b with a's bytes signed and b's unsigned (Intel operand order: tmm1=c in reg, tmm2=a in r/m, tmm3=b in vvvv).
    return vex3(False, False, False, 2, 0, b, 0, PP["F3"]) + [0x5E, 0xC0 | (c << 3) | a]


def tilezero(t):
    return vex3(False, False, False, 2, 0, 0, 0, PP["F2"]) + [0x49, 0xC0 | (t << 3)]


def ldtilecfg(base):
    bn = GPR[base]
    assert bn & 7 not in (4, 5)
    return vex3(False, False, bn >= 8, 2, 0, 0, 0, PP["NP"]) + [0x49, bn & 7]


def tilerelease():
    return vex3(False, False, False, 2, 0, 0, 0, PP["NP"]) + [0x49, 0xC0]


# GNU as (binutils 2.40) encodings of the same instructions.
assert ldtilecfg("AX") == [0xc4, 0xe2, 0x78, 0x49, 0x00]
assert tilerelease() == [0xc4, 0xe2, 0x78, 0x49, 0xc0]
assert tilezero(0) == [0xc4, 0xe2, 0x7b, 0x49, 0xc0]
assert tileloadd(1, "SI", "R14") == [0xc4, 0xa2, 0x7b, 0x4b, 0x0c, 0x36]
assert tileloadd(2, "SI", "R14", 64) == [0xc4, 0xa2, 0x7b, 0x4b, 0x54, 0x36, 0x40]
assert tileloadd(2, "DI", "R15") == [0xc4, 0xa2, 0x7b, 0x4b, 0x14, 0x3f]
assert tileloadd(3, "SP", "R15", 1024) == [0xc4, 0xa2, 0x7b, 0x4b, 0x9c, 0x3c, 0x00, 0x04, 0x00, 0x00]
assert tilestored(0, "SP", "R15") == [0xc4, 0xa2, 0x7a, 0x4b, 0x04, 0x3c]
assert tdpbsud(0, 1, 2) == [0xc4, 0xe2, 0x6a, 0x5e, 0xc1]
assert tdpbsud(0, 2, 4) == [0xc4, 0xe2, 0x5a, 0x5e, 0xc2]
assert tdpbsud(3, 4, 5) == [0xc4, 0xe2, 0x52, 0x5e, 0xdc]
assert tilestored(0, "CX", "R15") == [0xc4, 0xa2, 0x7a, 0x4b, 0x04, 0x39]
assert tileloadd(1, "R12", "R14") == [0xc4, 0x82, 0x7b, 0x4b, 0x0c, 0x34]
assert tilestored(0, "SP", "R15", 1024) == [0xc4, 0xa2, 0x7a, 0x4b, 0x84, 0x3c, 0x00, 0x04, 0x00, 0x00]


def emit(bs, comment):
    e(f"\t{'; '.join(f'BYTE ${b:#04x}' for b in bs)} // {comment}")


# Stack: a ring of three buffers of a block's int32 sums (R rows of 64 bytes each) at 0(SP), then the count of
# blocks left to multiply, the chunk counter, the end of the input codes (xa), the panels left, and the 4-bit
# kernels' codes pointer (the next pair to unpack) and the end of their ring of unpacked pairs.
RING, LEFT, CHUNK, XAEND, PANELS, CODESP, WBEND = 3072, 3072, 3080, 3088, 3096, 3104, 3112
FRAME = 3120
WRING = 8192  # a.wbuf: 8 pairs of unpacked 4-bit codes
UPF = 8192  # prefetch distance of the unpacking (16 pairs ahead: tile loads wait for the unpacking's stores)


def unpack(src, dst, doff):
    # One pair of blocks' 4-bit codes (512 bytes at src) as bytes at doff(dst): per block its 4 code words' low
    # nibbles (inputs 0, 2, 4, 6 of each word), then their high nibbles.
    for h in range(2):
        for v in range(4):
            e(f"\tPREFETCHT0 {UPF + 256 * h + 64 * v}({src})")
        for v in range(4):
            e(f"\tVMOVDQU32 {256 * h + 64 * v}({src}), Z25")
            e("\tVPSRLW $4, Z25, Z26")
            e("\tVPANDD Z31, Z25, Z25")
            e("\tVPANDD Z31, Z26, Z26")
            e(f"\tVMOVDQU32 Z25, {doff + 512 * h + 64 * v}({dst})")
            e(f"\tVMOVDQU32 Z26, {doff + 512 * h + 256 + 64 * v}({dst})")


def unpack_next(lbl):
    # The next pair's codes into the ring slot after DI's (DI is the next product's): CODESP advances, R14 is
    # the slot.
    e(f"\tMOVQ {CODESP}(SP), CX")
    e("\tLEAQ 1024(DI), R14")
    e(f"\tCMPQ R14, {WBEND}(SP)")
    e(f"\tJB {lbl}_w")
    e(f"\tSUBQ ${WRING}, R14")
    e(f"{lbl}_w:")
    unpack("CX", "R14", 0)
    e("\tADDQ $512, CX")
    e(f"\tMOVQ CX, {CODESP}(SP)")


def tile_product(st, R, nibble, lbl):
    # The tile product of the next block to multiply on tile set st (sums in tile 3·st, input codes 3·st+1,
    # weight codes 3·st+2): weight codes at DI (the 4-bit ones in the unpacked ring), input codes at R12 (R
    # rows of 64 bytes, going round the panel's pairs: every panel takes the same inputs).
    c, a, b = 3 * st, 3 * st + 1, 3 * st + 2
    emit(tileloadd(b, "DI", "R15"), f"TILELOADD (DI)(R15*1), TMM{b}")
    emit(tileloadd(a, "R12", "R15"), f"TILELOADD (R12)(R15*1), TMM{a}")
    emit(tilezero(c), f"TILEZERO TMM{c}")
    emit(tdpbsud(c, a, b), f"TDPBSUD TMM{a}, TMM{b}, TMM{c}")
    e("\tADDQ $1024, DI")
    if nibble:
        e(f"\tCMPQ DI, {WBEND}(SP)")
        e(f"\tJB {lbl}_wr")
        e(f"\tSUBQ ${WRING}, DI")
        e(f"{lbl}_wr:")
    e(f"\tADDQ ${64 * R}, R12")
    e(f"\tCMPQ R12, {XAEND}(SP)")
    e(f"\tJB {lbl}_xr")
    e(f"\tMOVQ {A['xa']}(AX), R12")
    e(f"{lbl}_xr:")


def tile_store(st, base, disp=0):
    emit(tilestored(3 * st, base, "R15", disp), f"TILESTORED TMM{3 * st}, {disp}({base})(R15*1)")


def convert(nibble, R, st, lbl):
    # Block j (of all the call's panels' pairs of blocks, on tile set st = j mod 2), whose sums BX holds: per row
    # acc += (float(isum)·d)·s (each product rounded, then the add), d the row's step for the block in its record
    # at SI. Around it, block j+3's tile product is issued and block j+2's (issued one block earlier) stored,
    # into the buffer block j-1's sums used: a product has a block's conversion to finish before its store, and a
    # store a block's conversion to land before its loads. 4-bit: block j+5's codes are unpacked.
    rec = 192 if nibble else 256  # fastRec
    xstep = 32 if nibble else 64  # record bytes of a pair of blocks' codes (and steps) within a chunk
    e(f"\tCMPQ {LEFT}(SP), $0")
    e(f"\tJLE {lbl}_nt")
    if not nibble:
        for v in range(16):
            e(f"\tPREFETCHT0 {PF + 64 * v}(DI)")
    tile_product(1 - st, R, nibble, lbl)
    e(f"{lbl}_nt:")
    if nibble:
        # After the tile product: a tile load waits for older stores, and these wait for their codes.
        e(f"\tCMPQ {LEFT}(SP), $2")
        e(f"\tJLE {lbl}_nu")
        unpack_next(lbl)
        e(f"{lbl}_nu:")
    for r in range(R):
        t, o = 16 + r % 8, r * rec
        e(f"\tVCVTDQ2PS {64 * r}(BX), Z{t}")
        e(f"\tVMULPS.BCST {o + 128}(SI), Z{t}, Z{t}")
        e(f"\tVMULPS Z24, Z{t}, Z{t}")
        e(f"\tVADDPS Z{t}, Z{r}, Z{r}")
    e(f"\tCMPQ {LEFT}(SP), $0")
    e(f"\tJLT {lbl}_ns")
    # Block j+2's sums go where block j-1's were: BX - 1024, around the ring.
    e("\tLEAQ -1024(BX), CX")
    e("\tCMPQ CX, SP")
    e(f"\tJAE {lbl}_in")
    e(f"\tADDQ ${RING}, CX")
    e(f"{lbl}_in:")
    tile_store(st, "CX")
    e(f"{lbl}_ns:")
    e(f"\tDECQ {LEFT}(SP)")
    e("\tADDQ $1024, BX")
    e(f"\tLEAQ {RING}(SP), CX")
    e("\tCMPQ BX, CX")
    e(f"\tJNE {lbl}_rb")
    e("\tMOVQ SP, BX")
    e(f"{lbl}_rb:")
    e(f"\tADDQ ${xstep}, SI")
    e(f"\tSUBQ $2, {CHUNK}(SP)")
    e(f"\tJNZ {lbl}")
    e(f"\tADDQ {A['chadj']}(AX), SI")
    e(f"\tMOVQ $4, {CHUNK}(SP)")
    e(f"{lbl}:")


def group(nibble, R, bpg, st0, lbl):
    # One group of bpg pairs of blocks, the first on tile set st0: the group's bias term first
    # (acc_r += b·xs_r, product rounded, then the add), its scales, then its pairs.
    scales_biases(e, f"{lbl}_sb")
    for r in range(R):
        t = 16 + r % 8
        e(f"\tVMULPS.BCST {4 * r}(R11), Z27, Z{t}")
        e(f"\tVADDPS Z{t}, Z{r}, Z{r}")
    for k in range(bpg):
        convert(nibble, R, (st0 + k) % 2, f"{lbl}{k}")
    next_group(e)
    e(f"\tADDQ ${4 * R}, R11")


def panel(name, nibble, R, bpg, flip):
    # One panel whose first pair runs on tile set flip; the next panel starts on the set after its last pair's.
    p = f"{name}_p{flip}"
    e(f"{p}:")
    e(f"\tMOVQ {A['xp']}(AX), SI")
    e(f"\tMOVQ {A['xst']}(AX), R11")
    e(f"\tMOVQ $4, {CHUNK}(SP)")  # blocks left in the current chunk
    for r in range(R):
        e(f"\tVPXORD Z{r}, Z{r}, Z{r}")
    e(f"\tMOVQ {A['ngroups']}(AX), R13")
    if bpg == 1:
        e("\tSHRQ $1, R13")
        e(f"\tJZ {p}_last")
        e(f"{p}_group:")
        group(nibble, R, 1, flip, f"{p}_a")
        group(nibble, R, 1, 1 - flip, f"{p}_b")
        e("\tDECQ R13")
        e(f"\tJNZ {p}_group")
        e(f"{p}_last:")
        e(f"\tTESTQ $1, {A['ngroups']}(AX)")
        e(f"\tJZ {p}_store")
        group(nibble, R, 1, flip, f"{p}_l")
    else:
        e(f"{p}_group:")
        group(nibble, R, bpg, flip, f"{p}_c")
        e("\tDECQ R13")
        e(f"\tJNZ {p}_group")
    e(f"{p}_store:")
    # dst[r·ldd + 4j] = acc_r lane j (the 16 weight rows of the panel).
    e("\tMOVQ DX, R13")
    e(f"\tMOVQ {A['ldd']}(AX), CX")
    for r in range(R):
        e(f"\tVMOVUPS Z{r}, (R13)")
        if r < R - 1:
            e("\tADDQ CX, R13")
    e("\tADDQ $64, DX")
    e(f"\tDECQ {PANELS}(SP)")
    e(f"\tJZ {name}_done")
    # An odd number of pairs per panel: the next panel starts on the other set.
    e(f"\tTESTQ $1, R10")
    e(f"\tJNZ {name}_p{1 - flip}")
    e(f"\tJMP {p}")


def kernel(name, nibble, R, bpg):
    # bpg pairs of blocks (64 inputs) per group (1 or 2). The tile products run ahead through all the call's
    # panels (pair j+3 while pair j converts), so a panel's first pairs are multiplied while the panel before it
    # ends. Consecutive pairs alternate tile sets; the code is unrolled so that each pair's set is fixed in it
    # (groups of one pair go in pairs, and each panel body is there twice: starting on set 0 and on set 1).
    e(f"// func {name}(a *panelArgs)")
    e(f"// {R} input rows, {'4-bit' if nibble else '8-bit'} codes, groups of {64 * bpg}, on AMX tiles.")
    e(f"TEXT ·{name}(SB), $%d-8" % FRAME)
    e("\tMOVQ a+0(FP), AX")
    e(f"\tMOVQ {A['cfg']}(AX), R10")
    emit(ldtilecfg("R10"), "LDTILECFG (R10)")
    e(f"\tMOVQ {A['dst']}(AX), DX")
    e("\tMOVQ $64, R15")
    e(f"\tMOVQ {A['codes']}(AX), DI")
    e(f"\tMOVQ {A['scales']}(AX), R9")
    e(f"\tMOVQ {A['biases']}(AX), R8")
    e(f"\tMOVQ {A['ngroups']}(AX), R10")
    e(f"\tIMULQ {A['bpg']}(AX), R10")
    e("\tSHRQ $1, R10")  # R10: pairs per panel
    e("\tMOVQ R10, CX")
    e(f"\tIMULQ ${64 * R}, CX")
    e(f"\tADDQ {A['xa']}(AX), CX")
    e(f"\tMOVQ CX, {XAEND}(SP)")
    e(f"\tMOVQ {A['npanels']}(AX), R13")
    e(f"\tMOVQ R13, {PANELS}(SP)")
    e("\tIMULQ R10, R13")  # R13: the call's pairs
    e(f"\tMOVQ {A['xa']}(AX), R12")
    # Every panel takes the same input codes, which other workers may have written: ask for all of them now, so
    # the misses overlap instead of stalling the in-order tile loads one by one.
    e("\tMOVQ R12, R14")
    e(f"{name}_pfx:")
    e("\tPREFETCHT0 (R14)")
    e("\tADDQ $64, R14")
    e(f"\tCMPQ R14, {XAEND}(SP)")
    e(f"\tJB {name}_pfx")
    if nibble:
        e("\tMOVL $0x0f0f0f0f, CX")
        e("\tVPBROADCASTD CX, Z31")
        e(f"\tMOVQ {A['wbuf']}(AX), CX")
        e(f"\tADDQ ${WRING}, CX")
        e(f"\tMOVQ CX, {WBEND}(SP)")
        # Pairs 0-4 (as many as there are) unpacked ahead into the ring's first slots.
        e(f"\tMOVQ DI, SI")
        e(f"\tMOVQ {A['wbuf']}(AX), DI")
        e("\tMOVQ $5, CX")
        e("\tCMPQ R13, CX")
        e("\tCMOVQLT R13, CX")
        e("\tMOVQ DI, R14")
        e(f"{name}_unpack:")
        unpack("SI", "R14", 0)
        e("\tADDQ $512, SI")
        e("\tADDQ $1024, R14")
        e("\tDECQ CX")
        e(f"\tJNZ {name}_unpack")
        e(f"\tMOVQ SI, {CODESP}(SP)")
    # Pairs 0, 1 and 2 multiplied ahead, 0 and 1 stored into the ring's first two buffers; LEFT counts the
    # pairs after pair 2.
    e("\tMOVQ SP, BX")
    e("\tSUBQ $3, R13")
    e(f"\tMOVQ R13, {LEFT}(SP)")
    tile_product(0, R, nibble, f"{name}_t0")
    e("\tCMPQ R13, $-2")
    e(f"\tJLE {name}_one")
    tile_product(1, R, nibble, f"{name}_t1")
    tile_store(0, "SP")
    e("\tCMPQ R13, $-1")
    e(f"\tJLE {name}_two")
    tile_product(0, R, nibble, f"{name}_t2")
    e(f"{name}_two:")
    tile_store(1, "SP", 1024)
    e(f"\tJMP {name}_p0")
    e(f"{name}_one:")
    tile_store(0, "SP")
    panel(name, nibble, R, bpg, 0)
    panel(name, nibble, R, bpg, 1)
    e(f"{name}_done:")
    emit(tilerelease(), "TILERELEASE")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


e("// Code generated by gen_amx.py; DO NOT EDIT.")
e()
e("//go:build amd64 && !purego")
e()
e('#include "textflag.h"')
e()
for nibble in (True, False):
    form = "Q4" if nibble else "Q8"
    for bpg in (1, 2):
        kernel(f"panel{form}G{64 * bpg}AMX", nibble, 16, bpg)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "amx_amd64.s"), "w").write("\n".join(out) + "\n")
