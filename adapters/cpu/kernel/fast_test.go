package kernel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMode(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Mode
		err  bool
	}{{"", ModeExact, false}, {"exact", ModeExact, false}, {"fast", ModeFast, false}, {"Fast", 0, true}, {"q8", 0, true}} {
		m, err := ParseMode(c.in)
		if c.err {
			assert.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, m)
		assert.Equal(t, m, must(ParseMode(m.String())))
	}
	assert.Equal(t, ModeExact, (*Pool)(nil).Mode())
	assert.Equal(t, ModeFast, NewPoolMode(2, ModeFast).Mode())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// fastInputs returns rows of input with the awkward cases the quantizer meets: zeros, signed zeros, a group
// of zeros, one large value per group and tiny values.
func fastInputs(r *rand.Rand, rows, in int) []float32 {
	x := randVec(r, rows*in, 1)
	for i := range x {
		switch i % 11 {
		case 0:
			x[i] = 0
		case 5:
			x[i] = float32(math.Copysign(0, -1))
		case 7:
			x[i] *= 1e-6
		}
	}
	if rows > 1 {
		clear(x[in : in+min(in, 64)]) // row 1's first inputs: whole zero blocks
	}
	if rows > 2 {
		x[2*in+3] = 40 // an outlier in row 2
	}
	return x
}

// The fast-mode paths: the portable Go, and the assembly kernels this CPU runs (fastAsmPaths).
const (
	fastGo   = "go"
	fastAVX2 = "avx2"
	fastVNNI = "vnni"
)

// The CPU's fast kernel sets, before any test flips them.
var hasVNNI, hasFastAVX2 = useVNNI, useFastAVX2

// fastAsmPaths lists the assembly fast paths this CPU has (VNNI first).
func fastAsmPaths() []string {
	var ps []string
	if hasVNNI {
		ps = append(ps, fastVNNI)
	}
	if hasFastAVX2 {
		ps = append(ps, fastAVX2)
	}
	return ps
}

// withFastPath runs f on one fast path of the lane form (restoring the CPU's after); the panel form
// (panel_test.go) is off inside.
func withFastPath(path string, f func()) {
	v, a, p := useVNNI, useFastAVX2, usePanels
	useVNNI, useFastAVX2, usePanels = path == fastVNNI, path == fastAVX2, false
	defer func() { useVNNI, useFastAVX2, usePanels = v, a, p }()
	f()
}

// fastShapes are the In values the kernel tests cover for group size gs: one group, a partial chunk of 128,
// several chunks, and chunks plus a partial one.
func fastShapes(gs int) []int {
	s := []int{gs, 2 * gs, 3 * gs, 512}
	if gs < 128 {
		s = append(s, 512+gs)
	}
	return s
}

// The assembly kernels (VNNI, AVX2: each this CPU has) give the portable path's bits for every width, group
// size, shape and row count 1–34, and a block of rows gives the bits of one-row calls (so verify and decode
// agree in fast mode).
func TestFastKernelsMatchGo(t *testing.T) {
	paths := fastAsmPaths()
	if len(paths) == 0 {
		t.Skip("neither AVX512-VNNI nor AVX2 on this CPU: only the portable fast path runs (TestFastDeterministic)")
	}
	r := rand.New(rand.NewPCG(31, 32))
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, in := range fastShapes(gs) {
				out := 7 + r.IntN(6) // odd and even counts of weight rows
				q, _ := quantFixture(r, out, in, bits, gs)
				l, err := NewQuant(out, in, q)
				require.NoError(t, err)
				l.Pool = NewPoolMode(2, ModeFast)
				const maxRows = 34
				x := fastInputs(r, maxRows, in)
				var ref []float32
				withFastPath(fastGo, func() {
					ref = make([]float32, maxRows*out)
					l.Forward(ref, x, maxRows)
				})
				for _, path := range paths {
					withFastPath(path, func() {
						for rows := 1; rows <= maxRows; rows++ {
							got := make([]float32, rows*out)
							l.Forward(got, x, rows)
							assertBits(t, ref[:rows*out], got, "%s q%d g%d in %d out %d rows %d", path, bits, gs, in, out, rows)
						}
					})
				}
			}
		}
	}
}

// ModeFast keeps the determinism contract on its own: one block call equals row-by-row calls for every worker
// count, on the VNNI kernels and on the portable path, and the two agree.
func TestFastDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const out, in, rows = 67, 512, 16
	x := fastInputs(r, rows, in)
	for _, bits := range []int{4, 8, 3} {
		for _, gs := range []int{32, 64, 128} {
			q, _ := quantFixture(r, out, in, bits, gs)
			l, err := NewQuant(out, in, q)
			require.NoError(t, err)
			l.Pool = NewPoolMode(1, ModeFast)
			ref := make([]float32, rows*out)
			l.Forward(ref, x, rows)
			for _, path := range append(fastAsmPaths(), fastGo) {
				withFastPath(path, func() {
					for _, threads := range []int{1, 2, 3, 7} {
						l.Pool = NewPoolMode(threads, ModeFast)
						got := make([]float32, rows*out)
						l.Forward(got, x, rows)
						assertBits(t, ref, got, "q%d g%d %s threads %d", bits, gs, path, threads)
						for row := range rows {
							one := make([]float32, out)
							l.Forward(one, x[row*in:(row+1)*in], 1)
							assertBits(t, ref[row*out:(row+1)*out], one, "q%d g%d %s row %d alone", bits, gs, path, row)
						}
					}
				})
			}
		}
	}
}

// Long inputs (prefill) go through Forward's fast-mode tiles; the tiling changes no bits.
func TestFastTiledRows(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	const out, in = 20, 1024
	q, _ := quantFixture(r, out, in, 4, 64)
	l, err := NewQuant(out, in, q)
	require.NoError(t, err)
	l.Pool = NewPoolMode(2, ModeFast)
	rows := l.fastTile() + 13
	x := fastInputs(r, rows, in)
	all := make([]float32, rows*out)
	l.Forward(all, x, rows)
	for _, row := range []int{0, 1, l.fastTile() - 1, l.fastTile(), rows - 1} {
		one := make([]float32, out)
		l.Forward(one, x[row*in:(row+1)*in], 1)
		assertBits(t, all[row*out:(row+1)*out], one, "row %d of %d", row, rows)
	}
}

// The fast product's error against the exact product in float64 stays within the bound the int8 rounding
// allows: |Δx_j| ≤ d_b/2 = max_b|x|/254 for the block b of 32 holding j, so
// |Δy| ≤ Σ_b max_b|x|/254·Σ_{j∈b}|w_j| (plus float rounding). The typical error is far smaller; the mean
// relative error over all elements is checked too.
func TestFastError(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	const out, in, rows = 41, 1024, 3
	x := randVec(r, rows*in, 1)
	x[5] = 30
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, gs := range []int{32, 64, 128} {
			t.Run(fmt.Sprintf("q%d_g%d", bits, gs), func(t *testing.T) {
				q, deq := quantFixture(r, out, in, bits, gs)
				l, err := NewQuant(out, in, q)
				require.NoError(t, err)
				l.Pool = NewPoolMode(2, ModeFast)
				got := make([]float32, rows*out)
				l.Forward(got, x, rows)
				assertInt8Error(t, got, x, deq, rows, out, in, "lanes")
			})
		}
	}
}

// assertInt8Error checks a fast product got of x against the dequantized weights deq: every element within
// the bound the int8 rounding of the inputs allows (TestFastError), and the mean error relative to Σ|x||w|
// below 2e-3.
func assertInt8Error(t *testing.T, got, x []float32, deq []float64, rows, out, in int, what string) {
	t.Helper()
	want, mag := naive(deq, x, rows, out, in)
	var relSum float64
	for row := range rows {
		for o := range out {
			var bound float64
			for b := range in / 32 {
				var amax, wsum float64
				for j := b * 32; j < (b+1)*32; j++ {
					amax = max(amax, math.Abs(float64(x[row*in+j])))
					wsum += math.Abs(deq[o*in+j])
				}
				bound += amax / 254 * wsum
			}
			i := row*out + o
			e := math.Abs(float64(got[i]) - want[i])
			require.LessOrEqual(t, e, 1.01*bound+1e-5*mag[i], "%s: row %d out %d", what, row, o)
			relSum += e / mag[i]
		}
	}
	assert.Less(t, relSum/float64(rows*out), 2e-3, "%s: mean error relative to Σ|x||w|", what)
}

// ModeFast changes only quantized products; f32 and bf16 keep the exact bits. A block holding NaN or Inf
// gives NaN, not a finite number, on every path.
func TestFastModeScope(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	const out, in, rows = 19, 256, 5
	x := randVec(r, rows*in, 1)
	lf, _ := NewF32(out, in, randVec(r, out*in, 1))
	bf := make([]uint16, out*in)
	for i := range bf {
		bf[i] = uint16(math.Float32bits(r.Float32()) >> 16)
	}
	lb, _ := NewBF16(out, in, bf)
	for _, l := range []*Linear{lf, lb} {
		l.Pool = NewPool(2)
		a := make([]float32, rows*out)
		l.Forward(a, x, rows)
		l.Pool = NewPoolMode(2, ModeFast)
		b := make([]float32, rows*out)
		l.Forward(b, x, rows)
		assertBits(t, a, b, "%v", l.Format())
	}
	for _, bits := range []int{4, 8, 5} {
		q, _ := quantFixture(r, out, in, bits, 64)
		l, _ := NewQuant(out, in, q)
		l.Pool = NewPoolMode(2, ModeFast)
		for _, path := range append(fastAsmPaths(), fastGo) {
			withFastPath(path, func() {
				for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
					xb := append([]float32(nil), x[:in]...)
					xb[70] = bad
					y := make([]float32, out)
					l.Forward(y, xb, 1)
					for o := range out {
						assert.True(t, math.IsNaN(float64(y[o])), "q%d %s input %v out %d: %v", bits, path, bad, o, y[o])
					}
				}
			})
		}
	}
}

// The assembly quantizers (AVX-512, AVX2: each this CPU has) give quantizeFastGo's bytes (codes, steps) and
// group sums for both forms and every group size, on zeros, signed zeros, tiny values, NaN, ±Inf, outliers
// and a partial last chunk.
func TestQuantizeFastMatchesGo(t *testing.T) {
	paths := fastAsmPaths()
	if len(paths) == 0 {
		t.Skip("neither AVX512-VNNI nor AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(39, 40))
	const in = 1024 + 64
	x := fastInputs(r, 3, in)[2*in:]
	x[130] = float32(math.NaN())
	x[300] = float32(math.Inf(-1))
	for j := 384; j < 512; j++ {
		x[j] = float32(math.Copysign(0, -1))
	}
	for j := 512; j < 640; j++ {
		x[j] *= 1e-33
	}
	x[700] = 1e30
	for _, path := range paths {
		for _, nibble := range []bool{true, false} {
			for _, gs := range []int{32, 64, 128} {
				quantizeFastCase(t, x, in, path, nibble, gs, false)
				if path == fastVNNI && gs >= 64 {
					quantizeFastCase(t, x, in, path, nibble, gs, true) // the panel form's 64-input steps
				}
			}
		}
	}
}

// quantizeFastCase is one case of TestQuantizeFastMatchesGo: the middle row of three interleaved records.
func quantizeFastCase(t *testing.T, x []float32, in int, path string, nibble bool, gs int, pair bool) {
	n := in / gs * gs
	ng := n / gs
	nch := (n + fastChunk - 1) / fastChunk
	const rows = 3 // the row's records interleave with two others'
	stride := rows * fastRec(nibble)
	b1, b2 := make([]byte, nch*stride), make([]byte, nch*stride)
	for i := range b1 {
		b1[i], b2[i] = 0x5a, 0x5a // bytes outside the row's records stay as they are
	}
	s1, s2 := make([]float32, ng), make([]float32, ng)
	off := fastRec(nibble) // the middle row
	k := quantizeFastQ8AVX512
	switch {
	case path == fastVNNI && nibble:
		k = quantizeFastQ4AVX512
	case path == fastAVX2 && nibble:
		k = quantizeFastQ4AVX2
	case path == fastAVX2:
		k = quantizeFastQ8AVX2
	}
	if pair {
		k = quantizeFastPairQ8AVX512
		if nibble {
			k = quantizeFastPairQ4AVX512
		}
	}
	k(&b1[off], stride, &s1[0], &x[0], ng, gs)
	quantizeFastBlocksGo(b2[off:], stride, s2, x[:n], gs, nibble, pair)
	require.Equal(t, b2, b1, "%s nibble %v g%d pair %v records", path, nibble, gs, pair)
	for g := range ng {
		assert.Equal(t, math.Float32bits(s2[g]), math.Float32bits(s1[g]), "%s nibble %v g%d group %d sum", path, nibble, gs, g)
	}
}

// quantizeFastGo by hand on one block of 64: per block of 32 its own step, codes round to nearest even, the
// nibble form puts the even inputs' codes first, a zero block gets d = 0.
func TestQuantizeFastLayout(t *testing.T) {
	x := make([]float32, 64)
	for j := range 32 {
		x[j] = float32(j%5) - 2
	}
	x[7] = 127             // block 0: max |x| = 127, d = 1
	x[2], x[3] = 2.5, -3.5 // exact halves: ties to even
	step := func(rec []byte, i int) float32 {
		return math.Float32frombits(binary.LittleEndian.Uint32(rec[128+4*i:]))
	}
	rec := make([]byte, fastRec(true))
	xs := make([]float32, 1)
	quantizeFastGo(rec, len(rec), xs, x, 64, true)
	for i := range 4 {
		assert.Equal(t, float32(1), step(rec, i), "nibble lane %d: block 0's step", i)
		assert.Equal(t, float32(0), step(rec, 4+i), "nibble lane %d: block 1 (zeros)", 4+i)
	}
	assert.Equal(t, int8(2), int8(rec[1]), "x[2] = 2.5 rounds to 2 (even), stored as even input 1")
	assert.Equal(t, int8(-4), int8(rec[64+1]), "x[3] = -3.5 rounds to -4 (even), stored as odd input 1")
	assert.Equal(t, int8(127), int8(rec[64+3]), "x[7] is odd input 3")
	var want float32
	for _, v := range x {
		want += v
	}
	assert.InDelta(t, want, xs[0], 1e-4)
	rec = make([]byte, fastRec(false))
	quantizeFastGo(rec, len(rec), xs, x, 64, false)
	for i := range 8 {
		assert.Equal(t, float32(1), step(rec, i), "byte lane %d: block 0's step", i)
		assert.Equal(t, float32(0), step(rec, 8+i), "byte lane %d: block 1", 8+i)
	}
	assert.Equal(t, []int8{-2, -1, 2, -4}, []int8{int8(rec[0]), int8(rec[1]), int8(rec[2]), int8(rec[3])})
	// The panel form's pairs: one step over all 64 inputs, held by both blocks; block 1's second half 254 makes
	// the step 2, so block 0's codes halve (ties to even).
	x[40] = 254
	rec = make([]byte, fastRec(false))
	quantizeFastBlocksGo(rec, len(rec), xs, x, 64, false, true)
	for i := range 16 {
		assert.Equal(t, float32(2), step(rec, i), "pair lane %d: the pair's step", i)
	}
	assert.Equal(t, []int8{-1, 0, 1, -2}, []int8{int8(rec[0]), int8(rec[1]), int8(rec[2]), int8(rec[3])})
	assert.Equal(t, int8(127), int8(rec[40]))
}

// The kernels read fastArgs by offset (gen_fast.py's table A): every field is 8 bytes, in declaration order.
func TestFastArgsLayout(t *testing.T) {
	var a fastArgs
	offs := []uintptr{unsafe.Offsetof(a.codes), unsafe.Offsetof(a.cstride), unsafe.Offsetof(a.scales),
		unsafe.Offsetof(a.biases), unsafe.Offsetof(a.sstride), unsafe.Offsetof(a.sstep), unsafe.Offsetof(a.wgroups),
		unsafe.Offsetof(a.xp), unsafe.Offsetof(a.chunks), unsafe.Offsetof(a.tail), unsafe.Offsetof(a.xs),
		unsafe.Offsetof(a.xss), unsafe.Offsetof(a.nb16), unsafe.Offsetof(a.dst), unsafe.Offsetof(a.ldd),
		unsafe.Offsetof(a.perm), unsafe.Offsetof(a.kscale), unsafe.Offsetof(a.kcode0), unsafe.Offsetof(a.klane0),
		unsafe.Offsetof(a.kcode1), unsafe.Offsetof(a.klane1), unsafe.Offsetof(a.kscaleT), unsafe.Offsetof(a.kbias)}
	for i, o := range offs {
		assert.Equal(t, uintptr(8*i), o, "field %d", i)
	}
	assert.Equal(t, uintptr(8*len(offs)), unsafe.Sizeof(a))
}
