package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastActInputs covers every range the activations meet, the clamps' edges and the special values.
func fastActInputs(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 88, -88, 86, -86, 87.9, -86.1, 89, -89, 100, -100,
		1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-40, 0.3466, -0.3466}
	for i := range x {
		switch {
		case i < len(special):
			x[i] = special[i]
		case i%3 == 0:
			x[i] = (r.Float32()*2 - 1) * 100
		case i%3 == 1:
			x[i] = (r.Float32()*2 - 1) * 8
		default:
			x[i] = float32(math.Ldexp(r.Float64()*2-1, -r.IntN(40)))
		}
	}
	return x
}

// The AVX2 activations give the Go functions' bits on every lane and tail length.
func TestFastActAVX2MatchesGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU: only the Go activations run")
	}
	r := rand.New(rand.NewPCG(51, 52))
	x := fastActInputs(r, 4099)
	up := fastActInputs(r, len(x))
	r.Shuffle(len(up), func(i, j int) { up[i], up[j] = up[j], up[i] })
	for _, n := range []int{1, 7, 8, 9, 31, 40, len(x)} {
		for _, f := range []struct {
			name string
			vec  func(dst []float32)
			one  func(j int) float32
		}{
			{"silu", func(dst []float32) { SiLUFastInto(dst, x) }, func(j int) float32 { return SiLUFast(x[j]) }},
			{"sigmoid", func(dst []float32) { SigmoidFastInto(dst, x) }, func(j int) float32 { return SigmoidFast(x[j]) }},
			{"swiglu", func(dst []float32) { SwiGLUFast(dst, x, up) }, func(j int) float32 { return SiLUFast(x[j]) * up[j] }},
		} {
			got := make([]float32, n)
			f.vec(got)
			for j := range got {
				require.Equal(t, math.Float32bits(f.one(j)), math.Float32bits(got[j]), "%s n %d j %d x %v", f.name, n, j, x[j])
			}
		}
	}
	// In place.
	y := append([]float32(nil), x...)
	SiLUFastInto(y, y)
	for j := range y {
		require.Equal(t, math.Float32bits(SiLUFast(x[j])), math.Float32bits(y[j]), "in place j %d", j)
	}
}

// The fast activations stay within a few float32 ulps of the float64 functions (absolute 1e-37 near zero), and
// keep the limits: σ → 0 and 1, silu(x) → x and 0, NaN stays NaN.
func TestFastActAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 54))
	x := fastActInputs(r, 20000)
	var worst float64
	for _, v := range x {
		if math.IsNaN(float64(v)) {
			assert.True(t, math.IsNaN(float64(SiLUFast(v))))
			assert.True(t, math.IsNaN(float64(SigmoidFast(v))))
			continue
		}
		if math.IsInf(float64(v), 0) || math.Abs(float64(v)) > 80 {
			continue
		}
		e := math.Exp(-float64(v))
		for _, c := range []struct{ got, want float64 }{
			{float64(SiLUFast(v)), float64(v) / (1 + e)},
			{float64(SigmoidFast(v)), 1 / (1 + e)},
		} {
			err := math.Abs(c.got - c.want)
			if err > 1e-37 {
				worst = max(worst, err/math.Abs(c.want))
			}
		}
	}
	assert.Less(t, worst, 4e-7, "worst relative error")
	assert.Equal(t, float32(1), SigmoidFast(100))
	assert.Less(t, SigmoidFast(-100), float32(1e-37))
	assert.Equal(t, float32(100), SiLUFast(100))
	assert.Equal(t, float32(math.Inf(1)), SiLUFast(float32(math.Inf(1))))
	t.Logf("worst relative error %.3g", worst)
}
