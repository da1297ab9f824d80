package kernel

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// Mode selects a Pool's kernels.
type Mode int

const (
	// ModeExact is the reference: every kernel set gives the bits documented in the package comment.
	ModeExact Mode = iota
	// ModeFast multiplies quantized weights (every width) by inputs quantized to int8 per block of 32 (integer
	// dot products, as llama.cpp's Q4×Q8_0 kernels do) instead of by the float inputs. It is NOT bit-identical
	// to ModeExact (the relative error of a product is about 1e-3 of Σ|x||w|; TestFastError bounds it), but it
	// keeps the determinism contract on its own: a row's result does not depend on the rows beside it or the
	// worker count. The arithmetic has two forms: on CPUs with AVX512-VNNI, 4- and 8-bit weights whose row
	// count is a multiple of 16 take the panel form (panel.go: a block of 32 inputs summed in int32 before it is
	// scaled), everything else the lane form below (the AVX512-VNNI kernels, the AVX2 kernels and the portable
	// Go path give the same bits); each form's kernels are tested bit for bit against its Go form, so a machine
	// gives the same bits run after run, but a VNNI machine and an AVX2 one can differ by rounding. f32 and
	// bf16 weights run the exact kernels. On CPUs with AVX-512 the CPU backend's fast mode also runs attention
	// through kernels of its own (vecmath.AttnScores, AttnValues) and the Gated DeltaNet step with wider vectors
	// (the same bits as AVX2's). Pools in this mode also select the fast activations (vecmath.SiLUFast,
	// SigmoidFast) and Gated DeltaNet step (vecmath.GDNStepFast) in the CPU backend.
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

// FastForm names the arithmetic ModeFast runs on this CPU: "avx512vnni+amx" (as "avx512vnni", with the
// panel form's prefill-sized products and large 16-row ones on AMX tiles: amx.go, the same bits), "avx512vnni" (the panel form
// where a layer fits it, the lane form's VNNI kernels elsewhere), "avx2" (the lane form's AVX2 kernels) or
// "portable" (the lane form in Go, several times slower than the exact mode's assembly). "avx2" and "portable" give the same bits;
// "avx512vnni" can differ from them by rounding (see ModeFast).
func FastForm() string {
	switch {
	case useVNNI && AMX():
		return "avx512vnni+amx"
	case useVNNI:
		return "avx512vnni"
	case useFastAVX2:
		return "avx2"
	}
	return "portable"
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

// The fast-mode arithmetic of the lane form (fastref.go holds it in Go, operation for operation):
//
// Each input row is quantized once per call (per row, so it does not depend on the rows beside it): per block
// of 32 inputs a step d = max|x|/127 and codes xq = round(x·(1/d)) (to nearest, ties to even; |x·(1/d)| stays
// below 127.5), and per group of gs inputs the group sum xs (16 lanes p_l = Σ_i x_{16i+l} from +0 in order,
// halved to four lanes as p_l + p_{l+L/2}, then (q0+q1)+(q2+q3)). A block holding NaN or ±Inf gets d = NaN (its
// products come out NaN); a block whose max|x| is below 2⁻¹⁰⁰ gets d = 0 and zero codes. Blocks of 32 (rather
// than whole groups) follow llama.cpp's Q8_0: one outlier coarsens only its own block.
//
// An element y = Σ_j w_j·x_j with w_j = s_g·q_j + b_g runs 16 lanes: in the nibble form (4-bit codes) lane l of
// chunk c (128 inputs) covers inputs 128c+8l … 128c+8l+7, in the byte form (8-bit codes, and 2-, 3-, 5- and
// 6-bit codes widened to bytes) inputs 4l … 4l+3 of each 64-input step. Per lane and chunk (or step), in
// order: an exact integer dot product isum of its codes and input codes, u = float(isum)·d (rounded), acc_l +=
// u·s_g (product rounded, then the add); lanes past In are skipped. The lanes do not start from zero but from
// the bias term: lane j first adds b_g·xs_g (rounded) for the groups g ≡ j (mod 16), in group order, from +0.
// y is the lanes summed by halving: (i, i+8), (i, i+4), (i, i+2), then lanes 0 and 1.
//
// The kernels (gen_fast.py) run a block of R input rows against W weight rows at a time, decoding each 64-byte
// step of every weight row once for all R rows; the per-element operations do not depend on R or W.

// fastArgs is the argument block of the fast kernels (gen_fast.py reads its fields by offset: every field is
// 8 bytes, in this order).
type fastArgs struct {
	codes   unsafe.Pointer // the first weight row's codes
	cstride int            // bytes from one weight row's codes to the next
	scales  unsafe.Pointer // the first weight row's scales
	biases  unsafe.Pointer // and biases
	sstride int            // bytes from one weight row's scales (and biases) to the next
	sstep   int            // bytes of scales per chunk (4·128/gs)
	wgroups int            // weight-row groups of W to run
	xp      unsafe.Pointer // the packed input block (per chunk, R records)
	chunks  int            // full chunks
	tail    int            // 1 if a partial chunk follows
	xs      unsafe.Pointer // the block's first row of group sums (zero-padded to a multiple of 16)
	xss     int            // bytes from one row's group sums to the next
	nb16    int            // groups / 16, rounded up
	dst     unsafe.Pointer // the first element (input row 0, weight row 0)
	ldd     int            // bytes from one input row's outputs to the next
	perm    unsafe.Pointer // the scale permutations: a chunk's (or byte step 0's) 16 lane indices, then step 1's
	kscale  uint64         // scales of a full chunk (128/gs of them)
	kcode0  uint64         // the partial chunk: code bytes of (byte form: the first) step
	klane0  uint64         // its lanes
	kcode1  uint64         // byte form: code bytes of the second step
	klane1  uint64         // and its lanes
	kscaleT uint64         // scales of the partial chunk
	kbias   uint64         // biases of the last 16 groups
}

// fastPerm holds the scale permutations by form (0 nibble, 1 byte) and group size / 64 (32, 64, 128).
var fastPerm [2][3][32]int32

func init() {
	for gi, gs := range []int{32, 64, 128} {
		for l := range 16 {
			fastPerm[0][gi][l] = int32(8 * l / gs)
			fastPerm[1][gi][l] = int32(4 * l / gs)
			fastPerm[1][gi][16+l] = int32((64 + 4*l) / gs)
		}
	}
}

// lowMask returns a mask of the n low bits (n ≤ 64).
func lowMask(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// fastTemplate fills the fields of fastArgs that depend only on the weight's shape.
func fastTemplate(in, gs int, nibble bool) fastArgs {
	form := 1
	if nibble {
		form = 0
	}
	ng := in / gs
	a := fastArgs{sstep: 4 * fastChunk / gs, chunks: in / fastChunk, nb16: (ng + 15) / 16,
		perm: unsafe.Pointer(&fastPerm[form][gs/64][0]), kscale: lowMask(fastChunk / gs)}
	if t := in % fastChunk; t != 0 {
		a.tail, a.kscaleT = 1, lowMask(t/gs)
		if nibble {
			a.kcode0, a.klane0 = lowMask(t/2), lowMask(t/8)
		} else {
			n0 := min(t, 64)
			a.kcode0, a.klane0 = lowMask(n0), lowMask(n0/4)
			a.kcode1, a.klane1 = lowMask(t-n0), lowMask((t-n0)/4)
		}
	}
	a.kbias = 0xffff
	if r := ng % 16; r != 0 {
		a.kbias = lowMask(r)
	}
	return a
}

// fastBlocks splits rows into the kernels' input-row blocks: 8 at a time, then 4, 2 and 1.
func fastBlocks(rows int) []quantRowBlock { return pow2Blocks(rows, 8) }

// pow2Blocks splits rows into blocks of most rows at a time (a power of two), then halves of it down to 1.
func pow2Blocks(rows, most int) []quantRowBlock {
	var bs []quantRowBlock
	for r := 0; r < rows; {
		n := most
		for n > rows-r {
			n /= 2
		}
		bs = append(bs, quantRowBlock{r, n})
		r += n
	}
	return bs
}

// fastTileBytes bounds the packed inputs of one Forward tile in fast mode (each weight row passes over all of
// them while its codes are in L1, so they should stay in L2).
const fastTileBytes = 512 << 10

// fastTile is the number of input rows Forward gives the fast kernels at a time.
func (l *Linear) fastTile() int {
	rec := fastRec(l.q.Bits == 4) * ((l.In + fastChunk - 1) / fastChunk)
	return min(max(fastTileBytes/rec, 16), 512) &^ 7
}

// forwardQuantFast is the ModeFast product of a quantized weight.
func (l *Linear) forwardQuantFast(dst, x []float32, rows int) {
	q := l.q
	if usePanels && panelsFit(q, l.Out) {
		l.forwardPanels(dst, x, rows)
		return
	}
	in, out, gs := l.In, l.Out, q.Group
	ng := in / gs
	nibble := q.Bits == 4
	rec := fastRec(nibble)
	nch := (in + fastChunk - 1) / fastChunk
	ngp := (ng + 15) &^ 15
	vnni := useVNNI
	avx2 := !vnni && useFastAVX2
	blocks := fastBlocks(rows)
	if avx2 {
		blocks = fastBlocks2(rows)
	}
	bp, xsp := l.quantizeFast(x, rows, blocks)
	defer bytesPool.Put(bp)
	defer scratchPool.Put(xsp)
	xp, xs := *bp, *xsp
	wide := q.Bits != 4 && q.Bits != 8
	rowBytes := in * q.Bits / 8
	if wide {
		rowBytes = in
	}
	codes := unsafe.Slice((*byte)(unsafe.Pointer(&q.Codes[0])), len(q.Codes)*4)
	wpr := q.wordsPerRow(in)
	tmpl := fastTemplate(in, gs, nibble)
	var tmpl2 *fastArgs2
	if avx2 {
		t := fastTemplate2(in, gs, nibble)
		tmpl2 = &t
	}
	form := 1
	if nibble {
		form = 0
	}
	// A chunk of weight rows whose codes stay in L1 while every block of input rows passes over them.
	oc := max(2, (16<<10)/rowBytes) &^ 1
	grain := max(1, 32768/(in*rows))
	l.Pool.For(out, grain, func(lo, hi int) {
		var buf []byte
		if wide {
			p := getBytes(min(oc, hi-lo) * in)
			defer bytesPool.Put(p)
			buf = *p
		}
		step := oc
		if rows == 1 && !wide {
			step = hi - lo // one pass: nothing to keep in cache
		}
		for o0 := lo; o0 < hi; o0 += step {
			o1 := min(o0+step, hi)
			var cb []byte
			if !wide {
				cb = codes[o0*rowBytes:]
			} else {
				for o := o0; o < o1; o++ {
					unpackCodesBytes(buf[(o-o0)*in:(o-o0+1)*in], q.Codes[o*wpr:(o+1)*wpr], q.Bits)
				}
				cb = buf
			}
			for _, b := range blocks {
				blk := xp[b.r*nch*rec:]
				if avx2 {
					a := *tmpl2
					a.cstride, a.sstride = rowBytes, 4*ng
					a.xp, a.xs, a.xss = unsafe.Pointer(&blk[0]), unsafe.Pointer(&xs[b.r*ngp]), 4*ngp
					a.ldd = 4 * out
					a.codes, a.scales, a.biases = unsafe.Pointer(&cb[0]), unsafe.Pointer(&q.Scales[o0*ng]), unsafe.Pointer(&q.Biases[o0*ng])
					a.dst, a.wrows = unsafe.Pointer(&dst[b.r*out+o0]), o1-o0
					runFast2(form, b.n, &a)
					continue
				}
				if !vnni {
					for o := o0; o < o1; o++ {
						c := cb[(o-o0)*rowBytes : (o-o0+1)*rowBytes]
						sc, bi := q.Scales[o*ng:(o+1)*ng], q.Biases[o*ng:(o+1)*ng]
						for i := range b.n {
							dst[(b.r+i)*out+o] = fastDotGo(c, sc, bi, blk[i*rec:], b.n*rec, xs[(b.r+i)*ngp:], in, gs, nibble)
						}
					}
					continue
				}
				a := tmpl
				a.cstride, a.sstride = rowBytes, 4*ng
				a.xp, a.xs, a.xss = unsafe.Pointer(&blk[0]), unsafe.Pointer(&xs[b.r*ngp]), 4*ngp
				a.ldd = 4 * out
				ks := &fastKernels[form][bits.TrailingZeros(uint(b.n))] // blocks of 1, 2, 4, 8 rows
				n := o1 - o0
				if n >= 2 && b.n > 1 {
					a.codes, a.scales, a.biases = unsafe.Pointer(&cb[0]), unsafe.Pointer(&q.Scales[o0*ng]), unsafe.Pointer(&q.Biases[o0*ng])
					a.dst, a.wgroups = unsafe.Pointer(&dst[b.r*out+o0]), n/2
					ks[1](&a)
				}
				if b.n == 1 {
					// One input row (decode) streams the weights: one weight row at a time reads one stream
					// of codes rather than two (measured faster: BenchmarkDecodeStream q4fast rows=1).
					a.codes, a.scales, a.biases = unsafe.Pointer(&cb[0]), unsafe.Pointer(&q.Scales[o0*ng]), unsafe.Pointer(&q.Biases[o0*ng])
					a.dst, a.wgroups = unsafe.Pointer(&dst[b.r*out+o0]), o1-o0
					ks[0](&a)
					continue
				}
				if n%2 == 1 {
					o := o1 - 1
					a.codes, a.scales, a.biases = unsafe.Pointer(&cb[(o-o0)*rowBytes]), unsafe.Pointer(&q.Scales[o*ng]), unsafe.Pointer(&q.Biases[o*ng])
					a.dst, a.wgroups = unsafe.Pointer(&dst[b.r*out+o]), 1
					ks[0](&a)
				}
			}
		}
	})
}

// quantizeFast packs the input rows for the fast kernels: per block of rows (each block's records chunk by
// chunk, its rows' records side by side) into the returned bytes, and each row's group sums, zero-padded to a
// multiple of 16, into the returned floats (both pooled: the caller puts them back). Rows are independent;
// each is written by one worker. The quantizer is the CPU's (AVX-512, AVX2 or Go: the same bits on every path).
func (l *Linear) quantizeFast(x []float32, rows int, blocks []quantRowBlock) (*[]byte, *[]float32) {
	bp, xsp := l.fastInputs(rows)
	l.Pool.For(len(blocks), 1, func(lo, hi int) {
		for _, b := range blocks[lo:hi] {
			for i := range b.n {
				l.quantizeFastRow(*bp, *xsp, x, b, i, false)
			}
		}
	})
	return bp, xsp
}

// fastInputs returns pooled buffers for rows packed input rows and their padded group sums (quantizeFast's).
func (l *Linear) fastInputs(rows int) (*[]byte, *[]float32) {
	in, ng := l.In, l.In/l.q.Group
	nch := (in + fastChunk - 1) / fastChunk
	return getBytes(rows * nch * fastRec(l.q.Bits == 4)), getScratch(rows * ((ng + 15) &^ 15))
}

// padFastRow writes row i of block b as a pad row: zero codes and group sums (quantizeFastRow's layout), so
// the kernels run it like any row and its outputs, which nobody reads, are finite.
func (l *Linear) padFastRow(xp []byte, xs []float32, b quantRowBlock, i int) {
	in := l.In
	rec := fastRec(l.q.Bits == 4)
	nch := (in + fastChunk - 1) / fastChunk
	ngp := (in/l.q.Group + 15) &^ 15
	row := xp[b.r*nch*rec+i*rec:]
	for c := range nch {
		clear(row[c*b.n*rec : c*b.n*rec+rec])
	}
	r := b.r + i
	clear(xs[r*ngp : (r+1)*ngp])
}

// quantizeFastRow packs input row b.r+i, row i of block b, into xp and its group sums into xs (quantizeFast's
// layout); with pair, one step per 64 inputs (quantizeFastBlocksGo: the panel form's inputs where the group
// is a multiple of 64).
func (l *Linear) quantizeFastRow(xp []byte, xs, x []float32, b quantRowBlock, i int, pair bool) {
	in, gs := l.In, l.q.Group
	ng := in / gs
	nibble := l.q.Bits == 4
	rec := fastRec(nibble)
	nch := (in + fastChunk - 1) / fastChunk
	ngp := (ng + 15) &^ 15
	stride := b.n * rec
	r := b.r + i
	row := xp[b.r*nch*rec+i*rec:]
	if in%fastChunk != 0 {
		last := row[(nch-1)*stride:]
		clear(last[:rec])
	}
	xsr := xs[r*ngp : (r+1)*ngp]
	clear(xsr[ng:])
	switch {
	case useVNNI && pair:
		k := quantizeFastPairQ8AVX512
		if nibble {
			k = quantizeFastPairQ4AVX512
		}
		k(&row[0], stride, &xsr[0], &x[r*in], ng, gs)
	case pair:
		quantizeFastBlocksGo(row, stride, xsr, x[r*in:(r+1)*in], gs, nibble, true)
	case useVNNI:
		k := quantizeFastQ8AVX512
		if nibble {
			k = quantizeFastQ4AVX512
		}
		k(&row[0], stride, &xsr[0], &x[r*in], ng, gs)
	case useFastAVX2:
		k := quantizeFastQ8AVX2
		if nibble {
			k = quantizeFastQ4AVX2
		}
		k(&row[0], stride, &xsr[0], &x[r*in], ng, gs)
	default:
		quantizeFastGo(row, stride, xsr, x[r*in:(r+1)*in], gs, nibble)
	}
}
