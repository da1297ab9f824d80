//go:build linux && amd64 && !purego

package kernel

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestQuantRowsStayInBounds runs the multi-row AVX2 kernels (every width and group size, 1 to 33 rows) on
// weights, inputs and outputs placed against inaccessible pages and checks each row against its one-row
// product: the decode loads and the prefetches of the next weight row must stay inside the codes, scales and
// biases (which may end a read-only mmap).
func TestQuantRowsStayInBounds(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2+FMA on this CPU: the multi-row AVX2 kernels do not run")
	}
	saved512 := useAVX512
	defer func() { useAVX512 = saved512 }()
	useAVX512 = false
	r := rand.New(rand.NewPCG(9, 10))
	for _, tail := range []bool{true, false} {
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, g := range []int{32, 64, 128} {
				for _, shape := range [][2]int{{1, g}, {2, g}, {3, 2 * g}, {13, 3 * g}} {
					out, in := shape[0], shape[1]
					q, _ := quantFixture(r, out, in, bits, g)
					cb := guarded(t, 4*len(q.Codes), tail)
					codes := unsafe.Slice((*uint32)(unsafe.Pointer(&cb[0])), len(q.Codes))
					copy(codes, q.Codes)
					q.Codes = codes
					q.Scales, q.Biases = guardedF32(t, q.Scales, tail), guardedF32(t, q.Biases, tail)
					l, err := NewQuant(out, in, q)
					require.NoError(t, err)
					l.Pool = NewPool(2)
					for _, rows := range []int{1, 2, 5, 8, 13, 16, 17, 33} {
						x := make([]float32, rows*in)
						for i := range x {
							x[i] = r.Float32()*2 - 1
						}
						x = guardedF32(t, x, tail)
						a := guardedF32(t, make([]float32, rows*out), tail)
						withRowsMin(1, func() { l.Forward(a, x, rows) })
						for row := range rows {
							one := make([]float32, out)
							l.Forward(one, x[row*in:(row+1)*in], 1)
							assertBits(t, one, a[row*out:(row+1)*out], "tail %v q%d g%d out %d in %d rows %d row %d", tail, bits, g, out, in, rows, row)
						}
					}
				}
			}
		}
	}
}

// TestDenseTilesStayInBounds runs the f32 and bf16 products (the 6 × 2 and 4 × 2 AVX2 tiles) on weights,
// inputs and outputs placed against inaccessible pages and checks each row against its one-row product.
func TestDenseTilesStayInBounds(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2+FMA on this CPU: the AVX2 tiles do not run")
	}
	saved512 := useAVX512
	defer func() { useAVX512 = saved512 }()
	useAVX512 = false
	r := rand.New(rand.NewPCG(11, 12))
	for _, tail := range []bool{true, false} {
		for _, shape := range [][2]int{{2, 32}, {3, 64}, {5, 96}} {
			out, in := shape[0], shape[1]
			w := guardedF32(t, randVec(r, out*in, 1), tail)
			bb := guarded(t, 2*out*in, tail)
			bf := unsafe.Slice((*uint16)(unsafe.Pointer(&bb[0])), out*in)
			for i, v := range randVec(r, out*in, 1) {
				bf[i] = F32ToBF16(v)
			}
			lf, err := NewF32(out, in, w)
			require.NoError(t, err)
			lb, err := NewBF16(out, in, bf)
			require.NoError(t, err)
			for _, l := range []*Linear{lf, lb} {
				l.Pool = NewPool(2)
				for _, rows := range []int{4, 6, 8, 10, 16, 17, 33} {
					x := guardedF32(t, randVec(r, rows*in, 1), tail)
					a := guardedF32(t, make([]float32, rows*out), tail)
					l.Forward(a, x, rows)
					for row := range rows {
						one := make([]float32, out)
						l.Forward(one, x[row*in:(row+1)*in], 1)
						assertBits(t, one, a[row*out:(row+1)*out], "%v tail %v out %d in %d rows %d row %d", l.Format(), tail, out, in, rows, row)
					}
				}
			}
		}
	}
}
