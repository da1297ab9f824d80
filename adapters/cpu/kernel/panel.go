package kernel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"unsafe"
)

// The fast mode's panel form: 4- and 8-bit weights whose row count is a multiple of 16, on CPUs with
// AVX512-VNNI (usePanels). The lane form (fast.go) converts every 8 (4-bit) or 4 (8-bit) inputs' integer dot
// product to float and scales it: with 16 lanes per output those float operations, not the VPDPBUSDs, bound a
// multi-row product. The panel form sums a whole block of 32 inputs in int32 before converting it, which its
// layout makes cheap, so a verify block of 16 rows costs several times less arithmetic per weight.
//
// Layout: a panel is 16 consecutive weight rows; its codes are the rows' 32-bit code words interleaved word by
// word (word w of rows 0…15, then word w+1), so one 64-byte load holds the same 8 (4-bit) or 4 (8-bit) inputs
// of 16 rows, and its scales and biases are per group the 16 rows' values side by side. A Linear builds its
// panels once, on its first fast-mode product (or Prepare), as a copy: the MLX layout it borrows stays for Row
// (embedding lookups) and for the exact mode. So the fast mode on such a CPU holds its 4- and 8-bit weights
// twice: once as heap memory, once in the (file-backed, reclaimable) mmap of the checkpoint.
//
// Arithmetic (panelRunGo, operation for operation): the inputs are quantized as in the lane form (fast.go: per
// block of 32 inputs a step d and int8 codes, per group the sum xs), except that where the group is a multiple
// of 64 the step is taken per 64 inputs (a pair of blocks: quantizeFastBlocksGo with pair) and the pair is
// one block of the arithmetic below: a 64-input block needs half the conversions per weight, and it is the
// depth of one AMX tile product (amx.go). An element y = Σ_j w_j·x_j with w_j = s_g·q_j + b_g is one float
// accumulator from +0: per group g in order, acc += b_g·xs_g (product rounded, then the add), then per block k
// of the group in order, with isum the exact integer dot product of its 32 or 64 codes and input codes,
// acc += (float(isum)·d_k)·s_g (each product rounded, then the add). A row's result does not depend on the rows
// beside it, on the worker count or on the kernels (VNNI or AMX), so verify and decode agree; it differs from
// the lane form's by rounding (and, with 64-input steps, by the inputs' quantization).

// panelRows is the number of weight rows in one panel.
const panelRows = 16

// usePanels selects the panel form for the weights it applies to; usePanelAsm runs it in assembly (the
// alternative is panelRunGo). Tests flip them.
var usePanels, usePanelAsm = useVNNI, useVNNI

// panels is a Linear's weights in the panel layout.
type panels struct {
	codes []uint32 // per panel, per code word w: the 16 rows' word w
	// Per panel, per group: the 16 rows' scales and biases, in sform: 16-bit where every value is exactly a
	// half or bfloat16 (checkpoints store them so), which a decode, bound by reading the weights, reads
	// 10–25% fewer bytes for. Where every bias is exactly its scale times bmul (the symmetric formats' zero
	// point: GGUF's Q4_0 and Q8_0), none is stored and the kernels multiply instead.
	scales, biases []byte
	sform          int     // scaleF32, scaleF16 or scaleBF16
	bmul           float32 // where nonzero, bias = scale·bmul
	n              int     // panels
}

// The formats of a panel form's scales and biases.
const (
	scaleF32 = iota
	scaleF16
	scaleBF16
)

// valueBytes is the size of one scale or bias.
func (p *panels) valueBytes() int {
	if p.sform == scaleF32 {
		return 4
	}
	return 2
}

// value reads value i of b (scales or biases) in the panels' format.
func (p *panels) value(b []byte, i int) float32 {
	switch p.sform {
	case scaleF16:
		return F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	case scaleBF16:
		return BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

// scale and bias are value i's scale and bias (i = (panel·groups + group)·16 + row).
func (p *panels) scale(i int) float32 { return p.value(p.scales, i) }

func (p *panels) bias(i int) float32 {
	if p.bmul != 0 {
		return float32(p.scale(i) * p.bmul)
	}
	return p.value(p.biases, i)
}

// f16Exact is v's half when the half is exactly v.
func f16Exact(v float32) (uint16, bool) {
	b := math.Float32bits(v)
	sign, exp, man := uint16(b>>16)&0x8000, int(b>>23&0xff), b&0x7fffff
	var h uint16
	switch {
	case exp == 0 && man == 0:
		h = sign
	case exp-127 >= -14 && exp-127 <= 15:
		h = sign | uint16(exp-127+15)<<10 | uint16(man>>13)
	case exp-127 < -14 && exp-127 >= -24:
		h = sign | uint16((man|0x800000)>>(126-exp-14+13+1))
	default:
		return 0, false
	}
	return h, math.Float32bits(F16ToF32(h)) == b
}

// compactValues stores vals in the narrowest format that holds each exactly: f16, then bf16, then f32.
func compactValues(vals ...[]float32) (int, [][]byte) {
	for _, form := range []int{scaleF16, scaleBF16} {
		out, ok := make([][]byte, len(vals)), true
		for k, vs := range vals {
			out[k] = make([]byte, 2*len(vs))
			for i, v := range vs {
				var h uint16
				if form == scaleF16 {
					h, ok = f16Exact(v)
				} else {
					h = uint16(math.Float32bits(v) >> 16)
					ok = math.Float32bits(BF16ToF32(h)) == math.Float32bits(v)
				}
				if !ok {
					break
				}
				binary.LittleEndian.PutUint16(out[k][2*i:], h)
			}
			if !ok {
				break
			}
		}
		if ok {
			return form, out
		}
	}
	out := make([][]byte, len(vals))
	for k, vs := range vals {
		out[k] = make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint32(out[k][4*i:], math.Float32bits(v))
		}
	}
	return scaleF32, out
}

// zeroPointMul is the multiplier that gives every bias from its scale where one does exactly (a symmetric
// format's zero point: −2^(bits−1)), or 0.
func zeroPointMul(s, b []float32, bits int) float32 {
	m := -float32(int(1) << (bits - 1))
	for i := range s {
		if math.Float32bits(float32(s[i]*m)) != math.Float32bits(b[i]) {
			return 0
		}
	}
	return m
}

// panelsFit reports whether a quantized weight can take the panel form.
func panelsFit(q *Quant, out int) bool {
	return q != nil && (q.Bits == 4 || q.Bits == 8) && out%panelRows == 0
}

// buildPanels copies q [out, in] into the panel layout.
func buildPanels(q *Quant, out, in int) *panels {
	wpr, ng := q.wordsPerRow(in), in/q.Group
	p := &panels{n: out / panelRows, codes: make([]uint32, len(q.Codes))}
	scales, biases := make([]float32, len(q.Scales)), make([]float32, len(q.Biases))
	for pi := range p.n {
		c := p.codes[pi*panelRows*wpr : (pi+1)*panelRows*wpr]
		s, b := scales[pi*panelRows*ng:(pi+1)*panelRows*ng], biases[pi*panelRows*ng:(pi+1)*panelRows*ng]
		for j := range panelRows {
			o := pi*panelRows + j
			for w, v := range q.Codes[o*wpr : (o+1)*wpr] {
				c[w*panelRows+j] = v
			}
			for g := range ng {
				s[g*panelRows+j] = q.Scales[o*ng+g]
				b[g*panelRows+j] = q.Biases[o*ng+g]
			}
		}
	}
	var vals [][]byte
	if p.bmul = zeroPointMul(scales, biases, q.Bits); p.bmul != 0 {
		p.sform, vals = compactValues(scales)
		p.scales = vals[0]
	} else {
		p.sform, vals = compactValues(scales, biases)
		p.scales, p.biases = vals[0], vals[1]
	}
	return p
}

// panelState is the lazily built panel form of one Linear (a view from Rows builds its own).
type panelState struct {
	once sync.Once
	p    *panels
}

// Prepare builds what the Pool's mode will read on the first product (the panel layout of a fast-mode
// quantized weight), so that cost falls at load time rather than in the first request. It is safe to call
// more than once, and concurrently with Forward.
func (l *Linear) Prepare() {
	if l.q != nil && l.Pool.Mode() == ModeFast && usePanels && panelsFit(l.q, l.Out) {
		l.panelForm()
	}
}

// panelForm returns the weight's panels, building them on first use.
func (l *Linear) panelForm() *panels {
	l.pan.once.Do(func() { l.pan.p = buildPanels(l.q, l.Out, l.In) })
	return l.pan.p
}

// panelArgs is the argument block of the panel kernels (gen_panel.py reads its fields by offset: every field
// is 8 bytes, in this order).
type panelArgs struct {
	codes   unsafe.Pointer // the first panel's codes
	scales  unsafe.Pointer // its scales
	biases  unsafe.Pointer // and biases
	npanels int            // panels to run (consecutive)
	xp      unsafe.Pointer // the block of input rows' records (per chunk, the R rows' records side by side)
	chadj   int            // bytes from the block offset after a chunk's 4 blocks to the next chunk's records
	xst     unsafe.Pointer // the block's group sums, group-major: [ngroups][R]
	ngroups int            // groups per weight row
	bpg     int            // blocks of 32 inputs per group
	dst     unsafe.Pointer // the first panel's output for input row 0
	ldd     int            // bytes from one input row's outputs to the next
	// The tile kernels' (amx.go):
	cfg  unsafe.Pointer // tile configuration
	xa   unsafe.Pointer // the block's first row's input codes as tile rows (amxInputs: 64 bytes a row)
	wbuf unsafe.Pointer // 4-bit: a ring of 8 KiB for unpacked codes
	// The scales' and biases' format (panels.sform), bmul's float32 bits (0: biases stored) and the bytes of
	// one group's 16 values.
	sform, bmul, sstep int
}

// panelBlocks splits rows into the panel kernels' blocks: 16 at a time (8 with small, for the VNNI kernels of
// 64-input blocks, which hold two blocks' codes in registers), then 8, 4, 2 and 1 — of padRows(rows) rows, so
// the last block may reach past rows.
func panelBlocks(rows int, small bool) []quantRowBlock {
	if small {
		return pow2Blocks(padRows(rows), 8)
	}
	return pow2Blocks(padRows(rows), 16)
}

// padRows is the rows a product of rows input rows runs: one more where rows is 3 mod 4, so its tail runs as
// one block of 4 (a pad row of zero codes, its outputs dropped) rather than blocks of 2 and 1, each of which
// passes over every panel. Measured on gocoder's shapes, 1 worker (BenchmarkGocoderShapes): 3 rows cost
// 25.0 µs on a 4-bit 1536×640 and 124 µs on the 8-bit 4096×640 LM head where 4 rows cost 21.8 and 92; 7 rows
// 46.7 and 162 µs where 8 rows cost 40.7 and 102. (Tails of 5 or 6 rows gain on the 8-bit head but lose on
// 4-bit weights, so they stay as they are.)
func padRows(rows int) int {
	if rows%4 == 3 {
		return rows + 1
	}
	return rows
}

// panelChunkBytes bounds the codes of the panels one worker runs every block of input rows over before moving
// on (they stay in L2 while the blocks pass).
const panelChunkBytes = 64 << 10

// forwardPanels is the fast-mode product in the panel form.
func (l *Linear) forwardPanels(dst, x []float32, rows int) {
	l.forwardPanelsOf([]*Linear{l}, [][]float32{dst}, []int{l.Out}, x, rows)
}

// pairable reports whether a and b can run as one panel product over the same inputs (ForwardPair): both
// take the panel form in fast mode with the same input width, bits and group (so the same quantized inputs),
// on the same pool.
func pairable(a, b *Linear) bool {
	return a != nil && b != nil && a.q != nil && b.q != nil && a.Pool == b.Pool && a.Pool.Mode() == ModeFast &&
		usePanels && panelsFit(a.q, a.Out) && panelsFit(b.q, b.Out) &&
		a.In == b.In && a.q.Bits == b.q.Bits && a.q.Group == b.q.Group
}

// CanPair reports whether ForwardPair runs a and b as one product.
func CanPair(a, b *Linear) bool { return pairable(a, b) }

// ForwardPair computes dstA = x·aᵀ and dstB = x·bᵀ (rows input rows each, rows×a.Out and rows×b.Out
// values). Where CanPair holds it is one product (the inputs quantized once, both weights' panels in one pool
// call); elsewhere it runs a.Forward and b.Forward. Every output has the bits a.Forward or b.Forward gives it
// (a panel's outputs do not depend on the panels beside it).
func ForwardPair(a, b *Linear, dstA, dstB, x []float32, rows int) {
	if rows <= 0 {
		return
	}
	if a.In != b.In || len(x) < rows*a.In || len(dstA) < rows*a.Out || len(dstB) < rows*b.Out {
		panic(fmt.Sprintf("kernel: ForwardPair of Linear[%d,%d] and [%d,%d] with %d rows: len(x)=%d len(dstA)=%d len(dstB)=%d",
			a.Out, a.In, b.Out, b.In, rows, len(x), len(dstA), len(dstB)))
	}
	if !pairable(a, b) {
		a.Forward(dstA, x, rows)
		b.Forward(dstB, x, rows)
		return
	}
	ls, lds := []*Linear{a, b}, []int{a.Out, b.Out}
	tile := min(a.fastTile(), b.fastTile()) // Forward's tiles (the inputs' packed size bounds them)
	for r0 := 0; r0 < rows; r0 += tile {
		n := min(tile, rows-r0)
		a.forwardPanelsOf(ls, [][]float32{dstA[r0*a.Out:], dstB[r0*b.Out:]}, lds, x[r0*a.In:], n)
	}
}

// forwardPanelsOf runs the panel products of ls (pairable, ls[0] being l) over the same input rows in one
// pool call (the rows quantized once, then the weights' panels one after the other): input row r's outputs
// of ls[k] go to dsts[k][r·lds[k]:].
func (l *Linear) forwardPanelsOf(ls []*Linear, dsts [][]float32, lds []int, x []float32, rows int) {
	q := l.q
	in, gs := l.In, q.Group
	ng := in / gs
	nibble := q.Bits == 4
	rec := fastRec(nibble)
	nch := (in + fastChunk - 1) / fastChunk
	ngp := (ng + 15) &^ 15
	pair := gs%64 == 0 // 64-input blocks
	// The tile kernels run blocks of amxMinRows rows in products of amxTileRows rows or more, and in products
	// of amxMinRows rows or more whose weights keep every worker on tiles long enough (amxTiles): they take
	// their input codes as tile rows (xa), and 4-bit ones unpack the panels' codes into a worker's ring of
	// amxRing bytes.
	tiles := useAMX && usePanelAsm && amxGroup(gs) >= 0 && amxTiles(rows, ls, l.Pool.Threads()) && amxReady()
	blocks := panelBlocks(rows, pair && !tiles)
	last := blocks[len(blocks)-1]
	prows := last.r + last.n // padRows(rows): rows [rows, prows) are pad rows, zero codes, outputs into pad
	bp, xsp := l.fastInputs(prows)
	defer bytesPool.Put(bp)
	defer scratchPool.Put(xsp)
	xp, xs := *bp, *xsp
	// The group sums of each block of rows, group-major, for the kernels' broadcasts.
	xtp := getScratch(prows * ng)
	defer scratchPool.Put(xtp)
	xst := *xtp
	var xa []byte
	if tiles {
		xap := getBytes(prows * in)
		defer bytesPool.Put(xap)
		xa = *xap
	}
	// pad holds the outputs of the last block, which reaches past rows when padded, for each of ls (its rows
	// below rows are copied to dsts as each panel call ends).
	var pad [][]float32
	if prows > rows {
		pad = make([][]float32, len(ls))
		for k := range ls {
			pp := getScratch(last.n * lds[k])
			defer scratchPool.Put(pp)
			pad[k] = *pp
		}
	}
	// quantize packs input rows [lo, hi) and writes their group sums into xst: the first loop of the product's
	// one pool call, so the rows are quantized on every worker and no serial step sits between the calls.
	quantize := func(lo, hi int) {
		for _, b := range blocks {
			for r := max(lo, b.r); r < min(hi, b.r+b.n); r++ {
				i := r - b.r
				if r >= rows {
					l.padFastRow(xp, xs, b, i)
				} else {
					l.quantizeFastRow(xp, xs, x, b, i, pair)
				}
				if tiles && b.n >= amxMinRows {
					amxInputs(xa[b.r*in:(b.r+b.n)*in], xp[b.r*nch*rec+i*rec:], b.n*rec, in/32, nibble, b.n, i)
				}
				t := xst[b.r*ng : (b.r+b.n)*ng]
				for g, v := range xs[r*ngp : r*ngp+ng] {
					t[g*b.n+i] = v
				}
			}
		}
	}
	wpr := q.wordsPerRow(in)
	pw := panelRows * wpr // code words per panel
	xstep := 64           // record bytes of a chunk's 4 blocks of codes
	if !nibble {
		xstep = 128
	}
	form := 1
	if nibble {
		form = 0
	}
	pns := make([]*panels, len(ls))
	total := 0
	for k, lk := range ls {
		pns[k] = lk.panelForm()
		total += pns[k].n
	}
	step := max(1, panelChunkBytes/(4*pw))
	if len(blocks) == 1 {
		step = total // one pass: nothing to keep in cache
	}
	grain := max(1, 2048/(in*prows))
	if tiles {
		// A tile kernel's call fills and drains its pipeline and loads its configuration: few, long calls.
		grain = max(grain, (total+3)/4)
	}
	// A row's quantization is a few hundred nanoseconds: give a worker at least two rows' worth of inputs.
	qgrain := max(1, 2048/in)
	if total == 1 {
		// One panel (a gate's few outputs) is one worker's: the call stays on the caller, with its quantization.
		qgrain = prows
	}
	l.Pool.ForThen(prows, qgrain, quantize, total, grain, func(lo, hi int) {
		var a panelArgs // one per worker: the call through the kernel table moves it to the heap
		var wb *[]byte
		if tiles && nibble {
			wb = getBytes(amxRing)
			defer bytesPool.Put(wb)
		}
		base := 0
		for k, pn := range pns {
			// This weight's panels [base, base+pn.n) of the call's; run those in [lo, hi).
			klo, khi := max(lo, base)-base, min(hi, base+pn.n)-base
			base += pn.n
			ldd := lds[k]
			vb := pn.valueBytes()
			biasp := func(off int) unsafe.Pointer {
				if len(pn.biases) == 0 {
					return nil // derived from the scales (bmul)
				}
				return unsafe.Pointer(&pn.biases[off])
			}
			for p0 := klo; p0 < khi; p0 += step {
				p1 := min(p0+step, khi)
				for _, b := range blocks {
					dst, dr := dsts[k], b.r // where the block's outputs go: row dr of dst
					if b.r+b.n > rows {
						dst, dr = pad[k], 0
					}
					a = panelArgs{
						codes: unsafe.Pointer(&pn.codes[p0*pw]), scales: unsafe.Pointer(&pn.scales[p0*panelRows*ng*vb]),
						biases: biasp(p0 * panelRows * ng * vb), npanels: p1 - p0,
						xp: unsafe.Pointer(&xp[b.r*nch*rec]), chadj: b.n*rec - xstep, xst: unsafe.Pointer(&xst[b.r*ng]),
						ngroups: ng, bpg: gs / 32, dst: unsafe.Pointer(&dst[dr*ldd+p0*panelRows]), ldd: 4 * ldd,
						sform: pn.sform, bmul: int(math.Float32bits(pn.bmul)), sstep: panelRows * vb,
					}
					switch kb := bits.TrailingZeros(uint(b.n)); { // blocks of 1, 2, 4, 8, 16 rows
					case !usePanelAsm:
						panelRunGo(pn, p0, p1, xp[b.r*nch*rec:], b.n, xst[b.r*ng:(b.r+b.n)*ng], in, gs, nibble, pair, dst[dr*ldd:], ldd)
					case tiles && b.n >= amxMinRows:
						a.cfg, a.xa = unsafe.Pointer(amxConfig), unsafe.Pointer(&xa[b.r*in])
						if nibble {
							a.wbuf = unsafe.Pointer(&(*wb)[0])
						}
						amxKernels[form][amxGroup(gs)](&a)
					case pair:
						panelPairKernels[form][kb](&a)
					default:
						panelKernels[form][kb](&a)
					}
					if b.r+b.n > rows {
						// The padded block's real rows, for the panels just run.
						for i := range rows - b.r {
							o0, o1 := i*ldd+p0*panelRows, i*ldd+p1*panelRows
							copy(dsts[k][(b.r+i)*ldd+p0*panelRows:], pad[k][o0:o1])
						}
					}
				}
			}
		}
	})
}

// panelRunGo is the panel kernels in Go: panels [p0, p1) against the n input rows of one block (records as
// the quantizer writes them for a block of n rows, group sums xst group-major), into dst[i·out + o]; with
// pair, 64-input blocks.
func panelRunGo(pn *panels, p0, p1 int, rec []byte, n int, xst []float32, in, gs int, nibble, pair bool, dst []float32, out int) {
	ng := in / gs
	ab := 1 // 32-input blocks per conversion
	if pair {
		ab = 2
	}
	rb := fastRec(nibble)
	wpb := 4 // code words per block of 32 inputs
	if !nibble {
		wpb = 8
	}
	wpr := in / 32 * wpb
	for p := p0; p < p1; p++ {
		codes := pn.codes[p*panelRows*wpr : (p+1)*panelRows*wpr]
		for j := range panelRows {
			for i := range n {
				var acc float32
				for g := range ng {
					acc += float32(pn.bias((p*ng+g)*panelRows+j) * xst[g*n+i])
					s := pn.scale((p*ng+g)*panelRows + j)
					for k0 := g * gs / 32; k0 < (g+1)*gs/32; k0 += ab {
						var isum int32
						for k := k0; k < k0+ab; k++ {
							r := rec[(k/4)*n*rb+i*rb:]
							bb := k % 4
							for v := range wpb {
								w := codes[(k*wpb+v)*panelRows+j]
								for t := range 4 {
									if nibble {
										lo, hi := int32(w>>(8*t))&15, int32(w>>(8*t+4))&15
										isum += lo*int32(int8(r[16*bb+4*v+t])) + hi*int32(int8(r[64+16*bb+4*v+t]))
									} else {
										isum += int32(byte(w>>(8*t))) * int32(int8(r[32*bb+4*v+t]))
									}
								}
							}
						}
						r := rec[(k0/4)*n*rb+i*rb:]
						bb := k0 % 4
						doff := 128 + 16*bb
						if !nibble {
							doff = 128 + 32*bb
						}
						d := math.Float32frombits(binary.LittleEndian.Uint32(r[doff:]))
						u := float32(float32(isum) * d)
						acc += float32(u * s)
					}
				}
				dst[i*out+p*panelRows+j] = acc
			}
		}
	}
}
