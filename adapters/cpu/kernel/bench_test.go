package kernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkLinear measures x·Wᵀ for decode (1 row) and verify (16 rows) shapes in every storage format.
// GB/s counts weight bytes read once per call; GFLOP/s counts 2·rows·out·in.
//
//	go test -run '^$' -bench Linear -benchtime 20x ./adapters/cpu/kernel
func BenchmarkLinear(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, sz := range [][2]int{{1024, 1024}, {4096, 1024}, {1024, 4096}} {
		out, in := sz[0], sz[1]
		w := randVec(r, out*in, 1)
		bf := make([]uint16, len(w))
		for i, v := range w {
			bf[i] = F32ToBF16(v)
		}
		q, _ := quantFixture(r, out, in, 4, 64)
		q8, _ := quantFixture(r, out, in, 8, 64)
		lf, _ := NewF32(out, in, w)
		lb, _ := NewBF16(out, in, bf)
		lq, _ := NewQuant(out, in, q)
		lq8, _ := NewQuant(out, in, q8)
		for _, l := range []*Linear{lf, lb, lq, lq8} {
			l.Pool = NewPool(0)
			name := l.Format().String()
			if l.q != nil {
				name = fmt.Sprintf("q%d", l.q.Bits)
			}
			for _, rows := range []int{1, 16} {
				x := randVec(r, rows*in, 1)
				dst := make([]float32, rows*out)
				b.Run(fmt.Sprintf("%s/%dx%d/rows=%d", name, out, in, rows), func(b *testing.B) {
					for b.Loop() {
						l.Forward(dst, x, rows)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(l.Bytes())/sec/1e9, "GB/s")
					b.ReportMetric(2*float64(rows*out*in)/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkMemBandwidth streams a 256 MiB f32 buffer through a vectorised sum: the machine's practical read
// bandwidth on all workers, the ceiling for decode (1-row) products.
func BenchmarkMemBandwidth(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates 512 MiB")
	}
	const n = 64 << 20
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = 1
	}
	ones := make([]float32, n)
	copy(ones, buf)
	p := NewPool(0)
	part := make([]float32, p.Threads())
	for b.Loop() {
		p.For(n, n/p.Threads(), func(lo, hi int) {
			part[lo/(n/p.Threads())] = Dot(buf[lo:hi], ones[lo:hi])
		})
	}
	b.ReportMetric(float64(2*4*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkPeakF32 runs cache-resident dot products on all workers: the practical f32 FMA ceiling of vek32.Dot.
func BenchmarkPeakF32(b *testing.B) {
	p := NewPool(0)
	const n, reps = 1024, 4096
	a := randVec(rand.New(rand.NewPCG(2, 2)), n, 1)
	sink := make([]float32, p.Threads()*reps)
	for b.Loop() {
		p.For(p.Threads()*reps, reps, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				sink[i] = Dot(a, a)
			}
		})
	}
	b.ReportMetric(2*float64(n*reps*p.Threads())*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
