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
