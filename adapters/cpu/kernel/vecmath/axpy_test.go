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

// DecayRank1 gives, element by element, the bits of ScaleInto then AddScaled row by row (the tape replay's two
// passes it replaces), in place and into another state, on the AVX-512 and AVX2 loops and the portable path,
// for head sizes the loops take (multiples of 16 and 8) and others.
func TestDecayRank1Bits(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 54))
	saved, saved512 := useAVX2, useAVX512
	defer func() { useAVX2, useAVX512 = saved, saved512 }()
	// The AVX-512 loop where the CPU has it, the AVX2 loop, the portable path.
	for _, avx := range []struct{ avx2, avx512 bool }{{saved, saved512}, {saved, false}, {false, false}} {
		useAVX2, useAVX512 = avx.avx2, avx.avx512
		for _, dk := range []int{8, 16, 24, 48, 64, 128, 7, 33} {
			for _, rows := range []int{1, 3, 64} {
				for _, inPlace := range []bool{false, true} {
					S0, khat, delta := randVec(r, rows*dk, 2), randVec(r, dk, 1), randVec(r, rows, 1)
					alpha := r.Float32()
					want := make([]float32, rows*dk)
					ScaleInto(want, S0, alpha)
					tmp := make([]float32, dk)
					for i, d := range delta {
						AddScaled(want[i*dk:(i+1)*dk], khat, tmp, d)
					}
					got := make([]float32, rows*dk)
					if inPlace {
						got = append([]float32(nil), S0...)
						DecayRank1(got, got, alpha, khat, delta)
					} else {
						DecayRank1(got, S0, alpha, khat, delta)
					}
					assertBits(t, want, got, "avx %v dk %d rows %d in place %v", avx, dk, rows, inPlace)
				}
			}
		}
	}
}
