package kernel

import "unsafe"

// The multi-row quantized products on AVX2 (without AVX-512): each group of a weight row's codes is decoded
// once for every input row of the call (rows_amd64.go), where the one- and two-row kernels decode it once per
// row pair. Per element the operations stay the one-row kernel's, so a row's result does not depend on the
// rows beside it.

// rowsFunc is the signature of the multi-row AVX2 kernels (see rows_amd64.go).
type rowsFunc func(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

// rowsKernels holds them by width (4 bits, 8 bits, codes widened to float32) and group size / 64 (32, 64, 128).
var rowsKernels = [3][3]rowsFunc{
	{dotQ4RowsG32AVX2, dotQ4RowsG64AVX2, dotQ4RowsG128AVX2},
	{dotQ8RowsG32AVX2, dotQ8RowsG64AVX2, dotQ8RowsG128AVX2},
	{dotFRowsG32AVX2, dotFRowsG64AVX2, dotFRowsG128AVX2},
}

// quantRowsMin is the fewest input rows that go through the multi-row kernels (fewer take the one- and
// two-row kernels; tests lower it to cover every row count).
var quantRowsMin = 3

// rowsXBytes is the size of one block of packed inputs (all rows of a run of groups), which stays in L1 while
// up to rowsOC weight rows pass over it; the elements' accumulators wait in state between blocks.
const (
	rowsXBytes = 16 << 10
	rowsOC     = 16
)

// forwardQuantRowsAVX2 is forwardQuantAVX2 for rows ≥ quantRowsMin; xs holds the group sums of x
// ([row][group]).
func (l *Linear) forwardQuantRowsAVX2(dst, x, xs []float32, rows int) {
	q := l.q
	in, out, gs := l.In, l.Out, q.Group
	ng := in / gs
	rpad := (rows + 7) &^ 7
	kg := max(1, rowsXBytes/(rows*gs*4)) // groups per block
	// Block [g0, g1) of row r starts at g0·gs·rows + r·(g1-g0)·gs, so a block's rows are contiguous.
	pp := getScratch(rows*in + ng*rpad)
	defer scratchPool.Put(pp)
	xp, xsT := (*pp)[:rows*in], (*pp)[rows*in:]
	for g0 := 0; g0 < ng; g0 += kg {
		n := (min(g0+kg, ng) - g0) * gs
		base := g0 * gs * rows
		for r := range rows {
			d, src := xp[base+r*n:base+(r+1)*n], x[r*in+g0*gs:r*in+g0*gs+n]
			if q.Bits != 4 {
				copy(d, src)
				continue
			}
			// 4 bits: per 32 inputs the even ones (low nibbles) then the odd ones (high nibbles).
			for s := 0; s < n; s += 32 {
				e, o, v := d[s:s+16:s+16], d[s+16:s+32:s+32], src[s:s+32:s+32]
				for t := range 16 {
					e[t], o[t] = v[2*t], v[2*t+1]
				}
			}
		}
	}
	clear(xsT)
	for r := range rows {
		for g := range ng {
			xsT[g*rpad+r] = xs[r*ng+g]
		}
	}
	kind, cbits := 2, 32 // other widths: codes widened to float32 per weight row
	switch q.Bits {
	case 4:
		kind, cbits = 0, 4
	case 8:
		kind, cbits = 1, 8
	}
	k := rowsKernels[kind][gs/64]
	rowBytes, gb := in*cbits/8, gs*cbits/8
	codes := unsafe.Slice((*byte)(unsafe.Pointer(&q.Codes[0])), len(q.Codes)*4)
	wpr := q.wordsPerRow(in)
	grain := max(1, 32768/(in*rows))
	l.Pool.For(out, grain, func(lo, hi int) {
		ns, nb := rowsOC*rows*8, rowsOC*rpad
		nw := 0
		if kind == 2 {
			nw = rowsOC * in
		}
		sp := getScratch(ns + nb + rows*32 + nw)
		defer scratchPool.Put(sp)
		st := *sp
		state, bstate, cs, wide := st[:ns], st[ns:ns+nb], st[ns+nb:ns+nb+rows*32], st[ns+nb+rows*32:]
		for c0 := lo; c0 < hi; c0 += rowsOC {
			c1 := min(c0+rowsOC, hi)
			var cb []byte
			if kind == 2 {
				for o := c0; o < c1; o++ {
					UnpackCodes(wide[(o-c0)*in:(o-c0+1)*in], q.Codes[o*wpr:(o+1)*wpr], q.Bits, in)
				}
				cb = unsafe.Slice((*byte)(unsafe.Pointer(&wide[0])), 4*len(wide))
			} else {
				cb = codes[c0*rowBytes:]
			}
			clear(state[:(c1-c0)*rows*8])
			clear(bstate[:(c1-c0)*rpad])
			for g0 := 0; g0 < ng; g0 += kg {
				g1 := min(g0+kg, ng)
				// Each weight row prefetches its next block, and from the last block the next chunk's first.
				pfd, d := kg*gb, (*float32)(nil)
				if g1 == ng {
					// The last block also writes the results.
					pfd, d = (c1-c0)*rowBytes-g0*gb, &dst[c0]
				}
				k(&cb[g0*gb], rowBytes, &xp[g0*gs*rows], 4*(g1-g0)*gs, &q.Scales[c0*ng+g0], &q.Biases[c0*ng+g0], 4*ng,
					&xsT[g0*rpad], g1-g0, rows, c1-c0, &state[0], &bstate[0], &cs[0], pfd, d, 4*out)
			}
		}
	})
}
