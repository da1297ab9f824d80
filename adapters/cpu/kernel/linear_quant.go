package kernel

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/viterin/vek/vek32"
)

// The MLX affine-quantized products: the portable path, AVX2 and AVX-512 (kernels in assembly).

// forwardQuant uses y_r = Σ_g (s_rg·Σ_{j∈g} q_rj x_j + b_rg·Σ_{j∈g} x_j), unpacking one row of codes at a time.
func (l *Linear) forwardQuant(dst, x []float32, rows int) {
	q := l.q
	if l.Pool.Mode() == ModeFast {
		l.forwardQuantFast(dst, x, rows)
		return
	}
	in, out, gs := l.In, l.Out, q.Group
	ng := in / gs
	wpr := q.wordsPerRow(in)
	// Group sums of x: computed once per call, in a fixed order per row, so they do not depend on rows.
	xsp := getScratch(rows * ng)
	xs := *xsp
	for r := range rows {
		groupSums(xs[r*ng:(r+1)*ng], x[r*in:(r+1)*in], gs)
	}
	grain := max(1, 32768/(in*rows))
	if useAVX512 {
		l.forwardQuantAVX512(dst, x, xs, rows)
		scratchPool.Put(xsp)
		return
	}
	if useAVX2 {
		l.forwardQuantAVX2(dst, x, xs, rows)
		scratchPool.Put(xsp)
		return
	}
	l.Pool.For(out, grain, func(lo, hi int) {
		sp := getScratch(in)
		codes := *sp
		for o := lo; o < hi; o++ {
			UnpackCodes(codes, q.Codes[o*wpr:(o+1)*wpr], q.Bits, in)
			sc, bi := q.Scales[o*ng:(o+1)*ng], q.Biases[o*ng:(o+1)*ng]
			for r := range rows {
				xr := x[r*in : (r+1)*in]
				xsr := xs[r*ng : (r+1)*ng]
				var acc float32
				for g := range ng {
					d := vek32.Dot(codes[g*gs:(g+1)*gs], xr[g*gs:(g+1)*gs])
					acc += float32(sc[g]*d) + float32(bi[g]*xsr[g])
				}
				dst[r*out+o] = acc
			}
		}
		scratchPool.Put(sp)
	})
	scratchPool.Put(xsp)
}

// forwardQuantAVX2 is forwardQuant on AVX2: 4- and 8-bit codes are read straight from the packed bytes by
// assembly kernels (no unpacking pass); other widths are widened once per weight row. For 4 bits, x is split into even and odd inputs once per call, matching the low
// and high nibble of each byte, and each group's scale is folded into a vector accumulator:
// y = hsum(Σ_g s_g·v_g) + Σ_g b_g·xsum_g. Rows are processed in pairs that share one decode of the codes; the
// per-row operations are the same for a pair and a single row, so results do not depend on the row count.
func (l *Linear) forwardQuantAVX2(dst, x, xs []float32, rows int) {
	if rows >= quantRowsMin {
		l.forwardQuantRowsAVX2(dst, x, xs, rows)
		return
	}
	q := l.q
	in, out, gs := l.In, l.Out, q.Group
	ng := in / gs
	rowBytes := in * q.Bits / 8
	codes := unsafe.Slice((*byte)(unsafe.Pointer(&q.Codes[0])), len(q.Codes)*4)
	var xe, xo []float32
	var xsp *[]float32
	if q.Bits == 4 {
		xsp = getScratch(rows * in)
		xe, xo = (*xsp)[:rows*in/2], (*xsp)[rows*in/2:]
		for i := range rows * in / 2 {
			xe[i], xo[i] = x[2*i], x[2*i+1]
		}
	}
	grain := max(1, 32768/(in*rows))
	wpr := q.wordsPerRow(in)
	l.Pool.For(out, grain, func(lo, hi int) {
		var pair [2]float32
		var fc []float32
		if q.Bits != 4 && q.Bits != 8 {
			fp := getScratch(in)
			defer scratchPool.Put(fp)
			fc = *fp
		}
		for o := lo; o < hi; o++ {
			c := &codes[o*rowBytes]
			sc, bi := q.Scales[o*ng:(o+1)*ng], q.Biases[o*ng:(o+1)*ng]
			// biasSum is Σ_g b_g·Σ_{j∈g} x_j for row r, in group order.
			biasSum := func(r int) float32 {
				var s float32
				for g, xg := range xs[r*ng : (r+1)*ng] {
					s += float32(bi[g] * xg)
				}
				return s
			}
			if q.Bits == 4 {
				r := 0
				for ; r+2 <= rows; r += 2 {
					dotQ4Row2AVX2(c, &xe[r*in/2], &xo[r*in/2], &xe[(r+1)*in/2], &xo[(r+1)*in/2], &sc[0], ng, gs/2, &pair[0])
					dst[r*out+o] = pair[0] + biasSum(r)
					dst[(r+1)*out+o] = pair[1] + biasSum(r+1)
				}
				if r < rows {
					dst[r*out+o] = dotQ4RowAVX2(c, &xe[r*in/2], &xo[r*in/2], &sc[0], ng, gs/2) + biasSum(r)
				}
				continue
			}
			r := 0
			if q.Bits == 8 {
				for ; r+2 <= rows; r += 2 {
					dotQ8Row2AVX2(c, &x[r*in], &x[(r+1)*in], &sc[0], ng, gs, &pair[0])
					dst[r*out+o] = pair[0] + biasSum(r)
					dst[(r+1)*out+o] = pair[1] + biasSum(r+1)
				}
				if r < rows {
					dst[r*out+o] = dotQ8RowAVX2(c, &x[r*in], &sc[0], ng, gs) + biasSum(r)
				}
				continue
			}
			// 2, 3, 5 and 6 bits: widen the row's codes once, then the same scale-folded product.
			UnpackCodes(fc, q.Codes[o*wpr:(o+1)*wpr], q.Bits, in)
			for ; r+2 <= rows; r += 2 {
				dotCodesRow2AVX2(&fc[0], &x[r*in], &x[(r+1)*in], &sc[0], ng, gs, &pair[0])
				dst[r*out+o] = pair[0] + biasSum(r)
				dst[(r+1)*out+o] = pair[1] + biasSum(r+1)
			}
			if r < rows {
				dst[r*out+o] = dotCodesRowAVX2(&fc[0], &x[r*in], &sc[0], ng, gs) + biasSum(r)
			}
		}
	})
	if xsp != nil {
		scratchPool.Put(xsp)
	}
}

// groupSums writes dst[g] = Σ_{j∈g} x_j, each group summed in order from +0. Four groups run side by side
// (independent chains, so four adds per add latency); each group's own order is unchanged.
func groupSums(dst, x []float32, gs int) {
	ng := len(x) / gs
	g := 0
	for ; g+4 <= ng; g += 4 {
		a, b := x[g*gs:(g+1)*gs], x[(g+1)*gs:(g+2)*gs]
		c, d := x[(g+2)*gs:(g+3)*gs], x[(g+3)*gs:(g+4)*gs]
		b, c, d = b[:len(a)], c[:len(a)], d[:len(a)]
		var s0, s1, s2, s3 float32
		for j, v := range a {
			s0 += v
			s1 += b[j]
			s2 += c[j]
			s3 += d[j]
		}
		dst[g], dst[g+1], dst[g+2], dst[g+3] = s0, s1, s2, s3
	}
	for ; g < ng; g++ {
		var s float32
		for _, v := range x[g*gs : (g+1)*gs] {
			s += v
		}
		dst[g] = s
	}
}

// quantBlock is the number of input rows the next AVX-512 quantized kernel call takes when rem rows are left;
// rb16 is the row block of the weight's 16x2 kernel (0: none). Under 16 rows the 16x2 kernel runs padded,
// skipping the row blocks past rem, when its padding rows number at most a quarter of rem: blocks of 4 leave
// single rows, each another pass over the weights (a drafter's 15-row LM head took 3 + 3), while more padding
// costs more than those (single-thread measurements with the weights in cache).
func quantBlock(rem, rb16 int) int {
	switch {
	case rb16 > 0 && rem >= 16:
		return 16
	case rb16 > 0 && 4*((rem+rb16-1)/rb16*rb16-rem) <= rem:
		return 16
	case rem >= 8 && !quantPairs:
		return 8
	case rem >= 4:
		return 4
	}
	return 1
}

// quantRowBlock is one call's block of input rows: n rows from row r (a last block of 16 may run past the
// input rows; see quantBlock).
type quantRowBlock struct{ r, n int }

// quantBlocks splits rows into the blocks quantBlock picks, in order.
func quantBlocks(rows, rb16 int) []quantRowBlock {
	var bs []quantRowBlock
	for r := 0; r < rows; {
		n := quantBlock(rows-r, rb16)
		bs = append(bs, quantRowBlock{r, n})
		r += n
	}
	return bs
}

// forwardQuantAVX512 is the quantized product on AVX-512 (2, 3, 5 and 6 bits through the 8-bit kernels):
// input rows go in blocks of 16, 8, 4 or 1 that share each decode of the codes, with 16-lane vectors holding
// two of the AVX2 kernel's 8-lane chains and the bias term computed beside them, so every element gets the
// AVX2 kernels' bits. Inputs and group sums are packed once per call.
// It is one function because it is the hot loop: the blocks of rows share one packing of the inputs and one
// decode of each group of codes, and splitting it would cost calls per group.
func (l *Linear) forwardQuantAVX512(dst, x, xs []float32, rows int) {
	q := l.q
	in, out, gs := l.In, l.Out, q.Group
	ng := in / gs
	// 2, 3, 5 and 6 bits run the 8-bit kernels on codes widened to bytes, a chunk of weight rows at a time
	// (dotCodesRowAVX2, their AVX2 form, runs the operations of dotQ8RowAVX2, so the bits are unchanged).
	wide := q.Bits != 4 && q.Bits != 8
	kbits := q.Bits
	if wide {
		kbits = 8
	}
	rowBytes := in * kbits / 8 // of the codes the kernels read (widened ones for 2, 3, 5 and 6 bits)
	qrb := in * q.Bits / 8     // of the packed codes
	gb := gs * kbits / 8
	codes := unsafe.Slice((*byte)(unsafe.Pointer(&q.Codes[0])), len(q.Codes)*4)
	k16 := quant16Kernel(kbits, gs)
	rb16 := 0 // the 16x2 kernel's row block
	if k16 != nil && quant16 {
		rb16 = quant16Block(kbits, gs)
	}
	// A last block of 16 may hold fewer real rows: the packed rows run past rows up to padded.
	blocks := quantBlocks(rows, rb16)
	last := blocks[len(blocks)-1]
	padded := last.r + last.n
	pp := getScratch(padded * (in + ng))
	defer scratchPool.Put(pp)
	xp, xsT := (*pp)[:padded*in], (*pp)[padded*in:]
	for _, b := range blocks {
		r, n := b.r, b.n
		nreal := min(n, rows-r)
		packQuantRows(xp[r*in:(r+n)*in], x[r*in:(r+nreal)*in], n, nreal, in, kbits)
		t := xsT[r*ng : (r+n)*ng]
		for i := range n {
			for g := range ng {
				t[g*n+i] = 0
				if i < nreal {
					t[g*n+i] = xs[(r+i)*ng+g]
				}
			}
		}
	}
	k8, k4, k4x2 := dotQ4Rows8StateAVX512, dotQ4Rows4StateAVX512, dotQ4Rows4x2StateAVX512
	if kbits == 8 {
		k8, k4, k4x2 = dotQ8Rows8StateAVX512, dotQ8Rows4StateAVX512, dotQ8Rows4x2StateAVX512
	}
	k1 := dotQ8Rows1AVX512
	// run computes weight rows [lo, hi) with their codes at cb (row lo first, rowBytes apart). Multi-row blocks
	// run along In in blocks of kg groups whose packed inputs (≤ 16 KiB) stay in L1 while up to quantOC weight
	// rows pass over them; each element's accumulators wait in state between blocks.
	// skip16 leaves out the 16-row blocks (already computed by the in-register widening kernels).
	run := func(lo, hi int, cb []byte, skip16 bool) {
		var res [2]float32
		var state [quantOC * 9 * 8]float32
		for _, b := range blocks {
			r, n := b.r, b.n
			if n == 16 {
				if !skip16 {
					forwardQuant16(k16, q, cb, rowBytes, xp[r*in:], xsT[r*ng:], ng, lo, hi, dst[r*out:], out, min(16, rows-r))
				}
				continue
			}
			if n == 1 {
				if kbits == 4 {
					quantRow1[gs/64](&cb[0], &xp[r*in], &q.Scales[lo*ng], &q.Biases[lo*ng], &xsT[r*ng], ng, hi-lo, &dst[r*out+lo])
				} else {
					for o := lo; o < hi; o++ {
						k1(&cb[(o-lo)*rowBytes], &xp[r*in], &q.Scales[o*ng], &q.Biases[o*ng], &xsT[r*ng], ng, gb, &res[0])
						dst[r*out+o] = res[0] + res[1]
					}
				}
				continue
			}
			k := k8
			if n == 4 {
				k = k4
			}
			sw := 9 * n
			kg := max(1, 4096/(gs*n))
			for o0 := lo; o0 < hi; o0 += quantOC {
				o1 := min(o0+quantOC, hi)
				st := state[:(o1-o0)*sw]
				clear(st)
				for g0 := 0; g0 < ng; g0 += kg {
					g1 := min(g0+kg, ng)
					o := o0
					if n == 4 && quantPairs {
						for ; o+2 <= o1; o += 2 {
							k4x2(&cb[(o-lo)*rowBytes+g0*gb], rowBytes, &xp[r*in+g0*gs*n], &q.Scales[o*ng+g0],
								&q.Biases[o*ng+g0], &xsT[r*ng+g0*n], ng, g1-g0, gb, &st[(o-o0)*sw])
						}
					}
					for ; o < o1; o++ {
						k(&cb[(o-lo)*rowBytes+g0*gb], &xp[r*in+g0*gs*n], &q.Scales[o*ng+g0], &q.Biases[o*ng+g0],
							&xsT[r*ng+g0*n], g1-g0, gb, &st[(o-o0)*sw])
					}
				}
				for o := o0; o < o1; o++ {
					so := st[(o-o0)*sw : (o-o0+1)*sw]
					for i := range n {
						dst[(r+i)*out+o] = finishQuant((*[8]float32)(so[8*i:8*i+8])) + so[8*n+i]
					}
				}
			}
		}
	}
	grain := max(1, 32768/(in*rows))
	wpr := q.wordsPerRow(in)
	// Widened in registers, a step reads 16 bytes from 2·bits before a row's end, 16-2·bits past it: the rows
	// whose reads would pass the Linear's codes (the last one; the last two for 2-bit rows of 8 bytes) are
	// widened to bytes instead.
	var k16w quant16Func
	safeRows, all16 := 0, false
	if wide && quantFused {
		k16w = quant16Wide(q.Bits, gs)
		safeRows = out - (16-2*q.Bits+qrb-1)/qrb
		all16 = !slices.ContainsFunc(blocks, func(b quantRowBlock) bool { return b.n != 16 })
	}
	l.Pool.For(out, grain, func(lo, hi int) {
		if !wide {
			run(lo, hi, codes[lo*rowBytes:], false)
			return
		}
		fused := lo // rows [lo, fused) had their 16-row blocks (or, decoding, their one row) widened in registers
		if safe := min(hi, safeRows); safe > lo {
			switch {
			case rows == 1:
				dotQbRowsAVX512(&codes[lo*qrb], qrb, &xp[0], &q.Scales[lo*ng], &q.Biases[lo*ng], &xsT[0], ng, gs/16,
					safe-lo, &dst[lo], 2*q.Bits, &qbTabs[q.Bits].ctl[0])
				fused = safe
			case k16w != nil && rb16 > 0:
				for _, b := range blocks {
					if b.n == 16 {
						forwardQuant16(k16w, q, codes[lo*qrb:], qrb, xp[b.r*in:], xsT[b.r*ng:], ng, lo, safe, dst[b.r*out:], out, min(16, rows-b.r))
					}
				}
				fused = safe
			}
		}
		if rows == 1 || all16 {
			lo = fused // nothing left to do for those rows
		}
		if lo == hi {
			return
		}
		bp := getBytes(quantOC * in)
		defer bytesPool.Put(bp)
		buf := *bp
		for c0, c1 := lo, lo; c0 < hi; c0 = c1 {
			c1 = min(c0+quantOC, hi)
			if c0 < fused && c1 > fused {
				c1 = fused // a chunk does not straddle the rows whose 16-row blocks are done
			}
			for o := c0; o < c1; o++ {
				unpackCodesBytes(buf[(o-c0)*in:(o-c0+1)*in], q.Codes[o*wpr:(o+1)*wpr], q.Bits)
			}
			run(c0, c1, buf, c0 < fused)
		}
	})
}

// quantFused makes 2-, 3-, 5- and 6-bit decode (dotQbRowsAVX512) and 16-row blocks (quant16Wide) widen codes
// in registers rather than into bytes first (tests turn it off to check the byte path on every row).
var quantFused = true

var bytesPool = sync.Pool{New: func() any { return new([]byte) }}

func getBytes(n int) *[]byte {
	p := bytesPool.Get().(*[]byte)
	if cap(*p) < n {
		*p = make([]byte, n)
	}
	*p = (*p)[:n]
	return p
}

// quant16 enables the 16x2 kernels (tests turn it off to compare them with the 4-row kernels).
var quant16 = true

// quant16Wide returns the 16x2 kernel widening bits-bit codes (2, 3, 5 or 6) in registers for group size gs,
// or nil. Each step reads 16 bytes, up to 16-2·bits past the ends of rows o and o+1: the caller keeps those
// reads inside the codes.
func quant16Wide(bits, gs int) quant16Func {
	switch [2]int{bits, gs} {
	case [2]int{2, 32}:
		return dotQ2Rows16x2G32AVX512
	case [2]int{2, 64}:
		return dotQ2Rows16x2G64AVX512
	case [2]int{3, 32}:
		return dotQ3Rows16x2G32AVX512
	case [2]int{3, 64}:
		return dotQ3Rows16x2G64AVX512
	case [2]int{5, 32}:
		return dotQ5Rows16x2G32AVX512
	case [2]int{5, 64}:
		return dotQ5Rows16x2G64AVX512
	case [2]int{6, 32}:
		return dotQ6Rows16x2G32AVX512
	case [2]int{6, 64}:
		return dotQ6Rows16x2G64AVX512
	case [2]int{2, 128}:
		return dotQ2Rows16x2G128AVX512
	case [2]int{3, 128}:
		return dotQ3Rows16x2G128AVX512
	case [2]int{5, 128}:
		return dotQ5Rows16x2G128AVX512
	case [2]int{6, 128}:
		return dotQ6Rows16x2G128AVX512
	}
	return nil
}

// quant16Kernel returns the 16x2 kernel for bits (4 or 8) and group size gs, or nil.
func quant16Kernel(bits, gs int) quant16Func {
	switch {
	case bits == 4 && gs == 32:
		return dotQ4Rows16x2G32AVX512
	case bits == 4 && gs == 64:
		return dotQ4Rows16x2G64AVX512
	case bits == 8 && gs == 32:
		return dotQ8Rows16x2G32AVX512
	case bits == 8 && gs == 64:
		return dotQ8Rows16x2G64AVX512
	case bits == 4 && gs == 128:
		return dotQ4Rows16x2G128AVX512
	case bits == 8 && gs == 128:
		return dotQ8Rows16x2G128AVX512
	}
	return nil
}

// quant16Block is the input-row block of the 16x2 kernels (gen_tile.py quant16x2): 4 rows for 4 bits and 8
// for 8 (and the widened widths), half that for groups of 128.
func quant16Block(kbits, gs int) int {
	r := 8
	if kbits == 4 {
		r = 4
	}
	if gs > 64 {
		r /= 2
	}
	return r
}

type quant16Func func(codes *byte, next int, xp, scales, biases, xsT *float32, nextS, groups int, state, dst *float32, ldd, nout, nrows int)

// forwardQuant16 runs weight rows [lo, hi) against 16 packed input rows with a 16x2 kernel, two weight rows
// per call; codes start at row lo, dst at input row 0 (row stride out). Only the first nrows rows are
// written (the rest are padding).
func forwardQuant16(k quant16Func, q *Quant, codes []byte, rowBytes int, xp, xsT []float32, ng, lo, hi int, dst []float32, out, nrows int) {
	var st [288]float32
	for o := lo; o < hi; o += 2 {
		next, nextS, nout := rowBytes, 4*ng, 2
		if o+1 == hi {
			next, nextS, nout = 0, 0, 1 // an odd last row runs as its own pair, written once
		}
		k(&codes[(o-lo)*rowBytes], next, &xp[0], &q.Scales[o*ng], &q.Biases[o*ng], &xsT[0], nextS, ng, &st[0], &dst[o], out, nout, nrows)
	}
}

// quantRow1 holds the 4-bit one-row AVX-512 kernels by group size / 64 (group 32, 64 or 128); each call runs a
// worker's whole range of weight rows.
var quantRow1 = [3]func(codes *byte, xp, scales, biases, xsT *float32, groups, nrows int, dst *float32){
	dotQ4Row1G32AVX512, dotQ4Row1G64AVX512, dotQ4Row1G128AVX512,
}

// quantPairs makes multi-row 4/8-bit products use blocks of 4 input rows × 2 weight rows (each packed input
// vector loaded once for both weight rows) instead of blocks of 8 input rows (measured faster: DecodeStream
// rows=16 q8 about 15%, q4 about 5%). The 8-row blocks stay, tested, for machines where that differs.
var quantPairs = true

// quantOC is the number of weight rows that pass over one block of packed inputs.
const quantOC = 32

// finishQuant is the AVX2 kernels' horizontal sum of an 8-lane accumulator: ((v0+v4)+(v1+v5))+((v2+v6)+(v3+v7)).
func finishQuant(v *[8]float32) float32 {
	return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))
}

// packQuantRows lays out n input rows for the AVX-512 quantized kernels: per 16-byte step of codes, row by
// row, the inputs that step multiplies (4 bits: the 16 even inputs for the low nibbles, then the 16 odd ones
// for the high nibbles; 8 bits: 16 inputs). Rows from nreal on are zeros (padding; x holds nreal rows).
func packQuantRows(dst, x []float32, n, nreal, in, bits int) {
	if nreal < n {
		clear(dst[:n*in])
	}
	if bits == 4 {
		for s := range in / 32 {
			for r := range nreal {
				d := dst[(s*n+r)*32 : (s*n+r)*32+32]
				src := x[r*in+32*s : r*in+32*s+32]
				for t := range 16 {
					d[t], d[16+t] = src[2*t], src[2*t+1]
				}
			}
		}
		return
	}
	for s := range in / 16 {
		for r := range nreal {
			copy(dst[(s*n+r)*16:(s*n+r)*16+16], x[r*in+16*s:r*in+16*s+16])
		}
	}
}
