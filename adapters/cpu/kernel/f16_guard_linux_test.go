//go:build linux && amd64 && !purego

package kernel

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestF16KernelsStayInBounds runs the F16 products (dotF16AVX2, the AVX2 6 × 2 and 4 × 2 tiles, the AVX-512
// 4 × 4 tile where the CPU has it, the widening) on weights,
// inputs and outputs placed against inaccessible pages and checks the bits against the F32 Linear over the
// widened weights: the 16-byte VCVTPH2PS loads and the tails must stay inside the weights (which may end a
// read-only mmap).
func TestF16KernelsStayInBounds(t *testing.T) {
	if !useF16C {
		t.Skip("no AVX2+FMA+F16C on this CPU: the f16 kernels do not run")
	}
	saved512 := useAVX512
	defer func() { useAVX512 = saved512 }()
	r := rand.New(rand.NewPCG(37, 19))
	for _, avx512 := range []bool{false, saved512} {
		useAVX512 = avx512
		testF16InBounds(t, r)
	}
}

func testF16InBounds(t *testing.T, r *rand.Rand) {
	for _, tail := range []bool{true, false} {
		for _, shape := range [][2]int{{1, 1}, {2, 7}, {3, 33}, {5, 96}, {9, 64}, {13, 100}} {
			out, in := shape[0], shape[1]
			h, w := f16Fixture(r, out, in)
			hb := guarded(t, 2*out*in, tail)
			hg := unsafe.Slice((*uint16)(unsafe.Pointer(&hb[0])), out*in)
			copy(hg, h)
			lh, err := NewF16(out, in, hg)
			require.NoError(t, err)
			lf, err := NewF32(out, in, w)
			require.NoError(t, err)
			lh.Pool = NewPool(2)
			for _, rows := range []int{1, 2, 5, 16, 17, 33} {
				x := guardedF32(t, randVec(r, rows*in, 1), tail)
				want := make([]float32, rows*out)
				lf.Forward(want, x, rows)
				got := guardedF32(t, make([]float32, rows*out), tail)
				lh.Forward(got, x, rows)
				assertBits(t, want, got, "avx512 %v tail %v out %d in %d rows %d", useAVX512, tail, out, in, rows)
			}
			wide := guardedF32(t, make([]float32, out*in), tail)
			WidenF16(wide, hg)
			assertBits(t, w, wide, "widen: tail %v out %d in %d", tail, out, in)
		}
	}
}
