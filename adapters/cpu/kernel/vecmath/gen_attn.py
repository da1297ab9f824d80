# Generates attn_amd64.s: the fast mode's attention kernels on AVX-512 (see attn.go for the arithmetic and its
# Go form, attnScoresGo and attnValuesGo). Run: python3 gen_attn.py
import os

out = []


def e(s=""):
    out.append(s)


def scores():
    # func attnScoresAVX512(s *float32, lds int, q *float32, nq int, k *float32, kstride int, n int, d int, scale float32)
    # s[i·lds + p] = tree16(Σ_c q_i[16c:16c+16]·k_p[16c:16c+16]) · scale, products rounded before the adds.
    # Keys go in pairs. Query heads go four at a time where there are four left: each chunk of the two keys
    # is loaded once for the four heads (the heads' chunks read from memory), and the eight accumulators'
    # halvings run together: (i, i+8) on pairs of accumulators shuffled into one vector, (i, i+4) on pairs of
    # those, (i, i+2) and (0, 1) on one vector of all eight (the same pairs as tree16), then a permutation puts
    # each head's two scores side by side for one 8-byte store. Fewer heads go one at a time: the two
    # accumulators' halvings (i, i+8) apart, then one vector holds both for the rest. An odd last key runs
    # alone.
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
    e("\tVMOVUPS attnScorePerm<>(SB), Z24")
    e("scores_pair:")
    e("\tCMPQ R10, $2")
    e("\tJLT scores_single")
    e("\tLEAQ (SI)(R9*1), R14")  # the second key
    e("\tMOVQ q+16(FP), DX")
    e("\tMOVQ nq+24(FP), CX")
    e("\tMOVQ DI, R12")
    # Four heads: BX = a head's bytes (d·4), R11 = three heads' bytes, R13 the heads' chunk pointer, AX the
    # chunks left; SI and R14 walk the keys' chunks and are put back after.
    e("\tMOVQ R11, BX")
    e("\tSHLQ $6, BX")
    e("\tLEAQ (BX)(BX*2), R11")
    e("scores_p4:")
    e("\tCMPQ CX, $4")
    e("\tJLT scores_p4_done")
    for a in range(8):
        e(f"\tVPXORD Z{a}, Z{a}, Z{a}")
    e("\tMOVQ DX, R13")
    e("\tMOVQ BX, AX")
    e("\tSHRQ $6, AX")
    e("scores_p4_chunk:")
    e("\tVMOVUPS (SI), Z8")
    e("\tVMOVUPS (R14), Z9")
    heads = ["(R13)", "(R13)(BX*1)", "(R13)(BX*2)", "(R13)(R11*1)"]
    for h in range(4):
        # Accumulator 2h+k: head h, key k.
        e(f"\tVMULPS {heads[h]}, Z8, Z{10 + 2 * h}")
        e(f"\tVMULPS {heads[h]}, Z9, Z{11 + 2 * h}")
        e(f"\tVADDPS Z{10 + 2 * h}, Z{2 * h}, Z{2 * h}")
        e(f"\tVADDPS Z{11 + 2 * h}, Z{2 * h + 1}, Z{2 * h + 1}")
    e("\tADDQ $64, SI")
    e("\tADDQ $64, R14")
    e("\tADDQ $64, R13")
    e("\tDECQ AX")
    e("\tJNZ scores_p4_chunk")
    e("\tSUBQ BX, SI")
    e("\tSUBQ BX, R14")
    # (i, i+8): head h's two keys in one vector, [key 0's 8 sums | key 1's 8 sums], into Z(2h).
    for h in range(4):
        e(f"\tVSHUFF32X4 $0x44, Z{2 * h + 1}, Z{2 * h}, Z8")
        e(f"\tVSHUFF32X4 $0xee, Z{2 * h + 1}, Z{2 * h}, Z9")
        e(f"\tVADDPS Z9, Z8, Z{2 * h}")
    # (i, i+4): heads h and h+1 in one vector, 128-bit lanes [h k0, h k1, h+1 k0, h+1 k1] of 4 sums each.
    for h in (0, 2):
        e(f"\tVSHUFF32X4 $0x88, Z{2 * h + 2}, Z{2 * h}, Z8")
        e(f"\tVSHUFF32X4 $0xdd, Z{2 * h + 2}, Z{2 * h}, Z9")
        e(f"\tVADDPS Z9, Z8, Z{2 * h}")
    # (i, i+2): in each 128-bit lane, heads 0/1's two sums then heads 2/3's.
    e("\tVSHUFPS $0x44, Z4, Z0, Z8")
    e("\tVSHUFPS $0xee, Z4, Z0, Z9")
    e("\tVADDPS Z9, Z8, Z8")
    # (0, 1): the even lanes hold the eight totals.
    e("\tVMOVSHDUP Z8, Z9")
    e("\tVADDPS Z9, Z8, Z8")
    e("\tVMULPS Z20, Z8, Z8")
    # Lanes 0-7: head 0 keys 0 and 1, head 1's, head 2's, head 3's.
    e("\tVPERMPS Z8, Z24, Z9")
    e("\tVEXTRACTF32X4 $1, Z9, X10")
    e("\tVMOVLPS X9, (R12)")
    e("\tVMOVHPS X9, (R12)(R8*1)")
    e("\tLEAQ (R12)(R8*2), R12")
    e("\tVMOVLPS X10, (R12)")
    e("\tVMOVHPS X10, (R12)(R8*1)")
    e("\tLEAQ (R12)(R8*2), R12")
    e("\tLEAQ (DX)(BX*4), DX")
    e("\tSUBQ $4, CX")
    e("\tJMP scores_p4")
    e("scores_p4_done:")
    e("\tMOVQ BX, R11")
    e("\tSHRQ $6, R11")
    e("\tTESTQ CX, CX")
    e("\tJE scores_pnext")
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
    e("scores_pnext:")
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
# attnScoreKernel's permutation of the four-head path: the even lanes of its last vector, which hold (head,
# key) totals in the order h0k0, h2k0, h0k1, h2k1, h1k0, h3k0, h1k1, h3k1, into lanes 0-7 as h0k0, h0k1, h1k0,
# h1k1, h2k0, h2k1, h3k0, h3k1.
perm = [0, 4, 8, 12, 2, 6, 10, 14] + [0] * 8
for i, v in enumerate(perm):
    e(f"DATA attnScorePerm<>+{4 * i}(SB)/4, ${v}")
e("GLOBL attnScorePerm<>(SB), RODATA|NOPTR, $64")
e()
scores()
values()
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "attn_amd64.s"), "w").write("\n".join(out) + "\n")
