//go:build linux && amd64 && !purego

package kernel

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// guarded returns n bytes that end right before (tail) or start right after (!tail) an inaccessible page, so a
// kernel reading or writing past either end faults instead of passing silently.
func guarded(t *testing.T, n int, tail bool) []byte {
	t.Helper()
	ps := syscall.Getpagesize()
	np := (n+ps-1)/ps + 2
	m, err := syscall.Mmap(-1, 0, np*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	require.NoError(t, syscall.Mprotect(m[:ps], syscall.PROT_NONE))
	require.NoError(t, syscall.Mprotect(m[(np-1)*ps:], syscall.PROT_NONE))
	if tail {
		return m[(np-1)*ps-n : (np-1)*ps]
	}
	return m[ps : ps+n]
}

func guardedF32(t *testing.T, src []float32, tail bool) []float32 {
	b := guarded(t, 4*len(src), tail)
	f := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(src))
	copy(f, src)
	return f
}

// TestQuantKernelsStayInBounds runs the AVX-512 quantized products (every width, both group sizes of the
// 16-row kernels, 1 to 33 rows) on weights, inputs and outputs placed against inaccessible pages, and checks
// the bits against the AVX2 kernels: the kernels that read 8 or 16 bytes at a time, decode the next group
// ahead or prefetch must stay inside the codes (which may end a read-only mmap).
func TestQuantKernelsStayInBounds(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	defer func() { useAVX512 = true }()
	r := rand.New(rand.NewPCG(5, 6))
	for _, tail := range []bool{true, false} {
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, g := range []int{32, 64, 128} {
				// {2, g} and {3, g} with groups of 32: 2-bit rows of 8 bytes, where a decode step's 16-byte read
				// spans two rows.
				for _, shape := range [][2]int{{1, g}, {2, g}, {3, g}, {3, 2 * g}, {13, 3 * g}} {
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
						useAVX512 = true
						a := guardedF32(t, make([]float32, rows*out), tail)
						l.Forward(a, x, rows)
						useAVX512 = false
						b := make([]float32, rows*out)
						l.Forward(b, x, rows)
						assertBits(t, b, a, "tail %v q%d g%d out %d in %d rows %d", tail, bits, g, out, in, rows)
					}
				}
			}
		}
	}
}

// TestFastKernelsStayInBounds runs the fast-mode assembly kernels (VNNI and AVX2, each this CPU has; every
// width and group size, full and partial chunks, 1 to 33 rows) on weights, inputs and outputs placed against
// inaccessible pages, and checks the bits against the portable path: the 32- and 64-byte code loads, the masked
// loads of a partial chunk and of the last scales and biases, and the prefetches must stay inside the codes
// (which may end a read-only mmap).
func TestFastKernelsStayInBounds(t *testing.T) {
	paths := fastAsmPaths()
	if len(paths) == 0 {
		t.Skip("neither AVX512-VNNI nor AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, tail := range []bool{true, false} {
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, g := range []int{32, 64, 128} {
				for _, shape := range [][2]int{{1, g}, {2, g}, {3, 2 * g}, {5, 3 * g}, {3, 128 + g}} {
					out, in := shape[0], shape[1]
					q, _ := quantFixture(r, out, in, bits, g)
					cb := guarded(t, 4*len(q.Codes), tail)
					codes := unsafe.Slice((*uint32)(unsafe.Pointer(&cb[0])), len(q.Codes))
					copy(codes, q.Codes)
					q.Codes = codes
					q.Scales, q.Biases = guardedF32(t, q.Scales, tail), guardedF32(t, q.Biases, tail)
					l, err := NewQuant(out, in, q)
					require.NoError(t, err)
					l.Pool = NewPoolMode(2, ModeFast)
					for _, rows := range []int{1, 2, 5, 8, 13, 16, 17, 33} {
						x := make([]float32, rows*in)
						for i := range x {
							x[i] = r.Float32()*2 - 1
						}
						x = guardedF32(t, x, tail)
						b := make([]float32, rows*out)
						withFastPath(fastGo, func() { l.Forward(b, x, rows) })
						for _, path := range paths {
							a := guardedF32(t, make([]float32, rows*out), tail)
							withFastPath(path, func() { l.Forward(a, x, rows) })
							assertBits(t, b, a, "%s tail %v q%d g%d out %d in %d rows %d", path, tail, bits, g, out, in, rows)
						}
					}
				}
			}
		}
	}
}
