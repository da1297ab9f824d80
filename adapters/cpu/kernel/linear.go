package kernel

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/viterin/vek/vek32"
)

// Format says how a Linear stores its weight.
type Format int

const (
	// FormatF32 stores float32 weights.
	FormatF32 Format = iota + 1
	// FormatBF16 stores raw bfloat16 bits, widened one row at a time.
	FormatBF16
	// FormatQuant stores MLX affine codes, scales and biases, used packed.
	FormatQuant
	// FormatF16 stores raw IEEE half-precision bits, widened on the fly (f16.go).
	FormatF16
)

func (f Format) String() string {
	switch f {
	case FormatF32:
		return "f32"
	case FormatBF16:
		return "bf16"
	case FormatQuant:
		return "affine"
	case FormatF16:
		return "f16"
	}
	return "unknown"
}

// Linear is a weight matrix W [Out, In] applied as y = x·Wᵀ. The weight memory is borrowed (it may be a
// read-only mmap); a Linear is immutable after construction and safe for concurrent use.
type Linear struct {
	Out, In int
	// Pool runs Forward; nil means serial.
	Pool *Pool
	f32  []float32
	bf16 []uint16
	f16  []uint16
	q    *Quant
	pan  *panelState // the fast mode's panel form of q (panel.go), built on first use
}

// NewF32 wraps a row-major float32 weight [out, in].
func NewF32(out, in int, w []float32) (*Linear, error) {
	if out <= 0 || in <= 0 || len(w) != out*in {
		return nil, fmt.Errorf("f32 linear [%d,%d]: %d values", out, in, len(w))
	}
	return &Linear{Out: out, In: in, f32: w}, nil
}

// NewBF16 wraps a row-major bfloat16 weight [out, in] (raw bits).
func NewBF16(out, in int, w []uint16) (*Linear, error) {
	if out <= 0 || in <= 0 || len(w) != out*in {
		return nil, fmt.Errorf("bf16 linear [%d,%d]: %d values", out, in, len(w))
	}
	return &Linear{Out: out, In: in, bf16: w}, nil
}

// NewQuant wraps an MLX affine-quantized weight of logical shape [out, in].
func NewQuant(out, in int, q Quant) (*Linear, error) {
	if err := ValidQuant(q.Bits, q.Group); err != nil {
		return nil, err
	}
	if out <= 0 || in <= 0 || in%q.Group != 0 {
		return nil, fmt.Errorf("quantized linear [%d,%d]: in is not a multiple of group size %d", out, in, q.Group)
	}
	if len(q.Codes) != out*q.wordsPerRow(in) {
		return nil, fmt.Errorf("quantized linear [%d,%d] %d-bit: %d code words, want %d", out, in, q.Bits, len(q.Codes), out*q.wordsPerRow(in))
	}
	ng := out * in / q.Group
	if len(q.Scales) != ng || len(q.Biases) != ng {
		return nil, fmt.Errorf("quantized linear [%d,%d] group %d: %d scales and %d biases, want %d", out, in, q.Group, len(q.Scales), len(q.Biases), ng)
	}
	qq := q
	return &Linear{Out: out, In: in, q: &qq, pan: new(panelState)}, nil
}

// Format reports the weight storage.
func (l *Linear) Format() Format {
	switch {
	case l.f32 != nil:
		return FormatF32
	case l.bf16 != nil:
		return FormatBF16
	case l.f16 != nil:
		return FormatF16
	}
	return FormatQuant
}

// Quant returns the quantized storage, or nil.
func (l *Linear) Quant() *Quant { return l.q }

// Bytes is the size of the weight storage (for bandwidth figures).
func (l *Linear) Bytes() int {
	switch l.Format() {
	case FormatF32:
		return 4 * len(l.f32)
	case FormatBF16:
		return 2 * len(l.bf16)
	case FormatF16:
		return 2 * len(l.f16)
	}
	return 4*len(l.q.Codes) + 4*len(l.q.Scales) + 4*len(l.q.Biases)
}

// Rows returns a view of weight rows [lo, hi) (used to split fused projections and stacked experts).
func (l *Linear) Rows(lo, hi int) (*Linear, error) {
	if lo < 0 || hi > l.Out || lo >= hi {
		return nil, fmt.Errorf("row range [%d,%d) outside [0,%d)", lo, hi, l.Out)
	}
	v := &Linear{Out: hi - lo, In: l.In, Pool: l.Pool}
	switch l.Format() {
	case FormatF32:
		v.f32 = l.f32[lo*l.In : hi*l.In]
	case FormatBF16:
		v.bf16 = l.bf16[lo*l.In : hi*l.In]
	case FormatF16:
		v.f16 = l.f16[lo*l.In : hi*l.In]
	default:
		wpr, ng := l.q.wordsPerRow(l.In), l.In/l.q.Group
		q := *l.q
		q.Codes = q.Codes[lo*wpr : hi*wpr]
		q.Scales = q.Scales[lo*ng : hi*ng]
		q.Biases = q.Biases[lo*ng : hi*ng]
		v.q = &q
		v.pan = new(panelState)
	}
	return v, nil
}

// Row writes weight row r, dequantized/widened to float32, into dst[:In] (embedding lookup).
func (l *Linear) Row(dst []float32, r int) {
	dst = dst[:l.In]
	switch l.Format() {
	case FormatF32:
		copy(dst, l.f32[r*l.In:(r+1)*l.In])
	case FormatBF16:
		WidenBF16(dst, l.bf16[r*l.In:(r+1)*l.In])
	case FormatF16:
		WidenF16(dst, l.f16[r*l.In:(r+1)*l.In])
	default:
		q := l.q
		wpr, ng := q.wordsPerRow(l.In), l.In/q.Group
		UnpackCodes(dst, q.Codes[r*wpr:(r+1)*wpr], q.Bits, l.In)
		for g := range ng {
			s, b := q.Scales[r*ng+g], q.Biases[r*ng+g]
			seg := dst[g*q.Group : (g+1)*q.Group]
			for j, c := range seg {
				seg[j] = float32(s*c) + b
			}
		}
	}
}

var scratchPool = sync.Pool{New: func() any { return new([]float32) }}

func getScratch(n int) *[]float32 {
	p := scratchPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// Forward computes dst[r·Out+o] = Σ_j x[r·In+j]·W[o,j] for r < rows. Each element is one fixed-order dot
// product, independent of rows and of the worker count. It panics when dst or x is too short (a caller bug).
func (l *Linear) Forward(dst, x []float32, rows int) {
	if rows <= 0 {
		return
	}
	if len(x) < rows*l.In || len(dst) < rows*l.Out {
		panic(fmt.Sprintf("kernel: Linear[%d,%d].Forward with %d rows: len(x)=%d len(dst)=%d", l.Out, l.In, rows, len(x), len(dst)))
	}
	// Long inputs (prefill) go through in tiles of rows that stay cache-resident while every weight row passes
	// over them. Elements do not depend on the row count, so tiling changes no bits. A verify block (up to 16
	// rows) stays one tile for In ≤ 16384 (its inputs, at most 1 MiB, are re-read from L2 or L3), so the
	// weights stream from memory once per block rather than once per tile, and 16-row kernels see all 16 rows.
	tile := min(max(32768/l.In, 2), 64) &^ 1
	if l.In <= 16384 {
		tile = max(tile, 16)
	}
	if l.q != nil && l.Pool.Mode() == ModeFast {
		// Fast-mode inputs are packed to about a byte each, so a tile holds more rows (prefill streams the
		// weights once per tile).
		tile = l.fastTile()
	}
	for r0 := 0; r0 < rows; r0 += tile {
		n := min(tile, rows-r0)
		l.forwardTile(dst[r0*l.Out:], x[r0*l.In:], n)
	}
}

func (l *Linear) forwardTile(dst, x []float32, rows int) {
	grain := max(1, 32768/(l.In*rows))
	in, out := l.In, l.Out
	switch l.Format() {
	case FormatF32:
		if useAVX2 {
			l.forwardDenseAVX2(dst, x, rows, grain)
			return
		}
		l.Pool.For(out, grain, func(lo, hi int) {
			for o := lo; o < hi; o++ {
				w := l.f32[o*in : (o+1)*in]
				for r := range rows {
					dst[r*out+o] = vek32.Dot(x[r*in:(r+1)*in], w)
				}
			}
		})
	case FormatBF16:
		if useAVX2 {
			l.forwardDenseAVX2(dst, x, rows, grain)
			return
		}
		l.Pool.For(out, grain, func(lo, hi int) {
			sp := getScratch(in)
			w := *sp
			for o := lo; o < hi; o++ {
				WidenBF16(w, l.bf16[o*in:(o+1)*in])
				for r := range rows {
					dst[r*out+o] = vek32.Dot(x[r*in:(r+1)*in], w)
				}
			}
			scratchPool.Put(sp)
		})
	case FormatF16:
		l.forwardF16(dst, x, rows, grain)
	default:
		l.forwardQuant(dst, x, rows)
	}
}

// forwardDenseAVX2 is the f32/bf16/f16 product on AVX2 (f16: with F16C). Blocks of 6 or 4 input rows × 2 weight rows (4 × 4 with
// AVX-512) go through the tile kernels, which read each weight vector once per 6 or 4 rows; the remaining rows and
// outputs go through the one- and two-row kernels. All of them run the same operations per element.
func (l *Linear) forwardDenseAVX2(dst, x []float32, rows, grain int) {
	in, out := l.In, l.Out
	tileO := 2
	if useAVX512 {
		tileO = 4
	}
	if rows < 4 || in%32 != 0 {
		tileO = 0
	}
	// The 1 × 4 tiles for fewer than 4 rows (AVX-512 only: on AVX2 they measured no faster than the one-row
	// kernels, 40 against 39–41 GB/s streaming f16 weights).
	one := rows < 4 && in%32 == 0 && useAVX512 && oneByFour
	l.Pool.For(out, grain, func(lo, hi int) {
		var pair [2]float32
		var scratch [2 * 4 * 4 * 8]float32
		// rest computes output o for rows [r0, rows) with the one- and two-row kernels.
		rest := func(o, r0 int) {
			r := r0
			if l.f32 != nil {
				w := &l.f32[o*in]
				for ; r+2 <= rows; r += 2 {
					dotF32x2AVX2(&x[r*in], &x[(r+1)*in], w, in, &pair[0])
					dst[r*out+o], dst[(r+1)*out+o] = pair[0], pair[1]
				}
				if r < rows {
					dst[r*out+o] = dotF32AVX2(&x[r*in], w, in)
				}
				return
			}
			if l.f16 != nil {
				// Per row dotF16AVX2 (leftover rows only: the tiles take the blocks of 4 and 6).
				w := &l.f16[o*in]
				for ; r < rows; r++ {
					dst[r*out+o] = dotF16AVX2(&x[r*in], w, in)
				}
				return
			}
			w := &l.bf16[o*in]
			for ; r+2 <= rows; r += 2 {
				dotBF16x2AVX2(&x[r*in], &x[(r+1)*in], w, in, &pair[0])
				dst[r*out+o], dst[(r+1)*out+o] = pair[0], pair[1]
			}
			if r < rows {
				dst[r*out+o] = dotBF16AVX2(&x[r*in], w, in)
			}
		}
		o := lo
		if tileO > 0 {
			for ; o+tileO <= hi; o += tileO {
				r := 0
				// On AVX2, blocks of 6 rows while 6 or more remain (8 go as 4 + 4): each weight vector is read
				// once per 6 rows.
				for ; tileO == 2 && denseTile6 && r+6 <= rows && rows-r != 8; r += 6 {
					xp, dp := &x[r*in], &dst[r*out+o]
					switch {
					case l.f32 != nil:
						tileF32x6x2AVX2(xp, in, &l.f32[o*in], in, in, dp, out, &scratch[0])
					case l.f16 != nil:
						tileF16x6x2AVX2(xp, in, &l.f16[o*in], in, in, dp, out, &scratch[0])
					default:
						tileBF16x6x2AVX2(xp, in, &l.bf16[o*in], in, in, dp, out, &scratch[0])
					}
				}
				for ; r+4 <= rows; r += 4 {
					xp, dp := &x[r*in], &dst[r*out+o]
					switch {
					case l.f32 != nil && tileO == 4:
						tileF32x4x4AVX512(xp, in, &l.f32[o*in], in, in, dp, out, &scratch[0], l.tilePrefetch(o, hi, r/4))
					case l.f32 != nil:
						tileF32x4x2AVX2(xp, in, &l.f32[o*in], in, in, dp, out, &scratch[0])
					case l.f16 != nil && tileO == 4:
						tileF16x4x4AVX512(xp, in, &l.f16[o*in], in, in, dp, out, &scratch[0], l.tilePrefetch(o, hi, r/4))
					case l.f16 != nil:
						tileF16x4x2AVX2(xp, in, &l.f16[o*in], in, in, dp, out, &scratch[0])
					case tileO == 4:
						tileBF16x4x4AVX512(xp, in, &l.bf16[o*in], in, in, dp, out, &scratch[0], l.tilePrefetch(o, hi, r/4))
					default:
						tileBF16x4x2AVX2(xp, in, &l.bf16[o*in], in, in, dp, out, &scratch[0])
					}
				}
				if r < rows {
					for oo := o; oo < o+tileO; oo++ {
						rest(oo, r)
					}
				}
			}
		}
		if one {
			// Fewer than 4 rows (a decode step): each row against 4 weight rows at a time.
			for ; o+4 <= hi; o += 4 {
				for r := range rows {
					xp, dp, pf := &x[r*in], &dst[r*out+o], l.tilePrefetch(o, hi, r)
					switch {
					case l.f32 != nil:
						tileF32x1x4AVX512(xp, in, &l.f32[o*in], in, in, dp, out, &scratch[0], pf)
					case l.f16 != nil:
						tileF16x1x4AVX512(xp, in, &l.f16[o*in], in, in, dp, out, &scratch[0], pf)
					default:
						tileBF16x1x4AVX512(xp, in, &l.bf16[o*in], in, in, dp, out, &scratch[0], pf)
					}
				}
			}
		}
		for ; o < hi; o++ {
			rest(o, 0)
		}
	})
}

// oneByFour enables the 1 × 4 tiles for fewer than 4 rows (TestTilesMatchAVX2 turns it off to compare them
// with the one-row kernels).
var oneByFour = true

// denseTile6 enables the 6 × 2 AVX2 tiles (benchmarks turn it off to compare them with the 4 × 2 ones).
var denseTile6 = true

// tilePrefetch returns where the AVX-512 tile for outputs [o, o+4) and row block b prefetches: the next tile's
// 4 weight rows (16·In bytes f32, 8·In bf16; each call covers 8·In bytes), spread over the first row blocks,
// while the later blocks compute from cache. With no next tile in [o, hi) it re-touches the current weights.
func (l *Linear) tilePrefetch(o, hi, b int) *byte {
	in := l.In
	if o+8 > hi {
		b = -1
	}
	if l.f32 != nil {
		if b == 0 || b == 1 {
			return (*byte)(unsafe.Pointer(&l.f32[(o+4)*in+2*b*in]))
		}
		return (*byte)(unsafe.Pointer(&l.f32[o*in]))
	}
	w := l.bf16
	if l.f16 != nil {
		w = l.f16
	}
	if b == 0 {
		return (*byte)(unsafe.Pointer(&w[(o+4)*in]))
	}
	return (*byte)(unsafe.Pointer(&w[o*in]))
}
