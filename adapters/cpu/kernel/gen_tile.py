# Generates tile_amd64.s: multi-row × multi-output tiles for f32/bf16 and multi-row quantized kernels.
out = []
def e(s=""): out.append(s)

def tile(name, R, O, bf16, evex):
    # regs: w: Y0..Y(O-1), x: Y(O)..Y(O+R-1), accs: base..base+R*O-1
    wreg = [f"Y{i}" for i in range(O)]
    xreg = [f"Y{O+i}" for i in range(R)]
    base = 16 if evex else O + R
    acc = [[f"Y{base + r*O + o}" for o in range(O)] for r in range(R)]
    assert base + R*O <= (32 if evex else 16)
    xptr = ["R8", "R9", "R10", "R11"][:R]
    wptr = ["R12", "R13", "SI", "DI"][:O]
    wt = "uint16" if bf16 else "float32"
    e(f"// func {name}(x *float32, ldx int, w *{wt}, ldw int, n int, dst *float32, ldd int, scratch *float32)")
    e(f"// {R} input rows × {O} weight rows; every element runs dot{'BF16' if bf16 else 'F32'}AVX2's operations (n a multiple of 32).")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-64")
    e("\tMOVQ x+0(FP), R8")
    e("\tMOVQ ldx+8(FP), BX")
    e("\tSHLQ $2, BX")
    for i in range(1, R):
        e(f"\tLEAQ ({xptr[i-1]})(BX*1), {xptr[i]}")
    e("\tMOVQ w+16(FP), R12")
    e("\tMOVQ ldw+24(FP), BX")
    e(f"\tSHLQ ${1 if bf16 else 2}, BX")
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
            if bf16:
                e(f"\tVPMOVZXWD ({wptr[o]})(AX*2), {wreg[o]}")
                e(f"\tVPSLLD $16, {wreg[o]}, {wreg[o]}")
            else:
                e(f"\tVMOVUPS ({wptr[o]})(AX*4), {wreg[o]}")
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

def tilez(name, R, O, bf16):
    # 16-lane passes: lanes 0-7 hold chain 2p, lanes 8-15 chain 2p+1, so each pass reads whole cache lines.
    wreg = [f"Z{i}" for i in range(O)]
    xreg = [f"Z{O+i}" for i in range(R)]
    acc = [[16 + r*O + o for o in range(O)] for r in range(R)]
    assert 16 + R*O <= 32
    xptr = ["R8", "R9", "R10", "R11"][:R]
    wptr = ["R12", "R13", "SI", "DI"][:O]
    wt = "uint16" if bf16 else "float32"
    e(f"// func {name}(x *float32, ldx int, w *{wt}, ldw int, n int, dst *float32, ldd int, scratch *float32)")
    e(f"// {R} input rows × {O} weight rows with 16-lane vectors holding two of dot{'BF16' if bf16 else 'F32'}AVX2's 8-lane")
    e("// chains each; per element the same operations in the same order (n a multiple of 32).")
    e(f"TEXT ·{name}(SB), NOSPLIT, $0-64")
    e("\tMOVQ x+0(FP), R8")
    e("\tMOVQ ldx+8(FP), BX")
    e("\tSHLQ $2, BX")
    for i in range(1, R):
        e(f"\tLEAQ ({xptr[i-1]})(BX*1), {xptr[i]}")
    e("\tMOVQ w+16(FP), R12")
    e("\tMOVQ ldw+24(FP), BX")
    e(f"\tSHLQ ${1 if bf16 else 2}, BX")
    for i in range(1, O):
        e(f"\tLEAQ ({wptr[i-1]})(BX*1), {wptr[i]}")
    e("\tMOVQ n+32(FP), DX")
    e("\tMOVQ scratch+56(FP), BX")
    accs = [a for row in acc for a in row]
    for p in range(2):
        for a in accs:
            e(f"\tVPXORD Z{a}, Z{a}, Z{a}")
        e(f"\tMOVQ ${16*p}, AX")
        lbl = f"{name}_p{p}"
        e(f"{lbl}:")
        for o in range(O):
            if bf16:
                e(f"\tVPMOVZXWD ({wptr[o]})(AX*2), {wreg[o]}")
                e(f"\tVPSLLD $16, {wreg[o]}, {wreg[o]}")
            else:
                e(f"\tVMOVUPS ({wptr[o]})(AX*4), {wreg[o]}")
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

e("//go:build amd64 && !purego")
e()
e('#include "textflag.h"')
e()
e("// Generated by gen_tile.py; do not edit by hand.")
e()
tile("tileF32x4x2AVX2", 4, 2, False, False)
tile("tileBF16x4x2AVX2", 4, 2, True, False)
tilez("tileF32x4x4AVX512", 4, 4, False)
tilez("tileBF16x4x4AVX512", 4, 4, True)
open(__import__("os").path.join(__import__("os").path.dirname(__file__), "tile_amd64.s"), "w").write("\n".join(out) + "\n")
