# Generates attn_amd64.s: the fast mode's attention kernels on AVX-512 (see attn.go for the arithmetic and its
# Go form, attnScoresGo and attnValuesGo). Run: python3 gen_attn.py
import os

out = []


def e(s=""):
    out.append(s)


def scores():
    # func attnScoresAVX512(s *float32, lds int, q *float32, nq int, k *float32, kstride int, n int, d int, scale float32)
    # s[i·lds + p] = tree16(Σ_c q_i[16c:16c+16]·k_p[16c:16c+16]) · scale, products rounded before the adds.
    # Keys go in pairs: the two accumulators' halvings (i, i+8) run apart, then one vector holds both and the
    # halvings (i, i+4), (i, i+2), (0, 1) run for the two at once (the same pairs as tree16); an odd last key
    # runs alone.
    e("// func attnScoresAVX512(s *float32, lds int, q *float32, nq int, k *float32, kstride int, n int, d int, scale float32)")
    e("TEXT ·attnScoresAVX512(SB), NOSPLIT, $0-68")
    e("\tMOVQ s+0(FP), DI")
    e("\tMOVQ lds+8(FP), R8")
    e("\tSHLQ $2, R8")
    e("\tMOVQ k+32(FP), SI")
    e("\tMOVQ kstride+40(FP), R9")
    e("\tSHLQ $2, R9")
    e("\tMOVQ n+48(FP), R10")
    e("\tMOVQ d+56(FP), R11")
    e("\tSHRQ $4, R11")  # 16-float chunks
    e("\tVBROADCASTSS scale+64(FP), Z20")
    e("scores_pair:")
    e("\tCMPQ R10, $2")
    e("\tJLT scores_single")
    e("\tLEAQ (SI)(R9*1), R14")  # the second key
    e("\tMOVQ q+16(FP), DX")
    e("\tMOVQ nq+24(FP), CX")
    e("\tMOVQ DI, R12")
    e("scores_pq:")
    e("\tVPXORD Z16, Z16, Z16")
    e("\tVPXORD Z21, Z21, Z21")
    e("\tXORQ BX, BX")
    e("\tMOVQ R11, R13")
    e("scores_pchunk:")
    e("\tVMOVUPS (DX)(BX*1), Z17")
    e("\tVMULPS (SI)(BX*1), Z17, Z19")
    e("\tVADDPS Z19, Z16, Z16")
    e("\tVMULPS (R14)(BX*1), Z17, Z19")
    e("\tVADDPS Z19, Z21, Z21")
    e("\tADDQ $64, BX")
    e("\tDECQ R13")
    e("\tJNZ scores_pchunk")
    e("\tVEXTRACTF64X4 $1, Z16, Y18")
    e("\tVADDPS Y18, Y16, Y16")
    e("\tVEXTRACTF64X4 $1, Z21, Y22")
    e("\tVADDPS Y22, Y21, Y21")
    e("\tVINSERTF64X4 $1, Y21, Z16, Z16")
    e("\tVSHUFF32X4 $0xb1, Z16, Z16, Z18")
    e("\tVADDPS Z18, Z16, Z16")
    e("\tVPERMILPS $0x4e, Z16, Z18")
    e("\tVADDPS Z18, Z16, Z16")
    e("\tVMOVSHDUP Z16, Z18")
    e("\tVADDPS Z18, Z16, Z16")
    e("\tVMULPS Z20, Z16, Z16")
    e("\tVMOVSS X16, (R12)")
    e("\tVEXTRACTF32X4 $2, Z16, X18")
    e("\tVMOVSS X18, 4(R12)")
    e("\tADDQ R8, R12")
    e("\tADDQ BX, DX")  # the next query head (d floats on)
    e("\tDECQ CX")
    e("\tJNZ scores_pq")
    e("\tADDQ $8, DI")
    e("\tLEAQ (R14)(R9*1), SI")
    e("\tSUBQ $2, R10")
    e("\tJMP scores_pair")
    e("scores_single:")
    e("\tTESTQ R10, R10")
    e("\tJE scores_done")
    e("\tMOVQ q+16(FP), DX")
    e("\tMOVQ nq+24(FP), CX")
    e("\tMOVQ DI, R12")
    e("scores_q:")
    e("\tVPXORD Z16, Z16, Z16")
    e("\tXORQ BX, BX")
    e("\tMOVQ R11, R13")
    e("scores_chunk:")
    e("\tVMOVUPS (DX)(BX*1), Z17")
    e("\tVMULPS (SI)(BX*1), Z17, Z17")
    e("\tVADDPS Z17, Z16, Z16")
    e("\tADDQ $64, BX")
    e("\tDECQ R13")
    e("\tJNZ scores_chunk")
    e("\tVEXTRACTF64X4 $1, Z16, Y18")
    e("\tVADDPS Y18, Y16, Y16")
    e("\tVEXTRACTF32X4 $1, Y16, X18")
    e("\tVADDPS X18, X16, X16")
    e("\tVPERMILPS $0x4e, X16, X18")
    e("\tVADDPS X18, X16, X16")
    e("\tVMOVSHDUP X16, X18")
    e("\tVADDSS X18, X16, X16")
    e("\tVMULSS X20, X16, X16")
    e("\tVMOVSS X16, (R12)")
    e("\tADDQ R8, R12")
    e("\tADDQ BX, DX")
    e("\tDECQ CX")
    e("\tJNZ scores_q")
    e("scores_done:")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


def values():
    # func attnValuesAVX512(o *float32, s *float32, lds int, nq int, v *float32, vstride int, n int, d int)
    # o_i[t] += s[i·lds + p]·v_p[t] for p in order (product rounded, then the add), d ≤ 256.
    # Heads go in groups of G (4 while c = d/16 ≤ 4, 2 while c ≤ 8): each key's value chunks are loaded once
    # for the group, and the group's G·c accumulators are independent chains, so the adds are not held up by
    # one chain's latency. Every o_i[t] still receives its products in key order: the bits of one head at a time.
    e("// func attnValuesAVX512(o *float32, s *float32, lds int, nq int, v *float32, vstride int, n int, d int)")
    e("TEXT ·attnValuesAVX512(SB), NOSPLIT, $0-64")
    e("\tMOVQ o+0(FP), DI")
    e("\tMOVQ s+8(FP), DX")
    e("\tMOVQ lds+16(FP), R8")
    e("\tSHLQ $2, R8")
    e("\tLEAQ (R8)(R8*2), R13")  # 3·lds bytes: the group's fourth head
    e("\tMOVQ nq+24(FP), CX")
    e("\tMOVQ vstride+40(FP), R9")
    e("\tSHLQ $2, R9")
    e("\tMOVQ d+56(FP), R11")
    e("\tSHRQ $4, R11")
    e("\tCMPQ n+48(FP), $0")
    e("\tJE values_done")
    # One code path per chunk count (1..16) keeps the accumulators in registers: jump table by R11.
    for c in range(1, 17):
        e(f"\tCMPQ R11, ${c}")
        e(f"\tJE values_c{c}")
    e("\tJMP values_done")
    srow = ["(R12)", "(R12)(R8*1)", "(R12)(R8*2)", "(R12)(R13*1)"]
    for c in range(1, 17):
        G = 4 if c <= 4 else (2 if c <= 8 else 1)
        e(f"values_c{c}:")
        if G > 1:
            e(f"values_c{c}_g:")
            e(f"\tCMPQ CX, ${G}")
            e(f"\tJLT values_c{c}_q")
            for g in range(G):
                for i in range(c):
                    e(f"\tVMOVUPS {64 * (g * c + i)}(DI), Z{g * c + i}")
            e("\tMOVQ v+32(FP), SI")
            e("\tMOVQ DX, R12")
            e("\tMOVQ n+48(FP), R10")
            e(f"values_c{c}_gp:")
            for i in range(c):
                e(f"\tVMOVUPS {64 * i}(SI), Z{16 + i}")
            for g in range(G):
                e(f"\tVBROADCASTSS {srow[g]}, Z{24 + g}")
            k = 0
            for g in range(G):
                for i in range(c):
                    e(f"\tVMULPS Z{16 + i}, Z{24 + g}, Z{28 + k % 4}")
                    e(f"\tVADDPS Z{28 + k % 4}, Z{g * c + i}, Z{g * c + i}")
                    k += 1
            e("\tADDQ $4, R12")
            e("\tADDQ R9, SI")
            e("\tDECQ R10")
            e(f"\tJNZ values_c{c}_gp")
            for g in range(G):
                for i in range(c):
                    e(f"\tVMOVUPS Z{g * c + i}, {64 * (g * c + i)}(DI)")
            e(f"\tADDQ ${64 * c * G}, DI")
            e(f"\tLEAQ (DX)(R8*{G}), DX")
            e(f"\tSUBQ ${G}, CX")
            e(f"\tJMP values_c{c}_g")
        e(f"values_c{c}_q:")
        e("\tTESTQ CX, CX")
        e("\tJE values_done")
        for i in range(c):
            e(f"\tVMOVUPS {64 * i}(DI), Z{i}")
        e("\tMOVQ v+32(FP), SI")
        e("\tMOVQ DX, R12")
        e("\tMOVQ n+48(FP), R10")
        e(f"values_c{c}_p:")
        e("\tVBROADCASTSS (R12), Z31")
        for i in range(c):
            e(f"\tVMULPS {64 * i}(SI), Z31, Z{16 + (i % 15)}")
            e(f"\tVADDPS Z{16 + (i % 15)}, Z{i}, Z{i}")
        e("\tADDQ $4, R12")
        e("\tADDQ R9, SI")
        e("\tDECQ R10")
        e(f"\tJNZ values_c{c}_p")
        for i in range(c):
            e(f"\tVMOVUPS Z{i}, {64 * i}(DI)")
        e(f"\tADDQ ${64 * c}, DI")
        e("\tADDQ R8, DX")
        e("\tDECQ CX")
        e(f"\tJMP values_c{c}_q")
    e("values_done:")
    e("\tVZEROUPPER")
    e("\tRET")
    e()


e("// Code generated by gen_attn.py; DO NOT EDIT.")
e()
e("//go:build amd64 && !purego")
e()
e('#include "textflag.h"')
e()
scores()
values()
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "attn_amd64.s"), "w").write("\n".join(out) + "\n")
