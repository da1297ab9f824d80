package kernel

import (
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
	clear(x[in : in+128]) // row 1's first 128 inputs: whole zero groups
	x[2*in+3] = 40        // an outlier in row 2
	return x
}

// The VNNI kernels give fastQ4Go's bits for every group size.
func TestFastQ4KernelsMatchGo(t *testing.T) {
	if !useVNNI {
		t.Skip("no AVX512-VNNI on this CPU")
	}
	r := rand.New(rand.NewPCG(31, 32))
	const out, in, rows = 9, 1024, 4
	x := fastInputs(r, rows, in)
	for _, gs := range []int{32, 64, 128} {
		q, _ := quantFixture(r, out, in, 4, gs)
		ng := in / gs
		codes := unsafe.Slice((*byte)(unsafe.Pointer(&q.Codes[0])), len(q.Codes)*4)
		xq := make([]int8, in)
		d := make([]float32, in/8)
		xs := make([]float32, ng)
		for row := range rows {
			quantizeQ8(xq, d, xs, x[row*in:(row+1)*in], gs)
			// All weight rows in one call, and one at a time.
			all := make([]float32, out)
			fastQ4[gs/64](&codes[0], &xq[0], &d[0], &q.Scales[0], &q.Biases[0], &xs[0], ng, out, &all[0])
			for o := range out {
				c := codes[o*in/2 : (o+1)*in/2]
				sc, bi := q.Scales[o*ng:(o+1)*ng], q.Biases[o*ng:(o+1)*ng]
				var one float32
				fastQ4[gs/64](&c[0], &xq[0], &d[0], &sc[0], &bi[0], &xs[0], ng, 1, &one)
				want := fastQ4Go(c, xq, d, sc, bi, xs, gs)
				require.Equal(t, math.Float32bits(want), math.Float32bits(one), "g%d row %d out %d", gs, row, o)
				require.Equal(t, math.Float32bits(want), math.Float32bits(all[o]), "g%d row %d out %d (all rows)", gs, row, o)
			}
		}
		// The Rows form: one weight row against all input rows, results out apart.
		nd := in / 8
		xqAll, dAll, xsAll := make([]int8, rows*in), make([]float32, rows*nd), make([]float32, rows*ng)
		for row := range rows {
			quantizeQ8(xqAll[row*in:(row+1)*in], dAll[row*nd:(row+1)*nd], xsAll[row*ng:(row+1)*ng], x[row*in:(row+1)*in], gs)
		}
		for o := range out {
			c := codes[o*in/2 : (o+1)*in/2]
			sc, bi := q.Scales[o*ng:(o+1)*ng], q.Biases[o*ng:(o+1)*ng]
			got := make([]float32, rows*out)
			fastQ4Rows[gs/64](&c[0], &xqAll[0], &dAll[0], &sc[0], &bi[0], &xsAll[0], ng, rows, &got[o], out)
			for row := range rows {
				want := fastQ4Go(c, xqAll[row*in:(row+1)*in], dAll[row*nd:(row+1)*nd], sc, bi, xsAll[row*ng:(row+1)*ng], gs)
				require.Equal(t, math.Float32bits(want), math.Float32bits(got[row*out+o]), "g%d rows form: row %d out %d", gs, row, o)
			}
		}
	}
}

// ModeFast keeps the determinism contract on its own: one block call equals row-by-row calls for every worker
// count, and the VNNI kernels equal the portable path.
func TestFastQ4Deterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const out, in, rows = 67, 512, 16
	x := fastInputs(r, rows, in)
	saved := useVNNI
	defer func() { useVNNI = saved }()
	for _, gs := range []int{32, 64, 128} {
		q, _ := quantFixture(r, out, in, 4, gs)
		l, err := NewQuant(out, in, q)
		require.NoError(t, err)
		useVNNI = saved
		l.Pool = NewPoolMode(1, ModeFast)
		ref := make([]float32, rows*out)
		l.Forward(ref, x, rows)
		for _, threads := range []int{2, 3, 7} {
			l.Pool = NewPoolMode(threads, ModeFast)
			got := make([]float32, rows*out)
			l.Forward(got, x, rows)
			assertBits(t, ref, got, "g%d threads %d", gs, threads)
			for row := range rows {
				one := make([]float32, out)
				l.Forward(one, x[row*in:(row+1)*in], 1)
				assertBits(t, ref[row*out:(row+1)*out], one, "g%d row %d alone", gs, row)
			}
		}
		useVNNI = false
		got := make([]float32, rows*out)
		l.Forward(got, x, rows)
		assertBits(t, ref, got, "g%d portable", gs)
	}
}

// The fast product's error against the exact product in float64 stays within the bound the int8 rounding
// allows: |Δx_j| ≤ d_b/2 = max_b|x|/254 for the block b of 32 holding j, so
// |Δy| ≤ Σ_b max_b|x|/254·Σ_{j∈b}|w_j| (plus float rounding). The typical error is far smaller; the mean
// relative error over all elements is checked too.
func TestFastQ4Error(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	const out, in, rows = 41, 1024, 3
	x := randVec(r, rows*in, 1)
	x[5] = 30
	for _, gs := range []int{32, 64, 128} {
		t.Run(fmt.Sprint("g", gs), func(t *testing.T) {
			q, deq := quantFixture(r, out, in, 4, gs)
			l, err := NewQuant(out, in, q)
			require.NoError(t, err)
			l.Pool = NewPoolMode(2, ModeFast)
			got := make([]float32, rows*out)
			l.Forward(got, x, rows)
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
					require.LessOrEqual(t, e, 1.01*bound+1e-5*mag[i], "row %d out %d", row, o)
					relSum += e / mag[i]
				}
			}
			assert.Less(t, relSum/float64(rows*out), 2e-3, "mean error relative to Σ|x||w|")
		})
	}
}

// ModeFast changes only 4-bit products; other formats keep the exact bits. A group holding NaN or Inf
// gives NaN, not a finite number.
func TestFastModeScope(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	const out, in, rows = 19, 256, 5
	x := randVec(r, rows*in, 1)
	q8, _ := quantFixture(r, out, in, 8, 64)
	q3, _ := quantFixture(r, out, in, 3, 32)
	lf, _ := NewF32(out, in, randVec(r, out*in, 1))
	l8, _ := NewQuant(out, in, q8)
	l3, _ := NewQuant(out, in, q3)
	for _, l := range []*Linear{lf, l8, l3} {
		l.Pool = NewPool(2)
		a := make([]float32, rows*out)
		l.Forward(a, x, rows)
		l.Pool = NewPoolMode(2, ModeFast)
		b := make([]float32, rows*out)
		l.Forward(b, x, rows)
		assertBits(t, a, b, "%v", l.Format())
	}
	q4, _ := quantFixture(r, out, in, 4, 64)
	l4, _ := NewQuant(out, in, q4)
	l4.Pool = NewPoolMode(2, ModeFast)
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		xb := append([]float32(nil), x[:in]...)
		xb[70] = bad
		y := make([]float32, out)
		l4.Forward(y, xb, 1)
		for o := range out {
			assert.True(t, math.IsNaN(float64(y[o])), "input %v out %d: %v", bad, o, y[o])
		}
	}
}

// The AVX-512 quantizer gives quantizeQ8Go's bits (codes, steps, group sums) for every group size, on groups
// of zeros, signed zeros, tiny values, NaN, ±Inf and outliers.
func TestQuantizeQ8MatchesGo(t *testing.T) {
	if !useVNNI {
		t.Skip("no AVX512-VNNI on this CPU")
	}
	r := rand.New(rand.NewPCG(39, 40))
	const in = 1024
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
	for _, gs := range []int{32, 64, 128} {
		ng := in / gs
		q1, q2 := make([]int8, in), make([]int8, in)
		d1, d2 := make([]float32, in/8), make([]float32, in/8)
		s1, s2 := make([]float32, ng), make([]float32, ng)
		quantizeQ8AVX512(&q1[0], &d1[0], &s1[0], &x[0], ng, gs)
		quantizeQ8Go(q2, d2, s2, x, gs)
		assert.Equal(t, q2, q1, "g%d codes", gs)
		for i := range d1 {
			assert.Equal(t, math.Float32bits(d2[i]), math.Float32bits(d1[i]), "g%d step %d", gs, i)
		}
		for g := range ng {
			assert.Equal(t, math.Float32bits(s2[g]), math.Float32bits(s1[g]), "g%d group %d sum", gs, g)
		}
	}
}

// quantizeQ8Go by hand on one group of 64: per block of 32 its own step, codes round to nearest even, the even
// inputs' codes first, a zero block gets d = 0.
func TestQuantizeQ8Layout(t *testing.T) {
	x := make([]float32, 64)
	for j := range 32 {
		x[j] = float32(j%5) - 2 // block 0: max |x| = 2
	}
	x[7] = 127 // block 0: max |x| = 127, d = 1
	xq, d, xs := make([]int8, 64), make([]float32, 8), make([]float32, 1)
	x[2], x[3] = 2.5, -3.5 // exact halves: ties to even
	quantizeQ8Go(xq, d, xs, x, 64)
	assert.Equal(t, []float32{1, 1, 1, 1, 0, 0, 0, 0}, d)
	assert.Equal(t, int8(2), xq[1], "x[2] = 2.5 rounds to 2 (even), stored as even input 1")
	assert.Equal(t, int8(-4), xq[32+1], "x[3] = -3.5 rounds to -4 (even), stored as odd input 1")
	assert.Equal(t, int8(127), xq[32+3], "x[7] is odd input 3")
	for j := 16; j < 32; j++ {
		assert.Zero(t, xq[j], "block 1 (zeros) even codes")
		assert.Zero(t, xq[32+j], "block 1 (zeros) odd codes")
	}
	var want float32
	for _, v := range x {
		want += v
	}
	assert.InDelta(t, want, xs[0], 1e-4)
}
