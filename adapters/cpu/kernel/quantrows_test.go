package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// withRowsMin runs f with quantRowsMin set to n.
func withRowsMin(n int, f func()) {
	saved := quantRowsMin
	defer func() { quantRowsMin = saved }()
	quantRowsMin = n
	f()
}

// The multi-row AVX2 kernels give every row exactly the bits of its one-row product (the decode path:
// dotQ4RowAVX2, dotQ8RowAVX2, dotCodesRowAVX2), for every width and group size, 1 to 34 rows, several blocks
// along In (the last one shorter), worker counts and inputs full of signed zeros; and the two-row kernels they
// replace agree with both.
func TestQuantRowsMatchOneRow(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2+FMA on this CPU: the multi-row AVX2 kernels do not run")
	}
	saved512 := useAVX512
	defer func() { useAVX512 = saved512 }()
	useAVX512 = false
	r := rand.New(rand.NewPCG(41, 42))
	// 1344 inputs: 42 groups of 32 or 21 of 64, several blocks for most row counts; 1408: 11 groups of 128.
	for _, shape := range [][2]int{{13, 512}, {5, 1344}, {3, 1408}, {1, 128}} {
		out, in := shape[0], shape[1]
		x := randVec(r, 34*in, 1)
		for i := range x {
			switch i % 7 {
			case 0:
				x[i] = 0
			case 3:
				x[i] = float32(math.Copysign(0, -1))
			}
		}
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, g := range []int{32, 64, 128} {
				if in%g != 0 {
					continue
				}
				q, _ := quantFixture(r, out, in, bits, g)
				l, err := NewQuant(out, in, q)
				require.NoError(t, err)
				name := fmt.Sprintf("in %d q%d g%d", in, bits, g)
				// The one-row product of every row, computed alone.
				one := make([]float32, 34*out)
				for row := range 34 {
					l.Forward(one[row*out:(row+1)*out], x[row*in:(row+1)*in], 1)
				}
				for _, threads := range []int{1, 3} {
					l.Pool = NewPool(threads)
					for rows := 1; rows <= 34; rows++ {
						got := make([]float32, rows*out)
						withRowsMin(1, func() { l.Forward(got, x, rows) })
						assertBits(t, one[:rows*out], got, "%s threads %d rows %d", name, threads, rows)
						if rows <= 4 {
							pairs := make([]float32, rows*out)
							withRowsMin(1<<30, func() { l.Forward(pairs, x, rows) })
							assertBits(t, one[:rows*out], pairs, "%s threads %d rows %d, two-row kernels", name, threads, rows)
						}
					}
				}
			}
		}
	}
}

// The f32 and bf16 products of 1 to 34 rows (the 6 × 2 and 4 × 2 AVX2 tiles, the two- and one-row kernels for
// the rest) give every row the bits of its one-row product, with tiles (In a multiple of 32) and without.
func TestDenseRowsMatchOneRow(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(43, 44))
		for _, shape := range [][2]int{{7, 320}, {5, 96}, {3, 70}} {
			out, in := shape[0], shape[1]
			w := randVec(r, out*in, 1)
			bf := make([]uint16, len(w))
			for i, v := range w {
				bf[i] = F32ToBF16(v)
			}
			lf, err := NewF32(out, in, w)
			require.NoError(t, err)
			lb, err := NewBF16(out, in, bf)
			require.NoError(t, err)
			x := randVec(r, 34*in, 1)
			for _, l := range []*Linear{lf, lb} {
				one := make([]float32, 34*out)
				for row := range 34 {
					l.Forward(one[row*out:(row+1)*out], x[row*in:(row+1)*in], 1)
				}
				for _, threads := range []int{1, 3} {
					l.Pool = NewPool(threads)
					for rows := 1; rows <= 34; rows++ {
						got := make([]float32, rows*out)
						l.Forward(got, x, rows)
						assertBits(t, one[:rows*out], got, "%v in %d threads %d rows %d", l.Format(), in, threads, rows)
					}
				}
			}
		}
	})
}
