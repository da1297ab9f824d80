package vecmath

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// GDNStepFast gives the same bits in Go, AVX2 and AVX-512 (each this CPU has), in place and not, and its state update is the exact
// mode's elementwise ScaleInto then AddScaled with the returned δ (what tape replay runs).
func TestGDNStepFast(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, n := range []int{32, 64, 256, 40} {
		src, k, q := randVec(r, n, 1), randVec(r, n, 0.1), randVec(r, n, 0.1)
		alpha, beta, v := float32(0.93), float32(0.61), float32(0.37)
		run := func(path string, inPlace bool) ([]float32, float32, float32) {
			s2, s5 := useAVX2, useAVX512
			useAVX2, useAVX512 = path != "go" && s2, path == "avx512" && s5
			defer func() { useAVX2, useAVX512 = s2, s5 }()
			S := make([]float32, n)
			from := src
			if inPlace {
				copy(S, src)
				from = S
			}
			o, d := GDNStepFast(S, from, k, q, alpha, beta, v)
			return S, o, d
		}
		S0, o0, d0 := run("go", false)
		for _, path := range []string{"go", "avx2", "avx512"} {
			for _, inPlace := range []bool{false, true} {
				S, o, d := run(path, inPlace)
				assertBits(t, S0, S, "n %d %s in place %v: state", n, path, inPlace)
				require.Equal(t, math.Float32bits(o0), math.Float32bits(o), "n %d %s: o", n, path)
				require.Equal(t, math.Float32bits(d0), math.Float32bits(d), "n %d %s: d", n, path)
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

// GDNStep4Fast gives four GDNStepFast calls' bits (state rows, o and δ), in place and not, with rows packed
// (stride n) and spread (stride > n), on the AVX-512 kernel, the AVX2 one and the fallback (each this CPU has).
func TestGDNStep4Fast(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 64))
	for _, n := range []int{32, 64, 128, 256, 40} {
		for _, stride := range []int{n, n + 32} {
			src, k, q, v := randVec(r, 3*stride+n, 1), randVec(r, n, 0.1), randVec(r, n, 0.1), randVec(r, 4, 0.5)
			alpha, beta := float32(0.93), float32(0.61)
			want := make([]float32, len(src))
			var wantOut [8]float32
			for row := range 4 {
				lo := row * stride
				wantOut[row], wantOut[4+row] = GDNStepFast(want[lo:lo+n], src[lo:lo+n], k, q, alpha, beta, v[row])
			}
			for _, path := range []string{"avx512", "avx2", "fallback"} {
				for _, inPlace := range []bool{false, true} {
					s2, s5 := useAVX2, useAVX512
					useAVX2, useAVX512 = path != "fallback" && s2, path == "avx512" && s5
					S := make([]float32, len(src))
					from := src
					if inPlace {
						copy(S, src)
						from = S
					}
					before := append([]float32(nil), S...)
					out := GDNStep4Fast(S, from, k, q, n, stride, alpha, beta, v)
					useAVX2, useAVX512 = s2, s5
					for row := range 4 {
						lo := row * stride
						assertBits(t, want[lo:lo+n], S[lo:lo+n], "n %d stride %d %s in place %v: row %d", n, stride, path, inPlace, row)
						if row < 3 {
							assertBits(t, before[lo+n:lo+stride], S[lo+n:lo+stride], "n %d stride %d %s: the gap after row %d is untouched", n, stride, path, row)
						}
					}
					for i := range out {
						require.Equal(t, math.Float32bits(wantOut[i]), math.Float32bits(out[i]), "n %d stride %d %s in place %v: out[%d]", n, stride, path, inPlace, i)
					}
				}
			}
		}
	}
}

// GDNRunFast gives, over a block of T steps, the bits of GDNStep4Fast run step after step: the rows' final
// state, every step's read-outs and innovations; on rows of 64 and 128 values, in place and not, with and
// without innovations recorded, on strided inputs, T from 1 to 19. Without AVX-512 GDNRunRows is 0.
func TestGDNRunFast(t *testing.T) {
	r := rand.New(rand.NewPCG(65, 66))
	for _, n := range []int{64, 128} {
		rows := GDNRunRows(n)
		if !useAVX512 {
			require.Zero(t, rows, "no AVX-512: the caller steps")
			continue
		}
		require.Positive(t, rows)
		for _, T := range []int{1, 2, 3, 7, 16, 19} {
			for _, inPlace := range []bool{false, true} {
				for _, record := range []bool{false, true} {
					kv, ab, os := 3*n+9, 5, 12
					Y := randVec(r, (T-1)*kv+2*n+4, 0.1)
					k, q, v := Y[:], Y[n:], Y[2*n:]
					for t0 := range T {
						for i := range 4 {
							v[t0*kv+i] *= 5 // values of the size of v, not of k̂
						}
					}
					alpha, beta := randVec(r, (T-1)*ab+1, 0.05), randVec(r, (T-1)*ab+1, 0.3)
					for i := range alpha {
						alpha[i] += 0.9
						beta[i] = float32(math.Abs(float64(beta[i])))
					}
					src := randVec(r, 4*n, 1)
					// The reference: one GDNStep4Fast a step (four rows; the kernel runs the first rows), the
					// first from src, the rest in place.
					want := make([]float32, 4*n)
					wantO, wantD := make([]float32, (T-1)*os+4), make([]float32, (T-1)*os+4)
					from := src
					for t0 := range T {
						out := GDNStep4Fast(want, from, k[t0*kv:], q[t0*kv:], n, n, alpha[t0*ab], beta[t0*ab], v[t0*kv:])
						copy(wantO[t0*os:t0*os+rows], out[:rows])
						copy(wantD[t0*os:t0*os+rows], out[4:4+rows])
						from = want
					}
					S := make([]float32, 4*n)
					in := src
					if inPlace {
						copy(S, src)
						in = S
					}
					o := make([]float32, len(wantO))
					var d []float32
					if record {
						d = make([]float32, len(wantD))
					}
					GDNRunFast(S, in, k, q, v, kv, alpha, beta, ab, o, os, d, os, n, T)
					what := fmt.Sprintf("n %d T %d in place %v record %v", n, T, inPlace, record)
					assertBits(t, want[:rows*n], S[:rows*n], "%s: state", what)
					if !inPlace {
						assertBits(t, make([]float32, (4-rows)*n), S[rows*n:], "%s: rows past the kernel's untouched", what)
					}
					assertBits(t, wantO, o, "%s: read-outs", what)
					if record {
						assertBits(t, wantD, d, "%s: innovations", what)
					}
				}
			}
		}
	}
}
