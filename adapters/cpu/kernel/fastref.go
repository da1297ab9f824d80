package kernel

import (
	"encoding/binary"
	"math"
)

// The fast-mode arithmetic in Go, operation for operation: the portable path, and what the VNNI kernels are
// tested against. See fast.go for the definition.

// fastChunk is the number of inputs per chunk: the unit of the packed input layout and of the kernels' loop.
const fastChunk = 128

// fastRec is the bytes of one row's record per chunk: 128 code bytes, then its steps (16 floats for the
// nibble form's lanes of 8 inputs, 32 for the byte form's lanes of 4).
func fastRec(nibble bool) int {
	if nibble {
		return 192
	}
	return 256
}

// tinyQ8 is the bit pattern of 2⁻¹⁰⁰: blocks with a smaller max|x| count as zero.
const tinyQ8 = 0x0d800000

// quantizeFastGo writes one input row x (a multiple of 32 long) in the packed layout: the record of chunk c
// at rec[c·stride:], and the group sums at xs[:len(x)/gs]. Only the inputs' own bytes are written (a partial
// last chunk's unused bytes are left as they are).
func quantizeFastGo(rec []byte, stride int, xs, x []float32, gs int, nibble bool) {
	quantizeFastBlocksGo(rec, stride, xs, x, gs, nibble, false)
}

// quantizeFastBlocksGo is quantizeFastGo, with pair: each pair of blocks (64 inputs, gs a multiple of 64) takes
// one step from the pair's max|x|, which both blocks' codes use and both hold (the panel form's 64-input
// blocks, panel.go).
func quantizeFastBlocksGo(rec []byte, stride int, xs, x []float32, gs int, nibble, pair bool) {
	const magic = 1 << 23 * 1.5 // adding and subtracting it rounds |v| < 2²² to an integer, ties to even
	for g := range len(x) / gs {
		xg := x[g*gs : (g+1)*gs]
		var p [16]float32
		for i := 0; i < gs; i += 16 {
			for l, v := range xg[i : i+16] {
				p[l] += v
			}
		}
		for n := 16; n > 4; n /= 2 {
			for l := range n / 2 {
				p[l] += p[l+n/2]
			}
		}
		xs[g] = (p[0] + p[1]) + (p[2] + p[3])
	}
	for b := range len(x) / 32 {
		xb := x[32*b : 32*b+32]
		r := rec[(b/4)*stride:]
		bb := b % 4
		xm := xb // the inputs the step is taken over
		if pair {
			xm = x[64*(b/2) : 64*(b/2)+64]
		}
		var amax uint32 // max |x| as bits: for non-negative floats the bit order is the value order
		for _, v := range xm {
			amax = max(amax, math.Float32bits(v)&0x7fffffff)
		}
		var dg, inv float32
		switch {
		case amax >= 0x7f800000:
			dg = float32(math.NaN())
		case amax >= tinyQ8:
			dg = math.Float32frombits(amax) / 127
			inv = 1 / dg
		}
		code := func(j int) byte {
			if amax < tinyQ8 || amax >= 0x7f800000 {
				return 0
			}
			// float32(·) rounds the product before the additions (no fused multiply-add).
			return byte(int8(int32((float32(xb[j]*inv) + magic) - magic)))
		}
		if nibble {
			for i := range 16 {
				r[16*bb+i] = code(2 * i)
				r[64+16*bb+i] = code(2*i + 1)
			}
			for k := range 4 {
				binary.LittleEndian.PutUint32(r[128+16*bb+4*k:], math.Float32bits(dg))
			}
			continue
		}
		for i := range 32 {
			r[32*bb+i] = code(i)
		}
		for k := range 8 {
			binary.LittleEndian.PutUint32(r[128+32*bb+4*k:], math.Float32bits(dg))
		}
	}
}

// fastDotGo is one element: weight row codes (nibble: in/2 packed bytes; byte: in bytes), scales and biases,
// against the packed input row whose chunk c record is rec[c·stride:], with group sums xs.
func fastDotGo(codes []byte, scales, biases []float32, rec []byte, stride int, xs []float32, in, gs int, nibble bool) float32 {
	// The bias lanes first; the products add onto them.
	var acc [16]float32
	for g := range in / gs {
		acc[g%16] += float32(biases[g] * xs[g])
	}
	per := 4 // inputs per lane
	if nibble {
		per = 8
	}
	for j := 0; j < in; j += per {
		r := rec[(j/fastChunk)*stride:]
		t := j % fastChunk
		var isum int32
		if nibble {
			for k := range 4 {
				b := codes[j/2+k]
				isum += int32(b&15)*int32(int8(r[t/2+k])) + int32(b>>4)*int32(int8(r[64+t/2+k]))
			}
		} else {
			for k := range 4 {
				isum += int32(codes[j+k]) * int32(int8(r[t+k]))
			}
		}
		d := math.Float32frombits(binary.LittleEndian.Uint32(r[128+4*(t/per):]))
		u := float32(float32(isum) * d)
		acc[(j/per)%16] += float32(u * scales[j/gs])
	}
	return tree16(&acc)
}

// tree16 sums 16 lanes by halving: (i, i+8), (i, i+4), (i, i+2), then lanes 0 and 1.
func tree16(v *[16]float32) float32 {
	for n := 8; n >= 1; n /= 2 {
		for i := range n {
			v[i] += v[i+n]
		}
	}
	return v[0]
}
