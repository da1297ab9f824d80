package vecmath

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func randVec(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

func assertBits(t *testing.T, want, got []float32, msg string, args ...any) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("%s: element %d differs: %v vs %v", fmt.Sprintf(msg, args...), i, want[i], got[i])
		}
	}
}

func TestNormsAndActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	x := randVec(r, 3*16, 2)
	w := randVec(r, 16, 1)
	got := make([]float32, len(x))
	RMSNorm(got, x, w, 1e-6)
	for row := range 3 {
		var ss float64
		for _, v := range x[row*16 : (row+1)*16] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/16+1e-6)
		for j := range 16 {
			assert.InDelta(t, float64(w[j])*float64(x[row*16+j])*inv, float64(got[row*16+j]), 1e-5)
		}
	}
	assert.InDelta(t, math.Log1p(math.Exp(3)), float64(Softplus(3)), 1e-6)
	assert.InDelta(t, 100.0, float64(Softplus(100)), 1e-6)
	assert.InDelta(t, 0.0, float64(Softplus(-100)), 1e-6)
	assert.InDelta(t, 2/(1+math.Exp(-2)), float64(SiLU(2)), 1e-6)

	s := []float32{1, 2, 3, 3}
	Softmax(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	assert.InDelta(t, 1, sum, 1e-6)
	assert.Equal(t, s[2], s[3])
	assert.Equal(t, 2, Argmax([]float32{1, 2, 5, 5, float32(math.NaN())}))
	assert.Equal(t, -1, Argmax(nil))

	v := []float32{3, 4}
	L2Normalize(v, 0, 2)
	assert.InDeltaSlice(t, []float64{1.2, 1.6}, []float64{float64(v[0]), float64(v[1])}, 1e-6)
}

func TestRopePartial(t *testing.T) {
	const d, rdims, pos = 8, 4, 7
	rp := NewRope(rdims, 10000)
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	cos, sin := make([]float32, rdims/2), make([]float32, rdims/2)
	rp.Table(cos, sin, pos)
	got := append([]float32(nil), x...)
	rp.Apply(got, cos, sin)
	for i := range rdims / 2 {
		th := float64(pos) * math.Pow(10000, -float64(2*i)/rdims)
		a, b := float64(x[i]), float64(x[i+rdims/2])
		assert.InDelta(t, a*math.Cos(th)-b*math.Sin(th), float64(got[i]), 1e-5)
		assert.InDelta(t, b*math.Cos(th)+a*math.Sin(th), float64(got[i+rdims/2]), 1e-5)
	}
	assert.Equal(t, x[rdims:], got[rdims:d], "dims past r pass through")
}

// RMSNorm and L2Normalize run their scaling on vector multiplies: element for element the bits of the scalar
// loops they replaced (w·(x·inv), and (x·inv)·scale, each product rounded), at every width (vector bodies and
// tails), in place or not.
func TestNormScalingMatchesScalarLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 640} {
		x := randVec(r, 3*n, 3)
		w := randVec(r, n, 1.5)
		want := make([]float32, len(x))
		for row := range 3 {
			xr := x[row*n : (row+1)*n]
			inv := rmsInv(xr, 1e-6)
			for j, v := range xr {
				want[row*n+j] = w[j] * float32(v*inv)
			}
		}
		got := make([]float32, len(x))
		RMSNorm(got, x, w, 1e-6)
		assertBits(t, want, got, "RMSNorm width %d", n)
		inPlace := append([]float32(nil), x...)
		RMSNorm(inPlace, inPlace, w, 1e-6)
		assertBits(t, want, inPlace, "RMSNorm in place, width %d", n)

		v := x[:n]
		inv := float32(1 / math.Sqrt(float64(Dot(v, v)+1e-6)))
		wantL2 := make([]float32, n)
		for j, e := range v {
			wantL2[j] = float32(e*inv) * 0.125
		}
		gotL2 := append([]float32(nil), v...)
		L2Normalize(gotL2, 1e-6, 0.125)
		assertBits(t, wantL2, gotL2, "L2Normalize width %d", n)
	}
	L2Normalize(nil, 1e-6, 1) // an empty vector is left as it is
}

// AddInto gives, element for element, the float32 sum x[j] + y[j] that Add gives on a copy of x, for lengths
// around the vector widths, with NaN, infinities and signed zeros among the inputs.
func TestAddIntoMatchesAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 1e-40}
	for _, n := range []int{1, 7, 8, 15, 16, 17, 33, 640, 10240} {
		x, y := randVec(r, n, 10), randVec(r, n, 10)
		for i := range min(n, len(special)) {
			x[i], y[n-1-i] = special[i], special[(i+1)%len(special)]
		}
		want := append([]float32(nil), x...)
		Add(want, y)
		got := make([]float32, n)
		AddInto(got, x, y)
		for j := range n {
			w := x[j] + y[j]
			if math.Float32bits(w) != math.Float32bits(got[j]) && !(w != w && got[j] != got[j]) {
				t.Fatalf("n %d element %d: %v + %v = %v, got %v", n, j, x[j], y[j], w, got[j])
			}
		}
		assertBits(t, want, got, "n %d", n)
	}
}
