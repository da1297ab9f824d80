package kernel

import (
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// Mode selects a Pool's kernels.
type Mode int

const (
	// ModeExact is the reference: every kernel set gives the bits documented in the package comment.
	ModeExact Mode = iota
	// ModeFast multiplies 4-bit weights by inputs quantized to int8 per block of 32 (integer dot products,
	// as llama.cpp's Q4×Q8_0 kernels do) instead of by the float inputs. It is NOT bit-identical to ModeExact (the
	// relative error of a product is about 1e-3 of Σ|x||w|; TestFastQ4Error bounds it), but it keeps the
	// determinism contract on its own: a row's result does not depend on the rows beside it, the worker count or
	// the CPU (the AVX512-VNNI kernels and the portable fastQ4Go give the same bits). Other formats and widths
	// run the exact kernels.
	ModeFast
)

// String returns the name ParseMode accepts.
func (m Mode) String() string {
	switch m {
	case ModeExact:
		return "exact"
	case ModeFast:
		return "fast"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "exact" or "fast" ("" means exact).
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "exact":
		return ModeExact, nil
	case "fast":
		return ModeFast, nil
	}
	return ModeExact, fmt.Errorf("unknown kernel mode %q (want exact or fast)", s)
}

// quantizeQ8 writes the fast-mode form of one input row: per block of 32 inputs, a step d = max|x|/127
// (written once per 8 inputs, d[j/8], the kernels' lane layout) and the inputs rounded (to nearest, ties to
// even) to xq = round(x·(1/d)); per group of gs inputs, the codes of its even inputs (the low nibbles) first,
// then those of its odd ones, and the group sum xs[g] (16 lanes p_l = Σ_i x_{16i+l} from +0 in order, halved
// to four lanes as p_l + p_{l+L/2}, then (q0+q1)+(q2+q3)). |x·(1/d)| stays below 127.5, so xq fits in
// [-127, 127]. A block holding NaN or ±Inf gets d = NaN, so its products come out NaN; a block whose max|x| is
// below 2⁻¹⁰⁰ (zero, or so small that 1/d could overflow) gets d = 0 and zero codes. Blocks of 32 (rather than
// whole groups) follow llama.cpp's Q8_0: one outlier coarsens only its own block. The AVX-512 kernel and
// quantizeQ8Go give the same bits.
func quantizeQ8(xq []int8, d, xs, x []float32, gs int) {
	ng := len(x) / gs
	if ng == 0 {
		return
	}
	if useVNNI {
		_, _, _ = xq[ng*gs-1], d[ng*gs/8-1], xs[ng-1]
		quantizeQ8AVX512(&xq[0], &d[0], &xs[0], &x[0], ng, gs)
		return
	}
	quantizeQ8Go(xq, d, xs, x, gs)
}

// tinyQ8 is the bit pattern of 2⁻¹⁰⁰: blocks with a smaller max|x| count as zero.
const tinyQ8 = 0x0d800000

// quantizeQ8Go is quantizeQ8 in Go, operation for operation.
func quantizeQ8Go(xq []int8, d, xs, x []float32, gs int) {
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
		q := xq[g*gs : (g+1)*gs]
		h := gs / 2
		for b := 0; b < gs; b += 32 {
			var amax uint32 // max |x| as bits: for non-negative floats the bit order is the value order
			for _, v := range xg[b : b+32] {
				amax = max(amax, math.Float32bits(v)&0x7fffffff)
			}
			qe, qo := q[b/2:b/2+16], q[h+b/2:h+b/2+16]
			db := d[(g*gs+b)/8 : (g*gs+b)/8+4]
			if amax < tinyQ8 || amax >= 0x7f800000 {
				clear(qe)
				clear(qo)
				v := float32(0)
				if amax >= 0x7f800000 {
					v = float32(math.NaN())
				}
				for k := range db {
					db[k] = v
				}
				continue
			}
			dg := math.Float32frombits(amax) / 127
			inv := 1 / dg
			for k := range db {
				db[k] = dg
			}
			for j := range qe {
				// float32(·) rounds the product before the additions (no fused multiply-add).
				qe[j] = int8(int32((float32(xg[b+2*j]*inv) + magic) - magic))
				qo[j] = int8(int32((float32(xg[b+2*j+1]*inv) + magic) - magic))
			}
		}
	}
}

// fastQ4Go is the fast-mode 4-bit product of one weight row (codes, scales, biases) with one quantized input
// row (xq, d: one step per 8 inputs) and its group sums xs, written operation for operation like the dotQ4Fast
// kernels: per group and lane l (gs/8 lanes, lane l holding code bytes 4l..4l+3), an exact integer dot
// product, then acc_l += (float(isum)·d_l)·s_g with each product rounded; the lanes are halved down to four
// (v_i + v_{i+L/2}) and summed as (v0+v1)+(v2+v3), and the bias term Σ_g b_g·xs_g (group order) is added.
func fastQ4Go(codes []byte, xq []int8, d, scales, biases, xs []float32, gs int) float32 {
	var acc [16]float32
	var bias float32
	L := gs / 8
	for g := range len(scales) {
		cb := codes[g*gs/2 : (g+1)*gs/2]
		xe, xo := xq[g*gs:g*gs+gs/2], xq[g*gs+gs/2:(g+1)*gs]
		for l := range L {
			var isum int32
			for k := 4 * l; k < 4*l+4; k++ {
				isum += int32(cb[k]&15)*int32(xe[k]) + int32(cb[k]>>4)*int32(xo[k])
			}
			u := float32(float32(isum) * d[g*L+l])
			acc[l] += float32(u * scales[g])
		}
		bias += float32(biases[g] * xs[g])
	}
	for n := L; n > 4; n /= 2 {
		for i := range n / 2 {
			acc[i] += acc[i+n/2]
		}
	}
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + bias
}

// fastQ4Rows holds the Rows forms (one weight row, several input rows) by group size / 64.
var fastQ4Rows = [3]func(codes *byte, xq *int8, d, scales, biases, xs *float32, groups, nrows int, dst *float32, ldd int){
	dotQ4FastRowsG32AVX512, dotQ4FastRowsG64AVX512, dotQ4FastRowsG128AVX512,
}

var xqPool = sync.Pool{New: func() any { return new([]int8) }}

// fastQ4 holds the fast-mode 4-bit kernels by group size / 64 (group 32, 64 or 128).
var fastQ4 = [3]func(codes *byte, xq *int8, d, scales, biases, xs *float32, groups, nrows int, dst *float32){
	dotQ4FastG32AVX512, dotQ4FastG64AVX512, dotQ4FastG128AVX512,
}

// forwardQuantFast is the ModeFast 4-bit product: inputs quantized once per call (per row, so a row's
// quantization does not depend on the rows beside it), then each element by itself with the VNNI kernel or
// its Go mirror.
func (l *Linear) forwardQuantFast(dst, x []float32, rows int) {
	q := l.q
	in, out, gs := l.In, l.Out, q.Group
	ng := in / gs
	rowBytes := in / 2
	codes := unsafe.Slice((*byte)(unsafe.Pointer(&q.Codes[0])), len(q.Codes)*4)
	nd := in / 8 // steps per row: one per 8 inputs
	dp := getScratch(rows * (nd + ng))
	defer scratchPool.Put(dp)
	d, xs := (*dp)[:rows*nd], (*dp)[rows*nd:]
	xqp := xqPool.Get().(*[]int8)
	defer xqPool.Put(xqp)
	if cap(*xqp) < rows*in {
		*xqp = make([]int8, rows*in)
	}
	xq := (*xqp)[:rows*in]
	for r := range rows {
		quantizeQ8(xq[r*in:(r+1)*in], d[r*nd:(r+1)*nd], xs[r*ng:(r+1)*ng], x[r*in:(r+1)*in], gs)
	}
	k, kr := fastQ4[gs/64], fastQ4Rows[gs/64]
	vnni := useVNNI
	grain := max(1, 32768/(in*rows))
	l.Pool.For(out, grain, func(lo, hi int) {
		if vnni && rows == 1 {
			k(&codes[lo*rowBytes], &xq[0], &d[0], &q.Scales[lo*ng], &q.Biases[lo*ng], &xs[0], ng, hi-lo, &dst[lo])
			return
		}
		for o := lo; o < hi; o++ {
			c := codes[o*rowBytes : (o+1)*rowBytes]
			sc, bi := q.Scales[o*ng:(o+1)*ng], q.Biases[o*ng:(o+1)*ng]
			// Several rows: each weight row meets every input row while its codes are in L1.
			if vnni {
				kr(&c[0], &xq[0], &d[0], &sc[0], &bi[0], &xs[0], ng, rows, &dst[o], out)
				continue
			}
			for r := range rows {
				dst[r*out+o] = fastQ4Go(c, xq[r*in:(r+1)*in], d[r*nd:(r+1)*nd], sc, bi, xs[r*ng:(r+1)*ng], gs)
			}
		}
	})
}
