import struct
PERM_A = 'Z15, Z8, Z8'
PERM_B = 'Z15, Z9, Z9'
# Generates tile_amd64.s: multi-row × multi-output tiles for f32/bf16/f16 and multi-row quantized kernels.
# A tile's weight type wt is "f32", "bf16" (widened by a zero-extension and a shift) or "f16" (VCVTPH2PS).
out = []
def e(s=""): out.append(s)

# ONE names the one-row kernel whose operations a tile of each weight type runs.
ONE = {"f32": "dotF32AVX2", "bf16": "dotBF16AVX2", "f16": "dotF16AVX2 (dotF32AVX2 on the widened weights)"}

def loadw(wt, ptr, reg):
    # One weight vector (8 or 16 values) at element AX of the row at ptr, as float32.
    if wt == "bf16":
        e(f"\tVPMOVZXWD ({ptr})(AX*2), {reg}")
        e(f"\tVPSLLD $16, {reg}, {reg}")
    elif wt == "f16":
        e(f"\tVCVTPH2PS ({ptr})(AX*2), {reg}")
    else:
        e(f"\tVMOVUPS ({ptr})(AX*4), {reg}")

def tile(name, R, O, wt, evex):
    # regs: w: Y0..Y(O-1), x: Y(O)..Y(O+R-1), accs: base..base+R*O-1. Where the 16 AVX2 registers do not hold
    # every row's x vector beside the accumulators (6 rows × 2), the rows' x vectors take turns in two registers.
    wreg = [f"Y{i}" for i in range(O)]
    stream = not evex and O + R + R*O > 16
    xreg = [f"Y{O + (i % 2 if stream else i)}" for i in range(R)]
    base = 16 if evex else O + (2 if stream else R)
    acc = [[f"Y{base + r*O + o}" for o in range(O)] for r in range(R)]
    assert base + R*O <= (32 if evex else 16)
    xptr = ["R8", "R9", "R10", "R11", "R14", "R15"][:R]
    wptr = ["R12", "R13", "SI", "DI"][:O]
    gt = "float32" if wt == "f32" else "uint16"
    e(f"// func {name}(x *float32, ldx int, w *{gt}, ldw int, n int, dst *float32, ldd int, scratch *float32)")
    e(f"// {R} input rows × {O} weight rows; every element runs {ONE[wt]}'s operations (n a multiple of 32).")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-64")
    e("\tMOVQ x+0(FP), R8")
    e("\tMOVQ ldx+8(FP), BX")
    e("\tSHLQ $2, BX")
    for i in range(1, R):
        e(f"\tLEAQ ({xptr[i-1]})(BX*1), {xptr[i]}")
    e("\tMOVQ w+16(FP), R12")
    e("\tMOVQ ldw+24(FP), BX")
    e(f"\tSHLQ ${2 if wt == 'f32' else 1}, BX")
    for i in range(1, O):
        e(f"\tLEAQ ({wptr[i-1]})(BX*1), {wptr[i]}")
    e("\tMOVQ n+32(FP), DX")
    e("\tMOVQ scratch+56(FP), BX")
    xor = "VPXORD" if evex else "VXORPS"
    accs = [a for row in acc for a in row]
    for k in range(4):
        for a in accs:
            e(f"\t{xor} {a}, {a}, {a}")
        e(f"\tMOVQ ${8*k}, AX")
        lbl = f"{name}_k{k}"
        e(f"{lbl}:")
        for o in range(O):
            loadw(wt, wptr[o], wreg[o])
        if stream:
            for r in range(R):
                e(f"\tVMOVUPS ({xptr[r]})(AX*4), {xreg[r]}")
                for o in range(O):
                    e(f"\tVFMADD231PS {xreg[r]}, {wreg[o]}, {acc[r][o]}")
        else:
            for r in range(R):
                e(f"\tVMOVUPS ({xptr[r]})(AX*4), {xreg[r]}")
            for r in range(R):
                for o in range(O):
                    e(f"\tVFMADD231PS {xreg[r]}, {wreg[o]}, {acc[r][o]}")
        e("\tADDQ $32, AX")
        e("\tCMPQ AX, DX")
        e(f"\tJLT {lbl}")
        # combine: A at scratch[0:], B at scratch[R*O*32 bytes]
        B = R*O*32
        for i, a in enumerate(accs):
            if k == 0:
                e(f"\tVMOVUPS {a}, {i*32}(BX)")
            elif k == 1:
                e(f"\tVADDPS {i*32}(BX), {a}, {a}")
                e(f"\tVMOVUPS {a}, {i*32}(BX)")
            elif k == 2:
                e(f"\tVMOVUPS {a}, {B+i*32}(BX)")
            else:
                e(f"\tVADDPS {B+i*32}(BX), {a}, {a}")
                e(f"\tVADDPS {i*32}(BX), {a}, {a}")
                e(f"\tVMOVUPS {a}, {i*32}(BX)")
    # horizontal sums: ((v0+v4)+(v1+v5))+((v2+v6)+(v3+v7)) exactly as the one-row kernel
    e("\tMOVQ dst+40(FP), DI")
    e("\tMOVQ ldd+48(FP), CX")
    e("\tSHLQ $2, CX")
    for r in range(R):
        for o in range(O):
            i = r*O + o
            e(f"\tVMOVUPS {i*32}(BX), X0")
            e(f"\tVADDPS {i*32+16}(BX), X0, X0")
            e("\tVHADDPS X0, X0, X0")
            e("\tVHADDPS X0, X0, X0")
            e(f"\tVMOVSS X0, {4*o}(DI)")
        if r < R-1:
            e("\tADDQ CX, DI")
    e("\tVZEROUPPER")
    e("\tRET")
    e()

def tilez(name, R, O, wt):
    # 16-lane passes: lanes 0-7 hold chain 2p, lanes 8-15 chain 2p+1, so each pass reads whole cache lines.
    wreg = [f"Z{i}" for i in range(O)]
    xreg = [f"Z{O+i}" for i in range(R)]
    acc = [[16 + r*O + o for o in range(O)] for r in range(R)]
    assert 16 + R*O <= 32
    xptr = ["R8", "R9", "R10", "R11"][:R]
    wptr = ["R12", "R13", "SI", "DI"][:O]
    gt = "float32" if wt == "f32" else "uint16"
    e(f"// func {name}(x *float32, ldx int, w *{gt}, ldw int, n int, dst *float32, ldd int, scratch *float32, pf *byte)")
    e(f"// {R} input rows × {O} weight rows with 16-lane vectors holding two of {ONE[wt]}'s 8-lane")
    e("// chains each; per element the same operations in the same order (n a multiple of 32). Meanwhile the 8·n")
    e("// bytes from pf on are prefetched into L2 (two lines per step; the caller points pf at weights it needs next).")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-72")
    e("\tMOVQ x+0(FP), R8")
    e("\tMOVQ ldx+8(FP), BX")
    e("\tSHLQ $2, BX")
    for i in range(1, R):
        e(f"\tLEAQ ({xptr[i-1]})(BX*1), {xptr[i]}")
    e("\tMOVQ w+16(FP), R12")
    e("\tMOVQ ldw+24(FP), BX")
    e(f"\tSHLQ ${2 if wt == 'f32' else 1}, BX")
    for i in range(1, O):
        e(f"\tLEAQ ({wptr[i-1]})(BX*1), {wptr[i]}")
    e("\tMOVQ n+32(FP), DX")
    e("\tMOVQ scratch+56(FP), BX")
    e("\tMOVQ pf+64(FP), CX")
    accs = [a for row in acc for a in row]
    for p in range(2):
        for a in accs:
            e(f"\tVPXORD Z{a}, Z{a}, Z{a}")
        e(f"\tMOVQ ${16*p}, AX")
        if p == 1:
            # Pass 1's offsets start 64 bytes in: aim CX at the second 4·n bytes.
            e("\tLEAQ -64(CX)(DX*4), CX")
        lbl = f"{name}_p{p}"
        e(f"{lbl}:")
        e("\tPREFETCHT1 (CX)(AX*4)")
        e("\tPREFETCHT1 64(CX)(AX*4)")
        for o in range(O):
            loadw(wt, wptr[o], wreg[o])
        for r in range(R):
            e(f"\tVMOVUPS ({xptr[r]})(AX*4), {xreg[r]}")
        for r in range(R):
            for o in range(O):
                e(f"\tVFMADD231PS {xreg[r]}, {wreg[o]}, Z{acc[r][o]}")
        e("\tADDQ $32, AX")
        e("\tCMPQ AX, DX")
        e(f"\tJLT {lbl}")
        for i, a in enumerate(accs):
            e(f"\tVEXTRACTF64X4 $1, Z{a}, Y8")
            e(f"\tVADDPS Y8, Y{a}, Y{a}")
            if p == 1:
                e(f"\tVADDPS {i*32}(BX), Y{a}, Y{a}")
            e(f"\tVMOVUPS Y{a}, {i*32}(BX)")
    e("\tMOVQ dst+40(FP), DI")
    e("\tMOVQ ldd+48(FP), CX")
    e("\tSHLQ $2, CX")
    for r in range(R):
        for o in range(O):
            i = r*O + o
            e(f"\tVMOVUPS {i*32}(BX), X0")
            e(f"\tVADDPS {i*32+16}(BX), X0, X0")
            e("\tVHADDPS X0, X0, X0")
            e("\tVHADDPS X0, X0, X0")
            e(f"\tVMOVSS X0, {4*o}(DI)")
        if r < R-1:
            e("\tADDQ CX, DI")
    e("\tVZEROUPPER")
    e("\tRET")
    e()

def quantrows(name, bits, R, state=False):
    # R input rows sharing one decode of each 16 code bytes. x comes packed per 16-byte step: for q4
    # [step][row][16 even | 16 odd] (the low and high nibbles), for q8 [step][row][16]. Lanes 0-7 of each
    # 16-lane partial carry the one-row kernel's first chain of the step and lanes 8-15 its second.
    # The bias term Σ_g b_g·xs_rg runs beside it with lane r = row r (product rounded, then added, in group
    # order, as the scalar loop it replaces); xsT holds the group sums as [group][row].
    rowb = 128 if bits == 4 else 64
    part = [(16 + 2*r, 17 + 2*r) for r in range(R)] if bits == 4 else [(16 + r, None) for r in range(R)]
    fin = [f"Y{r}" for r in range(R)]
    assert R in (1, 4, 8)
    if state:
        e(f"// func {name}(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, state *float32)")
        e(f"// dotQ{bits}RowAVX2 for {R} rows over a range of groups, resuming from and saving to state: row r's 8-lane")
        e(f"// scaled accumulator at state[8r:8r+8] and its bias term at state[{8*R}+r] (no horizontal sum).")
    else:
        e(f"// func {name}(codes *byte, xp, scales, biases, xsT *float32, groups, gb int, out *float32)")
        e(f"// dotQ{bits}RowAVX2 for {R} rows of packed x (see gen_tile.py) sharing one decode of the codes; out[r] gets")
        e(f"// row r's scaled product and out[{R}+r] its bias term.")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-64")
    e("\tMOVQ codes+0(FP), DI")
    e("\tMOVQ xp+8(FP), SI")
    e("\tMOVQ scales+16(FP), R9")
    e("\tMOVQ biases+24(FP), R12")
    e("\tMOVQ xsT+32(FP), R13")
    e("\tMOVQ groups+40(FP), R10")
    e("\tMOVQ gb+48(FP), R11")
    e(f"\tMOVQ {'state' if state else 'out'}+56(FP), DX")
    if bits == 4:
        e("\tVMOVUPS q4float<>(SB), Z15")
    # State kernels keep rows 2k and 2k+1's final accumulators side by side in Zk, so the group end combines a
    # pair of rows with one 16-lane add and FMA (after two lane shuffles) instead of two of each.
    paired = state and R % 2 == 0
    if state:
        if paired:
            for k in range(R // 2):
                e(f"\tVMOVUPS {64*k}(DX), Z{k}")
        else:
            for r, f in enumerate(fin):
                e(f"\tVMOVUPS {32*r}(DX), {f}")
        e(f"\tVMOVUPS {32*R}(DX), {'Y13' if R == 8 else 'X13'}")
    else:
        for f in fin:
            e(f"\tVXORPS {f}, {f}, {f}")
        e("\tVXORPS Y13, Y13, Y13")
    e(f"{name}_group:")
    e("\tTESTQ R10, R10")
    e(f"\tJE {name}_done")
    for a, b in part:
        e(f"\tVPXORD Z{a}, Z{a}, Z{a}")
        if b is not None:
            e(f"\tVPXORD Z{b}, Z{b}, Z{b}")
    e("\tXORQ AX, AX")
    e(f"{name}_loop:")
    e("\tVPMOVZXBD (DI)(AX*1), Z8")
    if bits == 4:
        # VPERMPS reads only the low 4 bits of each index, so the low nibble needs no mask, and the table
        # q4float (float32 0..15) replaces the conversion: the same exact integer values.
        e("\tVPSRLD $4, Z8, Z9")
        e(f"\tVPERMPS {PERM_A}")
        e(f"\tVPERMPS {PERM_B}")
    else:
        e("\tVCVTDQ2PS Z8, Z8")
    for r, (a, b) in enumerate(part):
        e(f"\tVFMADD231PS {r*rowb}(SI), Z8, Z{a}")
        if b is not None:
            e(f"\tVFMADD231PS {r*rowb+64}(SI), Z9, Z{b}")
    e(f"\tADDQ ${R*rowb}, SI")
    e("\tADDQ $16, AX")
    e("\tCMPQ AX, R11")
    e(f"\tJLT {name}_loop")
    if paired:
        e("\tVBROADCASTSS (R9), Z12")
        for r, (a, b) in enumerate(part):
            if b is not None:
                e(f"\tVADDPS Z{b}, Z{a}, Z{a}")
        for k in range(R // 2):
            za, zb = part[2*k][0], part[2*k+1][0]
            # Z10 = [a.lo | b.lo], Z14 = [a.hi | b.hi]; their sum is each row's lo+hi, the one-row order.
            e(f"\tVSHUFF64X2 $0x44, Z{zb}, Z{za}, Z10")
            e(f"\tVSHUFF64X2 $0xee, Z{zb}, Z{za}, Z14")
            e("\tVADDPS Z14, Z10, Z10")
            e(f"\tVFMADD231PS Z12, Z10, Z{k}")
    else:
        e("\tVBROADCASTSS (R9), Y12")
        for r, (a, b) in enumerate(part):
            if b is not None:
                e(f"\tVADDPS Z{b}, Z{a}, Z{a}")
            e(f"\tVEXTRACTF64X4 $1, Z{a}, Y10")
            e(f"\tVADDPS Y10, Y{a}, Y{a}")
            e(f"\tVFMADD231PS Y12, Y{a}, {fin[r]}")
    if R == 8:
        e("\tVBROADCASTSS (R12), Y11")
        e("\tVMULPS (R13), Y11, Y11")
        e("\tVADDPS Y11, Y13, Y13")
    elif R == 4:
        e("\tVBROADCASTSS (R12), X11")
        e("\tVMULPS (R13), X11, X11")
        e("\tVADDPS X11, X13, X13")
    else:
        e("\tVMOVSS (R12), X11")
        e("\tVMULSS (R13), X11, X11")
        e("\tVADDSS X11, X13, X13")
    e("\tADDQ $4, R9")
    e("\tADDQ $4, R12")
    e(f"\tADDQ ${4*R}, R13")
    e("\tADDQ R11, DI")
    e("\tDECQ R10")
    e(f"\tJMP {name}_group")
    e(f"{name}_done:")
    if state:
        if paired:
            for k in range(R // 2):
                e(f"\tVMOVUPS Z{k}, {64*k}(DX)")
        else:
            for r, f in enumerate(fin):
                e(f"\tVMOVUPS {f}, {32*r}(DX)")
        e(f"\tVMOVUPS {'Y13' if R == 8 else 'X13'}, {32*R}(DX)")
        e("\tVZEROUPPER")
        e("\tRET")
        e()
        return
    for r, f in enumerate(fin):
        e(f"\tVEXTRACTF128 $1, {f}, X10")
        e(f"\tVADDPS X10, X{r}, X10")
        e("\tVHADDPS X10, X10, X10")
        e("\tVHADDPS X10, X10, X10")
        e(f"\tVMOVSS X10, {4*r}(DX)")
    if R == 8:
        e("\tVMOVUPS Y13, 32(DX)")
    elif R == 4:
        e("\tVMOVUPS X13, 16(DX)")
    else:
        e("\tVMOVSS X13, 4(DX)")
    e("\tVZEROUPPER")
    e("\tRET")
    e()

def quantrow1(name, bits, gb, prefetch):
    # One input row, groups of gb code bytes, the group's steps unrolled (no inner loop); otherwise exactly
    # quantrows(R=1). Codes are prefetched a fixed distance ahead (the loop is short of work per byte, so the
    # hardware prefetcher alone leaves it waiting on memory).
    rowb = 128 if bits == 4 else 64
    S = gb // 16
    e(f"// func {name}(codes *byte, xp, scales, biases, xsT *float32, groups, nrows int, dst *float32)")
    e(f"// dotQ{bits}RowAVX2 for one row of packed x with {gb}-byte groups against nrows consecutive weight rows")
    e("// (codes, scales and biases contiguous): dst[o] = scaled product + bias term, as the Go loop added them.")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-64")
    e("\tMOVQ codes+0(FP), DI")
    e("\tMOVQ scales+16(FP), R9")
    e("\tMOVQ biases+24(FP), R12")
    e("\tMOVQ groups+40(FP), R10")
    e("\tMOVQ nrows+48(FP), R14")
    e("\tMOVQ dst+56(FP), DX")
    if bits == 4:
        e("\tVMOVUPS q4float<>(SB), Z15")
    e(f"{name}_row:")
    e("\tMOVQ xp+8(FP), SI")
    e("\tMOVQ xsT+32(FP), R13")
    e("\tVXORPS Y0, Y0, Y0")
    e("\tVXORPS X13, X13, X13")
    e("\tXORQ CX, CX")
    e(f"{name}_group:")
    e("\tVPXORD Z16, Z16, Z16")
    if bits == 4:
        e("\tVPXORD Z17, Z17, Z17")
    for st in range(S):
        if prefetch and (16*st) % 64 == 0:
            e(f"\tPREFETCHT0 {prefetch + 16*st}(DI)")
        zc, zh = ("Z8", "Z9") if st % 2 == 0 else ("Z10", "Z11")
        e(f"\tVPMOVZXBD {16*st}(DI), {zc}")
        if bits == 4:
            # The high nibble is converted (VCVTDQ2PS) rather than looked up like the low one: the same exact
            # values, and the conversion runs beside the shuffles (measured about 5% faster on Zen 4).
            e(f"\tVPSRLD $4, {zc}, {zh}")
            e(f"\tVPERMPS {PERM_A.replace('Z8', zc)}")
            e(f"\tVCVTDQ2PS {zh}, {zh}")
        else:
            e(f"\tVCVTDQ2PS {zc}, {zc}")
        e(f"\tVFMADD231PS {st*rowb}(SI), {zc}, Z16")
        if bits == 4:
            e(f"\tVFMADD231PS {st*rowb+64}(SI), {zh}, Z17")
    if bits == 4:
        e("\tVADDPS Z17, Z16, Z16")
    e("\tVEXTRACTF64X4 $1, Z16, Y10")
    e("\tVADDPS Y10, Y16, Y16")
    e("\tVBROADCASTSS (R9)(CX*4), Y12")
    e("\tVFMADD231PS Y12, Y16, Y0")
    e("\tVMOVSS (R12)(CX*4), X11")
    e("\tVMULSS (R13)(CX*4), X11, X11")
    e("\tVADDSS X11, X13, X13")
    e(f"\tADDQ ${S*rowb}, SI")
    e(f"\tADDQ ${gb}, DI")
    e("\tINCQ CX")
    e("\tCMPQ CX, R10")
    e(f"\tJLT {name}_group")
    e("\tVEXTRACTF128 $1, Y0, X10")
    e("\tVADDPS X10, X0, X10")
    e("\tVHADDPS X10, X10, X10")
    e("\tVHADDPS X10, X10, X10")
    e("\tVADDSS X13, X10, X10")
    e("\tVMOVSS X10, (DX)")
    e("\tADDQ $4, DX")
    e("\tLEAQ (R9)(R10*4), R9")
    e("\tLEAQ (R12)(R10*4), R12")
    e("\tDECQ R14")
    e(f"\tJNZ {name}_row")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


def quant4x2(name, bits):
    # 4 input rows × 2 weight rows (o, o+1 at codes+rowBytes, scales/biases + ng floats) in the State form
    # of quantrows(R=4): each x vector is loaded once for both weight rows, halving the loads per FMA.
    # State: weight row j's block at state[36j:], laid out as quantrows(R=4, state=True).
    rowb = 128 if bits == 4 else 64
    R = 4
    if bits == 4:
        part = [[(16 + 8*o + 2*r, 17 + 8*o + 2*r) for r in range(R)] for o in range(2)]
    else:
        part = [[(16 + 4*o + r, None) for r in range(R)] for o in range(2)]
    dec = [("Z8", "Z9"), ("Z10", "Z11")]
    e(f"// func {name}(codes *byte, rowBytes int, xp, scales, biases, xsT *float32, ng, groups, gb int, state *float32)")
    e(f"// dotQ{bits}Rows4StateAVX512 for weight rows o and o+1 (codes rowBytes apart, scales and biases ng apart),")
    e("// sharing each load of the packed inputs; state[0:36] is row o's, state[36:72] row o+1's.")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-80")
    e("\tMOVQ codes+0(FP), DI")
    e("\tMOVQ rowBytes+8(FP), R14")
    e("\tLEAQ (DI)(R14*1), R8")
    e("\tMOVQ xp+16(FP), SI")
    e("\tMOVQ scales+24(FP), R9")
    e("\tMOVQ biases+32(FP), R12")
    e("\tMOVQ xsT+40(FP), R13")
    e("\tMOVQ ng+48(FP), BX")
    e("\tSHLQ $2, BX")
    e("\tMOVQ groups+56(FP), R10")
    e("\tMOVQ gb+64(FP), R11")
    e("\tMOVQ state+72(FP), DX")
    if bits == 4:
        e("\tVMOVUPS q4float<>(SB), Z15")
    for o in range(2):
        e(f"\tVMOVUPS {144*o}(DX), Z{2*o}")
        e(f"\tVMOVUPS {144*o+64}(DX), Z{2*o+1}")
        e(f"\tVMOVUPS {144*o+128}(DX), X{4+o}")
    e(f"{name}_group:")
    e("\tTESTQ R10, R10")
    e(f"\tJE {name}_done")
    # The next pair of weight rows (the caller's next call) at the same offset: their codes arrive while
    # this pair computes.
    e("\tPREFETCHT0 (DI)(R14*2)")
    e("\tPREFETCHT0 (R8)(R14*2)")
    for o in range(2):
        for a, b in part[o]:
            e(f"\tVPXORD Z{a}, Z{a}, Z{a}")
            if b is not None:
                e(f"\tVPXORD Z{b}, Z{b}, Z{b}")
    e("\tXORQ AX, AX")
    e(f"{name}_loop:")
    for o, base in enumerate(["DI", "R8"]):
        zc, zh = dec[o]
        e(f"\tVPMOVZXBD ({base})(AX*1), {zc}")
        if bits == 4:
            e(f"\tVPSRLD $4, {zc}, {zh}")
            e(f"\tVPERMPS {PERM_A.replace('Z8', zc)}")
            e(f"\tVPERMPS {PERM_B.replace('Z9', zh)}")
        else:
            e(f"\tVCVTDQ2PS {zc}, {zc}")
    for r in range(R):
        e(f"\tVMOVUPS {r*rowb}(SI), Z6")
        if bits == 4:
            e(f"\tVMOVUPS {r*rowb+64}(SI), Z7")
        for o in range(2):
            zc, zh = dec[o]
            a, b = part[o][r]
            e(f"\tVFMADD231PS Z6, {zc}, Z{a}")
            if b is not None:
                e(f"\tVFMADD231PS Z7, {zh}, Z{b}")
    e(f"\tADDQ ${R*rowb}, SI")
    e("\tADDQ $16, AX")
    e("\tCMPQ AX, R11")
    e(f"\tJLT {name}_loop")
    e("\tVBROADCASTSS (R9), Z12")
    e("\tVBROADCASTSS (R9)(BX*1), Z13")
    for o in range(2):
        for a, b in part[o]:
            if b is not None:
                e(f"\tVADDPS Z{b}, Z{a}, Z{a}")
        for k in range(R // 2):
            za, zb = part[o][2*k][0], part[o][2*k+1][0]
            e(f"\tVSHUFF64X2 $0x44, Z{zb}, Z{za}, Z6")
            e(f"\tVSHUFF64X2 $0xee, Z{zb}, Z{za}, Z7")
            e("\tVADDPS Z7, Z6, Z6")
            e(f"\tVFMADD231PS Z{12+o}, Z6, Z{2*o+k}")
    e("\tVBROADCASTSS (R12), X14")
    e("\tVMULPS (R13), X14, X14")
    e("\tVADDPS X14, X4, X4")
    e("\tVBROADCASTSS (R12)(BX*1), X14")
    e("\tVMULPS (R13), X14, X14")
    e("\tVADDPS X14, X5, X5")
    e("\tADDQ $4, R9")
    e("\tADDQ $4, R12")
    e("\tADDQ $16, R13")
    e("\tADDQ R11, DI")
    e("\tADDQ R11, R8")
    e("\tDECQ R10")
    e(f"\tJMP {name}_group")
    e(f"{name}_done:")
    for o in range(2):
        e(f"\tVMOVUPS Z{2*o}, {144*o}(DX)")
        e(f"\tVMOVUPS Z{2*o+1}, {144*o+64}(DX)")
        e(f"\tVMOVUPS X{4+o}, {144*o+128}(DX)")
    e("\tVZEROUPPER")
    e("\tRET")
    e()

def quant16x2(name, bits, gs, fin="paired", cbits=8):
    # 16 input rows × 2 weight rows (o, and o+1 at codes+next, scales/biases+nextS), group by group: each
    # group's codes are decoded once into registers for all 16 rows (the 4-row kernels decode them once per 4
    # rows), then the rows pass in blocks of R (4 for 4 bits, 8 for 8 bits) with the one-row kernel's chains
    # (lanes 0-7 its first 8-lane chain of a step, lanes 8-15 its second), each block's group end folded into
    # its scaled accumulators in state. Per element the operations of dotQ{bits}RowAVX2.
    # xp: packQuantRows(n=16); xsT: [group][16 rows]. state (floats): the scaled 8-lane accumulator of row
    # i = R·b + r, weight row j at 16·((2b+j)·R/2 + r/2) + 8·(r%2); at 256 + 16j + i its bias term.
    # Groups of 128 hold twice the decoded codes (16 registers for two weight rows), so their row blocks are
    # half as tall.
    R = (4 if bits == 4 else 8) if gs <= 64 else (2 if bits == 4 else 4)
    RB = 16 // R
    steps = gs // 32 if bits == 4 else gs // 16
    rowb = 128 if bits == 4 else 64
    # cbits < 8 (bits 8): 2-, 3-, 5- or 6-bit codes widened in registers to the values 8-bit codes hold, 16
    # per step from a 16-byte read at the step's start (qbctl/qbshift/qbmask tables, as dotQbRowsAVX512).
    assert cbits == 8 or (bits == 8 and cbits in (2, 3, 5, 6))
    gb = gs * (bits if cbits == 8 else cbits) // 8
    A = [[r*2 + j for j in range(2)] for r in range(R)]          # Z0.. : first (lo) chain per row, weight
    B = [[2*R + r*2 + j for j in range(2)] for r in range(R)] if bits == 4 else None
    nd = 2 * steps * (2 if bits == 4 else 1)
    D0 = 4*R if bits == 4 else 2*R  # the decoded codes follow the chains
    assert D0 + nd <= 24
    def dreg(j, s, h):
        per = 2 if bits == 4 else 1
        return f"Z{D0 + (j*steps + s)*per + h}"
    e(f"// func {name}(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)")
    if cbits < 8:
        e(f"// {cbits}-bit codes widened in registers, read 16 bytes per step: up to {16 - 2*cbits} bytes past the ends of")
        e("// rows o and o+1, which the caller keeps inside the codes. Otherwise:")
    e(f"// dotQ{bits}RowAVX2 (group {gs}) for 16 packed input rows against weight rows o and o+1 (codes next bytes")
    e("// on, scales and biases nextS bytes on), decoding each group once for all rows; see gen_tile.py quant16x2.")
    e("// Row i < nrows's products go to dst[i·ldd] (weight row o) and, when nout is 2, dst[i·ldd+1].")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-104")
    e("\tMOVQ codes+0(FP), DI")
    e("\tMOVQ next+8(FP), R8")
    e("\tADDQ DI, R8")
    e("\tMOVQ xp+16(FP), SI")
    e("\tMOVQ scales+24(FP), R9")
    e("\tMOVQ biases+32(FP), R12")
    e("\tMOVQ xsT+40(FP), R13")
    e("\tMOVQ nextS+48(FP), BX")
    e("\tMOVQ groups+56(FP), R10")
    e("\tMOVQ state+64(FP), DX")
    e("\tMOVQ nrows+96(FP), CX")
    e(f"\tADDQ ${R-1}, CX")
    e(f"\tSHRQ ${R.bit_length()-1}, CX")
    if fin == "blend":
        e("\tMOVL $0xff00, AX")
        e("\tKMOVW AX, K1")
    # The state starts at zero: the scaled accumulators are read by each group end's FMA.
    e("\tVPXORD Z30, Z30, Z30")
    e("\tVPXORD Z31, Z31, Z31")
    for i in range(16):
        e(f"\tVMOVUPS Z30, {64*i}(DX)")
    def decode(ahead):
        for j, base in enumerate(["DI", "R8"]):
            for s_ in range(steps):
                d = dreg(j, s_, 0)
                if cbits == 8:
                    e(f"\tVPMOVZXBD {16*s_ + (gb if ahead else 0)}({base}), {d}")
                if bits == 4:
                    h = dreg(j, s_, 1)
                    # VPERMPS reads only the low 4 bits of each index: the table q4float gives the low nibble's
                    # value without a mask, and the shifted byte's.
                    e(f"\tVPSRLD $4, {d}, {h}")
                    e(f"\tVPERMPS q4float<>(SB), {d}, {d}")
                    e(f"\tVPERMPS q4float<>(SB), {h}, {h}")
                elif cbits < 8:
                    e(f"\tVBROADCASTI32X4 {2*cbits*s_ + (gb if ahead else 0)}({base}), {d}")
                    e(f"\tVPSHUFB qbctl{cbits}<>(SB), {d}, {d}")
                    e(f"\tVPSRLVD qbshift{cbits}<>(SB), {d}, {d}")
                    e(f"\tVPANDD qbmask{cbits}<>(SB), {d}, {d}")
                    e(f"\tVCVTDQ2PS {d}, {d}")
                else:
                    e(f"\tVCVTDQ2PS {d}, {d}")
    # Each group's codes are decoded during the previous group's last row block (after its products, before
    # its group end), so the next group's first products do not wait for the decode.
    e("\tTESTQ R10, R10")
    e(f"\tJE {name}_done")
    decode(False)
    e(f"{name}_group:")
    # The caller's next pair of weight rows, at this group: their codes, scales and biases arrive while this
    # pair computes (a pair takes microseconds, far longer than a memory read).
    e("\tMOVQ next+8(FP), R14")
    e("\tPREFETCHT0 (DI)(R14*2)")
    e("\tPREFETCHT0 (R8)(R14*2)")
    e("\tPREFETCHT0 (R9)(BX*2)")
    e("\tPREFETCHT0 (R12)(BX*2)")
    e("\tVBROADCASTSS (R9), Z26")
    e("\tVBROADCASTSS (R9)(BX*1), Z27")
    for b in range(RB):
        if b > 0:
            # Row blocks past nrows are padding: skip them (CX holds the number of row blocks to run).
            e(f"\tCMPQ CX, ${b}")
            e(f"\tJEQ {name}_short")
        for r in range(R):
            for j in range(2):
                e(f"\tVPXORD Z{A[r][j]}, Z{A[r][j]}, Z{A[r][j]}")
                if B:
                    e(f"\tVPXORD Z{B[r][j]}, Z{B[r][j]}, Z{B[r][j]}")
        for s_ in range(steps):
            for r in range(R):
                off = s_*16*rowb + (b*R + r)*rowb
                e(f"\tVMOVUPS {off}(SI), Z24")
                if B:
                    e(f"\tVMOVUPS {off+64}(SI), Z25")
                for j in range(2):
                    e(f"\tVFMADD231PS Z24, {dreg(j, s_, 0)}, Z{A[r][j]}")
                    if B:
                        e(f"\tVFMADD231PS Z25, {dreg(j, s_, 1)}, Z{B[r][j]}")
        if b == RB - 1:
            e("\tCMPQ R10, $1")
            e(f"\tJE {name}_last")
            decode(True)
            e(f"{name}_last:")
        if B:
            for r in range(R):
                for j in range(2):
                    e(f"\tVADDPS Z{B[r][j]}, Z{A[r][j]}, Z{A[r][j]}")
        for j in range(2):
            for k in range(R // 2):
                so = 64 * ((2*b + j) * (R // 2) + k)
                za, zb = A[2*k][j], A[2*k+1][j]
                if fin == "blend":
                    # Z28 = [a.lo | b.hi], Z29 = [a.hi | b.lo]: their sum is each row's lo+hi (addition commutes),
                    # the one-row order, with one lane shuffle per pair of rows.
                    e(f"\tVBLENDMPS Z{zb}, Z{za}, K1, Z28")
                    e(f"\tVSHUFF64X2 $0x4e, Z{zb}, Z{za}, Z29")
                    e("\tVADDPS Z29, Z28, Z28")
                    e(f"\tVFMADD213PS {so}(DX), Z{26+j}, Z28")
                    e(f"\tVMOVUPS Z28, {so}(DX)")
                elif fin == "paired":
                    # Z28 = [a.lo | b.lo], Z29 = [a.hi | b.hi]: their sum is each row's lo+hi, the one-row order.
                    e(f"\tVSHUFF64X2 $0x44, Z{zb}, Z{za}, Z28")
                    e(f"\tVSHUFF64X2 $0xee, Z{zb}, Z{za}, Z29")
                    e("\tVADDPS Z29, Z28, Z28")
                    e(f"\tVFMADD213PS {so}(DX), Z{26+j}, Z28")
                    e(f"\tVMOVUPS Z28, {so}(DX)")
                else:
                    for h, z in enumerate((za, zb)):
                        e(f"\tVEXTRACTF64X4 $1, Z{z}, Y28")
                        e(f"\tVADDPS Y28, Y{z}, Y28")
                        e(f"\tVFMADD213PS {so+32*h}(DX), Y{26+j}, Y28")
                        e(f"\tVMOVUPS Y28, {so+32*h}(DX)")
    e(f"\tJMP {name}_bias")
    # After fewer row blocks: the next group's decode, which the last row block would have overlapped.
    e(f"{name}_short:")
    e("\tCMPQ R10, $1")
    e(f"\tJE {name}_bias")
    decode(True)
    e(f"{name}_bias:")
    e("\tVBROADCASTSS (R12), Z28")
    e("\tVMULPS (R13), Z28, Z28")
    e("\tVADDPS Z28, Z30, Z30")
    e("\tVBROADCASTSS (R12)(BX*1), Z29")
    e("\tVMULPS (R13), Z29, Z29")
    e("\tVADDPS Z29, Z31, Z31")
    e(f"\tADDQ ${64*gs}, SI")
    e("\tADDQ $64, R13")
    e("\tADDQ $4, R9")
    e("\tADDQ $4, R12")
    e(f"\tADDQ ${gb}, DI")
    e(f"\tADDQ ${gb}, R8")
    e("\tDECQ R10")
    e(f"\tJNE {name}_group")
    e(f"{name}_done:")
    e("\tVMOVUPS Z30, 1024(DX)")
    e("\tVMOVUPS Z31, 1088(DX)")
    # Each element: the one-row kernels' horizontal sum of its 8-lane accumulator, then its bias term.
    e("\tMOVQ ldd+80(FP), CX")
    e("\tSHLQ $2, CX")
    e("\tMOVQ nrows+96(FP), R10")
    for j in range(2):
        e("\tMOVQ dst+72(FP), R11")
        if j == 1:
            e("\tCMPQ nout+88(FP), $2")
            e(f"\tJLT {name}_ret")
            e("\tADDQ $4, R11")
        for i in range(16):
            b, r = divmod(i, R)
            off = 64 * ((2*b + j) * (R // 2) + r // 2) + 32 * (r % 2)
            e(f"\tVMOVUPS {off}(DX), X0")
            e(f"\tVADDPS {off+16}(DX), X0, X0")
            e("\tVHADDPS X0, X0, X0")
            e("\tVHADDPS X0, X0, X0")
            e(f"\tVADDSS {1024 + 64*j + 4*i}(DX), X0, X0")
            e("\tVMOVSS X0, (R11)")
            if i < 15:
                e(f"\tCMPQ R10, ${i + 1}")
                e(f"\tJEQ {name}_w{j}")
                e("\tADDQ CX, R11")
        e(f"{name}_w{j}:")
    e(f"{name}_ret:")
    e("\tVZEROUPPER")
    e("\tRET")
    e()

e("// Code generated by gen_tile.py; DO NOT EDIT.")
e()
e("//go:build amd64 && !purego")
e()
e('#include "textflag.h"')
e()
e("// Generated by gen_tile.py; do not edit by hand.")
e()
e("// q4float holds float32 0..15, the values of a 4-bit code.")
for i in range(16):
    e(f"DATA q4float<>+{4*i}(SB)/4, ${hex(struct.unpack('<I', struct.pack('<f', float(i)))[0])}")
e("GLOBL q4float<>(SB), RODATA|NOPTR, $64")
e()
tile("tileF32x4x2AVX2", 4, 2, "f32", False)
tile("tileBF16x4x2AVX2", 4, 2, "bf16", False)
tile("tileF32x6x2AVX2", 6, 2, "f32", False)
tile("tileBF16x6x2AVX2", 6, 2, "bf16", False)
tilez("tileF32x4x4AVX512", 4, 4, "f32")
tilez("tileBF16x4x4AVX512", 4, 4, "bf16")
# One input row (a decode step) against 4 weight rows: four weight streams at once, and the next tile's rows
# prefetched, where one-row calls would stream one weight row per call.
tilez("tileF32x1x4AVX512", 1, 4, "f32")
tilez("tileBF16x1x4AVX512", 1, 4, "bf16")
quantrows("dotQ4Rows8AVX512", 4, 8)
quantrows("dotQ4Rows4AVX512", 4, 4)
quantrows("dotQ8Rows8AVX512", 8, 8)
quantrows("dotQ8Rows4AVX512", 8, 4)
PF = int(__import__("os").environ.get("Q1PF", "1024"))
for gs in (32, 64, 128):
    quantrow1(f"dotQ4Row1G{gs}AVX512", 4, gs // 2, PF)
# 8 bits: the unrolled form measured slower than the looped one (DecodeStream q8 rows=1), so it keeps the loop.
quantrows("dotQ8Rows1AVX512", 8, 1)
quantrows("dotQ4Rows8StateAVX512", 4, 8, True)
quantrows("dotQ4Rows4StateAVX512", 4, 4, True)
quantrows("dotQ8Rows8StateAVX512", 8, 8, True)
quantrows("dotQ8Rows4StateAVX512", 8, 4, True)
quant4x2("dotQ4Rows4x2StateAVX512", 4)
quant4x2("dotQ8Rows4x2StateAVX512", 8)
# Group ends: "blend" (one shuffle per pair of rows) measured at least as fast as "paired" (two) and "split"
# (an extract per row) on Zen 4; the others stay for machines where that differs.
for gs in (32, 64, 128):
    quant16x2(f"dotQ4Rows16x2G{gs}AVX512", 4, gs, "blend")
    quant16x2(f"dotQ8Rows16x2G{gs}AVX512", 8, gs, "blend")
# 2-, 3-, 5- and 6-bit codes: the 8-bit kernel widening each step's 16 codes in registers. The tables move code
# k's two source bytes into dword k of 128-bit lane k/4 (every lane holding the step's 16 bytes), shift out the
# bits below it and mask.
for cb in (2, 3, 5, 6):
    for k in range(16):
        lo = cb * k // 8
        for i, v in enumerate((lo, lo + 1, 0x80, 0x80)):
            e(f"DATA qbctl{cb}<>+{4*k+i}(SB)/1, ${v}")
    e(f"GLOBL qbctl{cb}<>(SB), RODATA|NOPTR, $64")
    for k in range(16):
        e(f"DATA qbshift{cb}<>+{4*k}(SB)/4, ${cb * k % 8}")
    e(f"GLOBL qbshift{cb}<>(SB), RODATA|NOPTR, $64")
    for k in range(16):
        e(f"DATA qbmask{cb}<>+{4*k}(SB)/4, ${(1 << cb) - 1}")
    e(f"GLOBL qbmask{cb}<>(SB), RODATA|NOPTR, $64")
    e()
    for gs in (32, 64, 128):
        quant16x2(f"dotQ{cb}Rows16x2G{gs}AVX512", 8, gs, "blend", cb)
# f16 weights (F16C's VCVTPH2PS; AVX-512F for the 16-lane form).
tile("tileF16x4x2AVX2", 4, 2, "f16", False)
tile("tileF16x6x2AVX2", 6, 2, "f16", False)
tilez("tileF16x4x4AVX512", 4, 4, "f16")
tilez("tileF16x1x4AVX512", 1, 4, "f16")
open(__import__("os").path.join(__import__("os").path.dirname(__file__), "tile_amd64.s"), "w").write("\n".join(out) + "\n")
