package kernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// GDNStepFast gives the same bits with and without AVX2, in place and not, and its state update is the exact
// mode's elementwise ScaleInto then AddScaled with the returned δ (what tape replay runs).
func TestGDNStepFast(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, n := range []int{32, 64, 256, 40} {
		src, k, q := randVec(r, n, 1), randVec(r, n, 0.1), randVec(r, n, 0.1)
		alpha, beta, v := float32(0.93), float32(0.61), float32(0.37)
		run := func(avx2, inPlace bool) ([]float32, float32, float32) {
			saved := useAVX2
			useAVX2 = avx2 && saved
			defer func() { useAVX2 = saved }()
			S := make([]float32, n)
			from := src
			if inPlace {
				copy(S, src)
				from = S
			}
			o, d := GDNStepFast(S, from, k, q, alpha, beta, v)
			return S, o, d
		}
		S0, o0, d0 := run(false, false)
		for _, avx2 := range []bool{false, true} {
			for _, inPlace := range []bool{false, true} {
				S, o, d := run(avx2, inPlace)
				assertBits(t, S0, S, "n %d avx2 %v in place %v: state", n, avx2, inPlace)
				require.Equal(t, math.Float32bits(o0), math.Float32bits(o), "n %d avx2 %v: o", n, avx2)
				require.Equal(t, math.Float32bits(d0), math.Float32bits(d), "n %d avx2 %v: d", n, avx2)
			}
		}
		want := make([]float32, n)
		ScaleInto(want, src, alpha)
		AddScaled(want, k, make([]float32, n), d0)
		assertBits(t, want, S0, "n %d: the update is ScaleInto then AddScaled", n)
		var m, o float64
		for j := range n {
			m += float64(src[j]*alpha) * float64(k[j])
		}
		for j := range n {
			o += float64(S0[j]) * float64(q[j])
		}
		require.InDelta(t, float64(beta)*(float64(v)-m), float64(d0), 1e-5, "n %d: d", n)
		require.InDelta(t, o, float64(o0), 1e-5, "n %d: o", n)
	}
}
