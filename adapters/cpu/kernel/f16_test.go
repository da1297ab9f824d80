package kernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// f16Ref widens a half by its definition, (-1)^s · 2^(e-15) · (1 + m/1024), or 2^-14 · m/1024 when e = 0.
func f16Ref(h uint16) float64 {
	s, e, m := h>>15, int(h>>10)&0x1f, float64(h&0x3ff)
	v := math.Ldexp(1+m/1024, e-15)
	switch {
	case e == 0x1f && m == 0:
		v = math.Inf(1)
	case e == 0x1f:
		v = math.NaN()
	case e == 0:
		v = math.Ldexp(m/1024, -14)
	}
	if s == 1 {
		v = -v
	}
	return v
}

// Every one of the 65,536 halves widens exactly, in Go and (where the CPU has F16C) in the assembly.
func TestF16ToF32AllValues(t *testing.T) {
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	for _, h := range all {
		got, want := F16ToF32(h), f16Ref(h)
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(float64(got)), "%#04x", h)
			require.Equal(t, uint32(h&0x3ff|0x200), math.Float32bits(got)>>13&0x3ff, "%#04x keeps its payload, made quiet", h)
			continue
		}
		require.Equal(t, want, float64(got), "%#04x", h)
		if h == 0x8000 {
			require.True(t, math.Signbit(float64(got)), "-0 keeps its sign")
		}
	}
	if !useF16C {
		t.Skip("no F16C on this CPU: only the Go widening runs")
	}
	// Every length 0–40 (the vector loop and each tail) and the whole table.
	for _, n := range append([]int{1 << 16}, seq(0, 40)...) {
		src := all[len(all)-n:]
		want := make([]float32, n)
		for i, h := range src {
			want[i] = F16ToF32(h)
		}
		got := make([]float32, n)
		WidenF16(got, src)
		assertBits(t, want, got, "n %d", n)
	}
}

func seq(lo, hi int) []int {
	var v []int
	for i := lo; i <= hi; i++ {
		v = append(v, i)
	}
	return v
}

// f16Fixture returns random f16 weights [out, in] in about [-1, 1] (some subnormal) and their F32 widening.
func f16Fixture(r *rand.Rand, out, in int) ([]uint16, []float32) {
	h := make([]uint16, out*in)
	w := make([]float32, out*in)
	for i := range h {
		if r.IntN(16) == 0 {
			h[i] = uint16(r.IntN(0x400)) | uint16(r.IntN(2))<<15 // subnormal or zero
		} else {
			h[i] = uint16(r.IntN(0x3c00)) | uint16(r.IntN(2))<<15 // |v| < 1
		}
		w[i] = F16ToF32(h[i])
	}
	return h, w
}

// An F16 Linear gives exactly the bits of the F32 Linear over its widened weights (what loading an f16
// checkpoint built before FormatF16) on every kernel set this CPU has, for 1–34 input rows (the one-row
// stream, pairs, the 4- and 6-row tiles and the rows they leave), output counts around the tiles' and the
// blocks' edges, widths with and without a vector tail, and 1 or 2 workers.
func TestF16LinearMatchesF32(t *testing.T) { bothPaths(t, testF16LinearMatchesF32) }

func testF16LinearMatchesF32(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 16))
	for _, in := range []int{1, 7, 31, 32, 33, 64, 95, 320, 1000, 4160} {
		for _, out := range []int{1, 3, 4, 5, 8, 13, 17, 34} {
			h, w := f16Fixture(r, out, in)
			lh, err := NewF16(out, in, h)
			require.NoError(t, err)
			lf, err := NewF32(out, in, w)
			require.NoError(t, err)
			x := randVec(r, 34*in, 1)
			for _, workers := range []int{1, 2} {
				lh.Pool, lf.Pool = NewPool(workers), NewPool(workers)
				for rows := 1; rows <= 34; rows++ {
					want := make([]float32, rows*out)
					lf.Forward(want, x, rows)
					got := make([]float32, rows*out)
					lh.Forward(got, x, rows)
					assertBits(t, want, got, "in %d out %d rows %d workers %d", in, out, rows, workers)
				}
			}
		}
	}
}

// dotF16AVX2 runs dotF32AVX2's operations on every length 0–130.
func TestDotF16MatchesDotF32(t *testing.T) {
	if !useF16C {
		t.Skip("no AVX2+FMA+F16C on this CPU: dotF16AVX2 does not run")
	}
	r := rand.New(rand.NewPCG(37, 17))
	for n := 1; n <= 130; n++ {
		h, w := f16Fixture(r, 1, n)
		x := randVec(r, n, 1)
		want, got := dotF32AVX2(&x[0], &w[0], n), dotF16AVX2(&x[0], &h[0], n)
		require.Equal(t, math.Float32bits(want), math.Float32bits(got), "n %d: %v vs %v", n, want, got)
	}
}

func TestF16LinearViews(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 18))
	h, w := f16Fixture(r, 6, 40)
	l, err := NewF16(6, 40, h)
	require.NoError(t, err)
	assert.Equal(t, FormatF16, l.Format())
	assert.Equal(t, "f16", l.Format().String())
	assert.Equal(t, 2*6*40, l.Bytes())
	row := make([]float32, 40)
	l.Row(row, 4)
	assertBits(t, w[4*40:5*40], row, "row 4")
	v, err := l.Rows(2, 5)
	require.NoError(t, err)
	v.Row(row, 2)
	assertBits(t, w[4*40:5*40], row, "row 2 of the view [2,5)")
	_, err = NewF16(6, 40, h[:10])
	require.ErrorContains(t, err, "f16 linear [6,40]: 10 values")
}
