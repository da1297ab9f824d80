//go:build linux && amd64 && !purego

package vecmath

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

// The fast Gated DeltaNet steps (one row; four, on the AVX-512 kernel and on the AVX2 one) read and write only
// their rows, k, q and v: everything placed against inaccessible pages, the bits as the portable step's.
func TestGDNStepsStayInBounds(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU: the steps run in Go")
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, tail := range []bool{true, false} {
		for _, n := range []int{32, 64, 256} {
			src0, k0, q0, v0 := randVec(r, 4*n, 1), randVec(r, n, 0.1), randVec(r, n, 0.1), randVec(r, 4, 0.5)
			want := make([]float32, 4*n)
			var wantOut [8]float32
			s2, s5 := useAVX2, useAVX512
			useAVX2, useAVX512 = false, false
			for row := range 4 {
				wantOut[row], wantOut[4+row] = GDNStepFast(want[row*n:(row+1)*n], src0[row*n:(row+1)*n], k0, q0, 0.9, 0.6, v0[row])
			}
			useAVX2, useAVX512 = s2, s5
			src, k, q, v := guardedF32(t, src0, tail), guardedF32(t, k0, tail), guardedF32(t, q0, tail), guardedF32(t, v0, tail)
			for _, avx512 := range []bool{true, false} {
				useAVX512 = avx512 && s5
				S := guardedF32(t, make([]float32, 4*n), tail)
				out := GDNStep4Fast(S, src, k, q, n, n, 0.9, 0.6, v)
				useAVX512 = s5
				assertBits(t, want, S, "four rows, n %d tail %v avx512 %v", n, tail, avx512)
				assertBits(t, wantOut[:], out[:], "four rows' o and δ, n %d tail %v avx512 %v", n, tail, avx512)
			}
			S1 := guardedF32(t, make([]float32, n), tail)
			o, d := GDNStepFast(S1, src[3*n:], k, q, 0.9, 0.6, v0[3])
			assertBits(t, want[3*n:], S1, "one row, n %d tail %v", n, tail)
			assertBits(t, wantOut[3:4], []float32{o}, "one row's o")
			assertBits(t, wantOut[7:8], []float32{d}, "one row's δ")
		}
	}
}

// The block kernels (GDNRunFast: rows in registers through T steps) read and write only the rows, each step's
// k, q, v, α and β, and each step's read-outs and innovations: everything placed exactly against inaccessible
// pages (the last step's inputs and outputs at the very end), the bits as GDNStep4Fast's step after step.
func TestGDNRunStaysInBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{64, 128} {
		rows := GDNRunRows(n)
		if rows == 0 {
			t.Skipf("no AVX-512 on this CPU: no block kernel for %d-value rows", n)
		}
		for _, tail := range []bool{true, false} {
			const T, kv, ab, os = 5, 3, 2, 6 // strides in floats: the steps' inputs interleaved as in a block
			Y := randVec(r, (T-1)*kv*n+n, 0.1)
			src0 := randVec(r, rows*n, 1)
			vals := randVec(r, (T-1)*kv*n+rows, 0.5) // step t's values at t·kv·n, the stride k and q have
			alpha0, beta0 := randVec(r, (T-1)*ab+1, 0.05), randVec(r, (T-1)*ab+1, 0.3)
			for i := range alpha0 {
				alpha0[i] += 0.9
			}
			want := make([]float32, 4*n)
			copy(want, src0)
			wantO, wantD := make([]float32, (T-1)*os+rows), make([]float32, (T-1)*os+rows)
			vv := make([]float32, 4)
			for t0 := range T {
				copy(vv, vals[t0*kv*n:t0*kv*n+rows])
				out := GDNStep4Fast(want, want, Y[t0*kv*n:], Y[t0*kv*n:], n, n, alpha0[t0*ab], beta0[t0*ab], vv)
				copy(wantO[t0*os:], out[:rows])
				copy(wantD[t0*os:], out[4:4+rows])
			}
			k := guardedF32(t, Y, tail)
			src, v := guardedF32(t, src0, tail), guardedF32(t, vals, tail)
			alpha, beta := guardedF32(t, alpha0, tail), guardedF32(t, beta0, tail)
			S := guardedF32(t, make([]float32, rows*n), tail)
			o, d := guardedF32(t, make([]float32, len(wantO)), tail), guardedF32(t, make([]float32, len(wantD)), tail)
			GDNRunFast(S, src, k, k, v, kv*n, alpha, beta, ab, o, os, d, os, n, T)
			assertBits(t, want[:rows*n], S, "n %d tail %v: state", n, tail)
			assertBits(t, wantO, o, "n %d tail %v: read-outs", n, tail)
			assertBits(t, wantD, d, "n %d tail %v: innovations", n, tail)
		}
	}
}

// The attention kernels on keys, values, queries, scores and outputs placed against inaccessible pages give
// their Go form's bits.
func TestAttnKernelsStayInBounds(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU: the attention kernels do not run here")
	}
	r := rand.New(rand.NewPCG(73, 74))
	for _, tail := range []bool{true, false} {
		for _, d := range []int{16, 64, 256} {
			for _, nq := range []int{1, 3} {
				for _, n := range []int{1, 5} {
					stride := d + 16
					kv := (n-1)*stride + d
					k, v := guardedF32(t, randVec(r, kv, 1), tail), guardedF32(t, randVec(r, kv, 1), tail)
					q := guardedF32(t, randVec(r, nq*d, 1), tail)
					want := make([]float32, nq*n)
					attnScoresGo(want, n, q, nq, k, stride, n, d, 0.5)
					got := guardedF32(t, make([]float32, nq*n), tail)
					AttnScores(got, n, q, nq, k, stride, n, d, 0.5)
					assertBits(t, want, got, "scores tail %v d %d nq %d n %d", tail, d, nq, n)
					wo := make([]float32, nq*d)
					attnValuesGo(wo, want, n, nq, v, stride, n, d)
					o := guardedF32(t, make([]float32, nq*d), tail)
					AttnValues(o, got, n, nq, v, stride, n, d)
					assertBits(t, wo, o, "values tail %v d %d nq %d n %d", tail, d, nq, n)
				}
			}
		}
	}
}

// SoftmaxFast's AVX-512 pass (subtraction and exp fused) on rows placed against inaccessible pages gives the
// bits it gives in ordinary memory.
func TestSoftmaxFastStaysInBounds(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU: the fused softmax pass does not run here")
	}
	r := rand.New(rand.NewPCG(75, 76))
	for _, tail := range []bool{true, false} {
		for _, n := range []int{16, 17, 32, 33, 466} {
			x := randVec(r, n, 30)
			want := append([]float32(nil), x...)
			SoftmaxFast(want)
			got := guardedF32(t, x, tail)
			SoftmaxFast(got)
			assertBits(t, want, got, "n %d tail %v", n, tail)
		}
	}
}

// DecayRank1's assembly loop on states, keys and innovations placed against inaccessible pages gives the bits
// it gives in ordinary memory.
func TestDecayRank1StaysInBounds(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this CPU: DecayRank1 runs in Go")
	}
	r := rand.New(rand.NewPCG(77, 78))
	saved512 := useAVX512
	defer func() { useAVX512 = saved512 }()
	for _, avx512 := range []bool{saved512, false} {
		useAVX512 = avx512
		for _, tail := range []bool{true, false} {
			for _, dk := range []int{8, 16, 48, 64} {
				rows := 5
				S0, khat, delta := randVec(r, rows*dk, 2), randVec(r, dk, 1), randVec(r, rows, 1)
				want := make([]float32, rows*dk)
				DecayRank1(want, S0, 0.7, khat, delta)
				S := guardedF32(t, make([]float32, rows*dk), tail)
				DecayRank1(S, guardedF32(t, S0, tail), 0.7, guardedF32(t, khat, tail), guardedF32(t, delta, tail))
				assertBits(t, want, S, "avx512 %v dk %d tail %v", avx512, dk, tail)
			}
		}
	}
}
