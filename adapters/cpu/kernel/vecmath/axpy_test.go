package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// AddScaled gives dst[j] + float32(a·x[j]) (the product rounded, never fused) for every length, on the
// assembly loop and the portable path alike.
func TestAddScaledBits(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	for _, avx := range []bool{saved, false} {
		useAVX2 = avx
		for n := 0; n <= 300; n += 1 + n/16 {
			x, d := randVec(r, n, 3), randVec(r, n, 3)
			a := r.Float32()*4 - 2
			got := append([]float32(nil), d...)
			AddScaled(got, x, make([]float32, n), a)
			for j := range n {
				p := float32(a * x[j])
				require.Equal(t, math.Float32bits(d[j]+p), math.Float32bits(got[j]), "avx %v n %d j %d", avx, n, j)
			}
		}
	}
}
