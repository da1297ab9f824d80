package kernel

import "unsafe"

// fastArgs2 is the argument block of the AVX2 fast kernels (gen_fast_avx2.py reads its fields by offset: the
// scalar fields are 8 bytes each, then the load masks, 8 lanes of 32 bits each).
type fastArgs2 struct {
	codes   unsafe.Pointer // the first weight row's codes
	cstride int            // bytes from one weight row's codes to the next
	scales  unsafe.Pointer // the first weight row's scales
	biases  unsafe.Pointer // and biases
	sstride int            // bytes from one weight row's scales (and biases) to the next
	sstep   int            // bytes of scales per chunk (4·128/gs)
	wrows   int            // weight rows to run
	xp      unsafe.Pointer // the packed input block (per chunk, R records)
	chunks  int            // full chunks
	tail    int            // 1 if a partial chunk follows
	xs      unsafe.Pointer // the block's first row of group sums (zero-padded to a multiple of 16)
	xss     int            // bytes from one row's group sums to the next
	nb16    int            // groups / 16, rounded up
	dst     unsafe.Pointer // the first element (input row 0, weight row 0)
	ldd     int            // bytes from one input row's outputs to the next
	perm    unsafe.Pointer // the scale permutations (fastPerm): each 32-byte piece of a chunk's codes' 8 lane indices
	mscale  [8]int32       // the scales of a full chunk (128/gs lanes)
	mscaleT [8]int32       // the scales of the partial chunk
	mcode   [4][8]int32    // the partial chunk's code dwords, per 32-byte piece
	mbias   [16]int32      // the biases of the last 16 groups
}

// laneMask sets the first n lanes of m (all bits), clearing the rest.
func laneMask(m []int32, n int) {
	for i := range m {
		m[i] = 0
		if i < n {
			m[i] = -1
		}
	}
}

// fastTemplate2 fills the fields of fastArgs2 that depend only on the weight's shape.
func fastTemplate2(in, gs int, nibble bool) fastArgs2 {
	form := 1
	if nibble {
		form = 0
	}
	ng := in / gs
	a := fastArgs2{sstep: 4 * fastChunk / gs, chunks: in / fastChunk, nb16: (ng + 15) / 16,
		perm: unsafe.Pointer(&fastPerm[form][gs/64][0])}
	laneMask(a.mscale[:], fastChunk/gs)
	if t := in % fastChunk; t != 0 {
		a.tail = 1
		laneMask(a.mscaleT[:], t/gs)
		bytes := t // code bytes of the partial chunk
		if nibble {
			bytes = t / 2
		}
		for q := range a.mcode {
			laneMask(a.mcode[q][:], min(max(bytes-32*q, 0), 32)/4)
		}
	}
	r := ng % 16
	if r == 0 {
		r = 16
	}
	laneMask(a.mbias[:], r)
	return a
}

// fastBlocks2 splits rows into the AVX2 kernels' input-row blocks: 4 at a time, then 2 and 1.
func fastBlocks2(rows int) []quantRowBlock { return pow2Blocks(rows, 4) }

// runFast2 runs the AVX2 kernel of a form (0 nibble, 1 byte) for a block of n input rows. The calls are direct
// (not through a table) so that a stays on the caller's stack.
func runFast2(form, n int, a *fastArgs2) {
	switch {
	case form == 0 && n == 4:
		fastQ4R4AVX2(a)
	case form == 0 && n == 2:
		fastQ4R2AVX2(a)
	case form == 0:
		fastQ4R1AVX2(a)
	case n == 4:
		fastQ8R4AVX2(a)
	case n == 2:
		fastQ8R2AVX2(a)
	default:
		fastQ8R1AVX2(a)
	}
}
