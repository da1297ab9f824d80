package vecmath

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/viterin/vek/vek32"
)

// The AVX-512 attention kernels give attnScoresGo's and attnValuesGo's bits for every head size, head count,
// key count and stride; AttnValues is AddScaled key by key; SoftmaxFast stays within float32 rounding of
// Softmax.
func TestAttnKernelsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for d := 16; d <= 256; d += 16 {
		for _, nq := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9} {
			for _, n := range []int{1, 7, 33} {
				stride := 2*d + 16
				scale := float32(1 / math.Sqrt(float64(d))) // not a power of two: the scale's one rounding is seen
				q, k, v := randVec(r, nq*d, 1), randVec(r, n*stride, 1), randVec(r, n*stride, 1)
				lds := n + 3
				want, got := make([]float32, nq*lds), make([]float32, nq*lds)
				attnScoresGo(want, lds, q, nq, k, stride, n, d, scale)
				o0 := randVec(r, nq*d, 1)
				wantO, gotO := append([]float32(nil), o0...), append([]float32(nil), o0...)
				attnValuesGo(wantO, want, lds, nq, v, stride, n, d)
				// AddScaled, key by key, is the same arithmetic.
				add := append([]float32(nil), o0...)
				tmp := make([]float32, d)
				for i := range nq {
					for p := range n {
						AddScaled(add[i*d:(i+1)*d], v[p*stride:p*stride+d], tmp, want[i*lds+p])
					}
				}
				assertBits(t, add, wantO, "d %d nq %d n %d: AddScaled", d, nq, n)
				if !useAVX512 {
					continue
				}
				AttnScores(got, lds, q, nq, k, stride, n, d, scale)
				assertBits(t, want, got, "scores d %d nq %d n %d", d, nq, n)
				AttnValues(gotO, want, lds, nq, v, stride, n, d)
				assertBits(t, wantO, gotO, "values d %d nq %d n %d", d, nq, n)
			}
		}
	}
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU: only the Go attention ran (the fast mode keeps the exact attention here)")
	}
}

func TestSoftmaxFast(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 64))
	x := randVec(r, 300, 20)
	x[7] = -1e4 // far below the max: exp underflows to (nearly) zero
	a, b := append([]float32(nil), x...), append([]float32(nil), x...)
	Softmax(a)
	SoftmaxFast(b)
	var sum float64
	for i := range a {
		require.InDelta(t, a[i], b[i], 1e-6+1e-5*float64(a[i]), "element %d", i)
		sum += float64(b[i])
	}
	require.InDelta(t, 1, sum, 1e-5)
	require.False(t, math.IsNaN(float64(b[0])))
}

// SoftmaxFast's vector exp (AVX2, and AVX-512 fused with the subtraction) gives the bits of fastExpNeg
// element by element, on every path the CPU has, whatever the row's length and its range (past the clamps).
func TestSoftmaxFastMatchesScalar(t *testing.T) {
	s5 := useAVX512
	defer func() { useAVX512 = s5 }()
	for _, avx512 := range []bool{false, true} {
		if avx512 && !s5 {
			t.Log("no AVX-512 on this CPU: its softmax path was not run")
			continue
		}
		useAVX512 = avx512
		t.Run(fmt.Sprint("avx512=", avx512), testSoftmaxFastMatchesScalar)
	}
}

func testSoftmaxFastMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(65, 66))
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 64, 301, 466} {
		for _, scale := range []float32{30, 300} {
			x := randVec(r, n, scale)
			got := append([]float32(nil), x...)
			SoftmaxFast(got)
			m := x[0]
			for _, v := range x {
				m = max(m, v)
			}
			want := make([]float32, n)
			for j, v := range x {
				want[j] = fastExpNeg(m - v)
			}
			inv := 1 / vek32.Sum(want)
			for j := range want {
				want[j] *= inv
			}
			assertBits(t, want, got, "n %d scale %v", n, scale)
		}
	}
	// A row of −Inf is NaN, as in Softmax, whatever vek32's max starts from.
	for _, n := range []int{3, 8, 20} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Inf(-1))
		}
		SoftmaxFast(x)
		for i, v := range x {
			require.True(t, math.IsNaN(float64(v)), "n %d element %d: %v", n, i, v)
		}
	}
}

// BenchmarkAttnUnit times the fast attention's three kernels on one work unit as a gocoder-sized model runs it
// at a real context: the four query heads of one KV group (head dimension 64) over 466 cached keys, rows 128
// floats apart (two KV heads): the scores, their softmax per head, the weighted sum of the values.
//
//	go test -run '^$' -bench AttnUnit ./adapters/cpu/kernel/vecmath
func BenchmarkAttnUnit(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512 on this CPU: the fast attention kernels do not run here")
	}
	const n, d, nh, stride = 466, 64, 4, 128
	r := rand.New(rand.NewPCG(81, 82))
	k, v, q := randVec(r, n*stride, 1), randVec(r, n*stride, 1), randVec(r, nh*d, 1)
	sc, o := make([]float32, nh*n), make([]float32, nh*d)
	b.Run("scores", func(b *testing.B) {
		for b.Loop() {
			AttnScores(sc, n, q, nh, k, stride, n, d, 0.125)
		}
	})
	b.Run("softmax", func(b *testing.B) {
		AttnScores(sc, n, q, nh, k, stride, n, d, 0.125)
		x := make([]float32, len(sc))
		for b.Loop() {
			copy(x, sc)
			for h := range nh {
				SoftmaxFast(x[h*n : (h+1)*n])
			}
		}
	})
	b.Run("values", func(b *testing.B) {
		for b.Loop() {
			AttnValues(o, sc, n, nh, v, stride, n, d)
		}
	})
}
