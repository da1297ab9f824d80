package kernel

import (
	"fmt"
	"math"
)

// IEEE half-precision weights (FormatF16). Widening f16 to float32 is exact, so an F16 Linear computes exactly
// the bits of an F32 Linear over the widened weights, in every kernel set. With AVX2, FMA and F16C the f32
// kernels' f16 twins widen the weights in registers (VCVTPH2PS): dotF16AVX2 for a decode step and leftover
// rows, the 4 × 2, 6 × 2 and (AVX-512) 4 × 4 tiles for blocks of rows. Elsewhere a block of weight rows at a
// time is widened into a worker's scratch and multiplied by the f32 kernels. Loading an f16 checkpoint this way reads half the bytes per token that
// widening it to float32 once at load did, and gives the same output.

// NewF16 wraps a row-major IEEE half-precision weight [out, in] (raw bits).
func NewF16(out, in int, w []uint16) (*Linear, error) {
	if out <= 0 || in <= 0 || len(w) != out*in {
		return nil, fmt.Errorf("f16 linear [%d,%d]: %d values", out, in, len(w))
	}
	return &Linear{Out: out, In: in, f16: w}, nil
}

// F16ToF32 widens one IEEE half-precision value (exact; a NaN stays a NaN with its payload, made quiet as
// VCVTPH2PS does).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && mant == 0:
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// Subnormal: mant·2^-24, normal in float32.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// WidenF16 converts src into dst[:len(src)] (exact).
func WidenF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	if useF16C && useAVX2 && len(src) > 0 {
		widenF16AVX2(&dst[0], &src[0], len(src))
		return
	}
	for i, h := range src {
		dst[i] = F16ToF32(h)
	}
}

// f16Block is how many weight rows a multi-row F16 product widens at a time: about 64 KiB of float32, at
// least 4 (the f32 tiles' height).
func f16Block(in int) int { return max(4, (16384/in)&^3) }

// forwardF16 computes the product on f16 weights (see the top of this file).
func (l *Linear) forwardF16(dst, x []float32, rows, grain int) {
	in, out := l.In, l.Out
	if useF16C && useAVX2 {
		l.forwardDenseAVX2(dst, x, rows, grain)
		return
	}
	l.Pool.For(out, grain, func(lo, hi int) {
		nb := min(f16Block(in), hi-lo)
		sp := getScratch(nb*in + rows*nb)
		buf := *sp
		for o0 := lo; o0 < hi; o0 += nb {
			b := min(nb, hi-o0)
			w := buf[:b*in]
			WidenF16(w, l.f16[o0*in:(o0+b)*in])
			// A serial f32 Linear over the widened block: its elements do not depend on how outputs are
			// blocked (the determinism contract), so they are the F32 Linear's bits.
			blk := Linear{Out: b, In: in, f32: w}
			d := buf[nb*in : nb*in+rows*b]
			blk.forwardTile(d, x, rows)
			for r := range rows {
				copy(dst[r*out+o0:r*out+o0+b], d[r*b:(r+1)*b])
			}
		}
		scratchPool.Put(sp)
	})
}
