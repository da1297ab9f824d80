package kernel

import (
	"fmt"
	"math"
	"unsafe"
)

// Mode selects a Pool's kernels.
type Mode int

const (
	// ModeExact is the reference: every kernel set gives the bits documented in the package comment.
	ModeExact Mode = iota
	// ModeFast multiplies 4-bit weights by inputs quantized to int8 per group (integer dot products, as
	// llama.cpp's Q4×Q8 kernels do) instead of by the float inputs. It is NOT bit-identical to ModeExact (the
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

// quantizeQ8 writes the fast-mode form of one input row: per group g, d[g] = max|x|/127 and the inputs
// rounded to xq = round(x/d) in [-127, 127], the gs/2 inputs of the low nibbles (even j) first, then the gs/2
// of the high nibbles. A group holding NaN or ±Inf gets d = NaN, so its products come out NaN.
func quantizeQ8(xq []int8, d, x []float32, gs int) {
	for g := range len(x) / gs {
		xg := x[g*gs : (g+1)*gs]
		var amax float32
		finite := true
		for _, v := range xg {
			a := float32(math.Abs(float64(v)))
			if !(a <= math.MaxFloat32) {
				finite = false
			}
			amax = max(amax, a)
		}
		q := xq[g*gs : (g+1)*gs]
		if !finite || amax == 0 {
			clear(q)
			d[g] = 0
			if !finite {
				d[g] = float32(math.NaN())
			}
			continue
		}
		dg := amax / 127
		d[g] = dg
		for j, v := range xg {
			r := math.RoundToEven(float64(v / dg))
			r = max(-127, min(127, r))
			q[(j&1)*(gs/2)+j/2] = int8(r)
		}
	}
}

// fastQ4Go is the fast-mode 4-bit product of one weight row (codes, scales, biases) with one quantized input
// row (xq, d) and its group sums xs, written operation for operation like the dotQ4Fast kernels: per group
// and lane l (gs/8 lanes, lane l holding code bytes 4l..4l+3), an exact integer dot product, then
// acc_l += (float(isum)·d_g)·s_g with each product rounded; the lanes are halved down to four
// (v_i + v_{i+L/2}) and summed as (v0+v1)+(v2+v3). The bias term is Σ_g b_g·xs_g in group order.
func fastQ4Go(codes []byte, xq []int8, d, scales, biases, xs []float32, gs int) (prod, bias float32) {
	var acc [16]float32
	L := gs / 8
	for g := range len(d) {
		cb := codes[g*gs/2 : (g+1)*gs/2]
		xe, xo := xq[g*gs:g*gs+gs/2], xq[g*gs+gs/2:(g+1)*gs]
		for l := range L {
			var isum int32
			for k := 4 * l; k < 4*l+4; k++ {
				isum += int32(cb[k]&15)*int32(xe[k]) + int32(cb[k]>>4)*int32(xo[k])
			}
			u := float32(float32(isum) * d[g])
			acc[l] += float32(u * scales[g])
		}
		bias += float32(biases[g] * xs[g])
	}
	for n := L; n > 4; n /= 2 {
		for i := range n / 2 {
			acc[i] += acc[i+n/2]
		}
	}
	return (acc[0] + acc[1]) + (acc[2] + acc[3]), bias
}

// fastQ4 holds the fast-mode 4-bit kernels by group size / 64 (group 32, 64 or 128).
var fastQ4 = [3]func(codes *byte, xq *int8, d, scales, biases, xs *float32, groups int, out *float32){
	dotQ4FastG32AVX512, dotQ4FastG64AVX512, dotQ4FastG128AVX512,
}

// forwardQuantFast is the ModeFast 4-bit product: inputs quantized once per call (per row, so a row's
// quantization does not depend on the rows beside it), then each element by itself with the VNNI kernel or
// its Go mirror. xs holds the exact group sums of x, [row][group].
func (l *Linear) forwardQuantFast(dst, x, xs []float32, rows int) {
	q := l.q
	in, out, gs := l.In, l.Out, q.Group
	ng := in / gs
	rowBytes := in / 2
	codes := unsafe.Slice((*byte)(unsafe.Pointer(&q.Codes[0])), len(q.Codes)*4)
	dp := getScratch(rows * ng)
	defer scratchPool.Put(dp)
	d := *dp
	xq := make([]int8, rows*in)
	for r := range rows {
		quantizeQ8(xq[r*in:(r+1)*in], d[r*ng:(r+1)*ng], x[r*in:(r+1)*in], gs)
	}
	k := fastQ4[gs/64]
	vnni := useVNNI
	grain := max(1, 32768/(in*rows))
	l.Pool.For(out, grain, func(lo, hi int) {
		var res [2]float32
		for o := lo; o < hi; o++ {
			c := codes[o*rowBytes : (o+1)*rowBytes]
			sc, bi := q.Scales[o*ng:(o+1)*ng], q.Biases[o*ng:(o+1)*ng]
			for r := range rows {
				if vnni {
					k(&c[0], &xq[r*in], &d[r*ng], &sc[0], &bi[0], &xs[r*ng], ng, &res[0])
				} else {
					res[0], res[1] = fastQ4Go(c, xq[r*in:(r+1)*in], d[r*ng:(r+1)*ng], sc, bi, xs[r*ng:(r+1)*ng], gs)
				}
				dst[r*out+o] = res[0] + res[1]
			}
		}
	})
}
