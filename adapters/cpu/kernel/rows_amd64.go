//go:build amd64 && !purego

package kernel

// The multi-row AVX2 quantized kernels (gen_rows.py; quantrows.go drives them). One call runs nout weight rows
// (codes rowBytes apart, scales and biases ngb bytes apart) against nrows input rows packed for the block of
// groups it covers (row r's inputs at xp + r·ldx bytes; for 4 bits each 32-input step as [16 even | 16 odd])
// over groups groups, decoding each group of codes once for all the rows. Per element the operations of the
// one-row kernels: element (o, r) resumes its 8-lane accumulator at state[8(o·nrows+r):] and its bias term
// at bstate[o·rpad+r] (rpad: nrows rounded up to 8; xsT holds the group sums as [group][rpad], the padding
// zero). cs is scratch for nrows·32 floats (the chains of groups longer than the registers hold). Each group
// prefetches the codes pfd bytes on. With dst (not nil), the call ends the elements: dst[r·ldd/4 + o] gets
// the one-row kernel's horizontal sum of the accumulator plus the bias term (ldd in bytes).

//go:noescape
func dotQ4RowsG32AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

//go:noescape
func dotQ4RowsG64AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

//go:noescape
func dotQ4RowsG128AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

//go:noescape
func dotQ8RowsG32AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

//go:noescape
func dotQ8RowsG64AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

//go:noescape
func dotQ8RowsG128AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

// The F kernels read codes already widened to float32 (2, 3, 5 and 6 bits; dotCodesRowAVX2's operations).

//go:noescape
func dotFRowsG32AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

//go:noescape
func dotFRowsG64AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

//go:noescape
func dotFRowsG128AVX2(codes *byte, rowBytes int, xp *float32, ldx int, scales, biases *float32, ngb int, xsT *float32, groups, nrows, nout int, state, bstate, cs *float32, pfd int, dst *float32, ldd int)

// The 6 × 2 AVX2 tiles are tileF32x4x2AVX2/tileBF16x4x2AVX2 for 6 input rows (gen_tile.py): each weight
// vector loaded (bf16: widened) once for 6 rows rather than 4; per element the same operations. scratch holds
// 2·6·2·8 floats.

//go:noescape
func tileF32x6x2AVX2(x *float32, ldx int, w *float32, ldw int, n int, dst *float32, ldd int, scratch *float32)

//go:noescape
func tileBF16x6x2AVX2(x *float32, ldx int, w *uint16, ldw int, n int, dst *float32, ldd int, scratch *float32)
