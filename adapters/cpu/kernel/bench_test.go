package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/higgs-go/higgs/adapters/cpu/kernel/machine"
)

// benchLinears builds f32, bf16, f16, q4 and q8 Linears of one shape.
func benchLinears(r *rand.Rand, out, in int) map[string]*Linear {
	w := randVec(r, out*in, 1)
	bf := make([]uint16, len(w))
	for i, v := range w {
		bf[i] = F32ToBF16(v)
	}
	q, _ := quantFixture(r, out, in, 4, 64)
	q8, _ := quantFixture(r, out, in, 8, 64)
	q3, _ := quantFixture(r, out, in, 3, 64)
	q6, _ := quantFixture(r, out, in, 6, 64)
	lf, _ := NewF32(out, in, w)
	lb, _ := NewBF16(out, in, bf)
	hf, _ := f16Fixture(r, out, in)
	lh, _ := NewF16(out, in, hf)
	lq, _ := NewQuant(out, in, q)
	lq8, _ := NewQuant(out, in, q8)
	lq3, _ := NewQuant(out, in, q3)
	lq6, _ := NewQuant(out, in, q6)
	fast, fast8, fast3 := *lq, *lq8, *lq3
	return map[string]*Linear{"f32": lf, "bf16": lb, "f16": lh, "q4": lq, "q8": lq8, "q3": lq3, "q6": lq6, "q4fast": &fast,
		"q8fast": &fast8, "q3fast": &fast3}
}

// benchFormats names the benchmarked weight formats (MLX affine q3/q4/q6/q8 with groups of 64); the fast ones
// run ModeFast kernels.
var benchFormats = []string{"f32", "bf16", "f16", "q4", "q8", "q3", "q6", "q4fast", "q8fast", "q3fast"}

// benchPool returns a pool of all workers with the kernel mode the format name asks for.
func benchPool(name string) *Pool {
	if strings.HasSuffix(name, "fast") {
		return NewPoolMode(0, ModeFast)
	}
	return NewPool(0)
}

// BenchmarkLinear measures x·Wᵀ for decode (1 row) and verify (16 rows) shapes in every storage format on
// cache-resident weights. GB/s counts weight bytes read once per call; GFLOP/s counts 2·rows·out·in; %peak is
// the median over iterations of GFLOP/s against an FMA burst on all workers run right after the call (ns/op
// includes that burst; GB/s and GFLOP/s use the median time of the product alone).
//
//	go test -run '^$' -bench Linear -benchtime 20x ./adapters/cpu/kernel
func BenchmarkLinear(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	sums := make([]float32, NewPool(0).Threads())
	const burst = 1 << 20
	for _, sz := range [][2]int{{1024, 1024}, {4096, 1024}, {1024, 4096}} {
		out, in := sz[0], sz[1]
		ls := benchLinears(r, out, in)
		for _, name := range benchFormats {
			l := ls[name]
			// The product and the FMA burst share one pool (of the format's mode), so its helpers stay warm as
			// they would in a forward pass.
			l.Pool = benchPool(name)
			p := l.Pool
			for _, rows := range []int{1, 16} {
				x := randVec(r, rows*in, 1)
				dst := make([]float32, rows*out)
				flops := 2 * float64(rows*out*in)
				b.Run(fmt.Sprintf("%s/%dx%d/rows=%d", name, out, in, rows), func(b *testing.B) {
					var secs, ratios []float64
					for b.Loop() {
						start := time.Now()
						l.Forward(dst, x, rows)
						sec := time.Since(start).Seconds()
						mid := time.Now()
						p.For(p.Threads(), 1, func(lo, hi int) {
							for i := lo; i < hi; i++ {
								sums[i] = machine.FMAPeak(burst)
							}
						})
						peak := float64(p.Threads()) * burst * machine.FMAPeakFlops / time.Since(mid).Seconds()
						secs, ratios = append(secs, sec), append(ratios, flops/sec/peak)
					}
					sec := median(secs)
					b.ReportMetric(float64(l.Bytes())/sec/1e9, "GB/s")
					b.ReportMetric(flops/sec/1e9, "GFLOP/s")
					b.ReportMetric(100*median(ratios), "%peak")
				})
			}
		}
	}
}

// BenchmarkDecodeStream runs products on weights far larger than the caches: rows inputs through a stack of
// 2048×2048 matrices holding at least 192 MiB (like a model's layers, each read once per token). Each iteration
// also streams a separate 192 MiB buffer and runs a register-resident FMA burst on all workers, timed apart, so
// %bw (weight bytes per second against the stream's read bandwidth) and %peak (GFLOP/s against the FMA peak)
// compare figures measured side by side. The machine may be shared, so every figure is a median over the
// iterations, and the ratios are medians of per-iteration ratios (kernel and limit measured back to back).
// us/matrix is the time for one 2048×2048 product, comparable across formats.
//
//	go test -run '^$' -bench DecodeStream -benchtime 10x -count 3 ./adapters/cpu/kernel
func BenchmarkDecodeStream(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates about 1 GiB")
	}
	const out, in, total = 2048, 2048, 192 << 20
	r := rand.New(rand.NewPCG(3, 3))
	one := benchLinears(r, out, in)
	x := randVec(r, 16*in, 1)
	dst := make([]float32, 16*out)
	lim := newSideLimits(total)
	for _, name := range benchFormats {
		// Distinct copies so every matrix comes from memory, not from the last level cache.
		var stack []*Linear
		bytes := 0
		pool := benchPool(name) // one pool for the stack, as one model's layers share one
		for bytes < total {
			l := cloneLinear(one[name])
			l.Pool = pool
			stack = append(stack, l)
			bytes += l.Bytes()
		}
		for _, rows := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/rows=%d", name, rows), func(b *testing.B) {
				var secs, bws, peaks, rbw, rpeak []float64
				flops := 2 * float64(rows*out*in*len(stack))
				for b.Loop() {
					start := time.Now()
					for _, l := range stack {
						l.Forward(dst, x, rows)
					}
					sec := time.Since(start).Seconds()
					bw, peak := lim.run()
					secs, bws, peaks = append(secs, sec), append(bws, bw), append(peaks, peak)
					rbw = append(rbw, float64(bytes)/sec/1e9/bw)
					rpeak = append(rpeak, flops/sec/1e9/peak)
				}
				sec := median(secs)
				b.ReportMetric(float64(bytes)/sec/1e9, "GB/s")
				b.ReportMetric(flops/sec/1e9, "GFLOP/s")
				b.ReportMetric(sec*1e6/float64(len(stack)), "us/matrix")
				b.ReportMetric(median(bws), "readGB/s")
				b.ReportMetric(median(peaks), "peakGFLOP/s")
				b.ReportMetric(100*median(rbw), "%bw")
				b.ReportMetric(100*median(rpeak), "%peak")
			})
		}
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[len(s)/2]
}

// sideLimits measures read bandwidth and FMA peak inside a benchmark loop, beside the kernel being measured.
type sideLimits struct {
	pool      *Pool
	buf, sums []float32
	peakIters int
}

func newSideLimits(bufBytes int) *sideLimits {
	p := NewPool(0)
	buf := make([]float32, bufBytes/4)
	for i := range buf {
		buf[i] = 1
	}
	// The burst lasts about as long as the stream (milliseconds), so a worker that starts late (its core busy
	// with another process) does not bias the peak low.
	return &sideLimits{pool: p, buf: buf, sums: make([]float32, p.Threads()), peakIters: 1 << 22}
}

// run streams the buffer once on all workers, then runs one FMA burst on all workers; it returns GB/s and
// GFLOP/s.
func (s *sideLimits) run() (bw, peak float64) {
	n, w := len(s.buf), s.pool.Threads()
	chunk := (n/w + 63) &^ 63
	start := time.Now()
	s.pool.For(n, chunk, func(lo, hi int) { s.sums[lo/chunk] = machine.StreamSum(s.buf[lo:hi]) })
	mid := time.Now()
	s.pool.For(w, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s.sums[i] = machine.FMAPeak(s.peakIters)
		}
	})
	bw = float64(4*n) / mid.Sub(start).Seconds() / 1e9
	peak = float64(w) * float64(s.peakIters) * machine.FMAPeakFlops / time.Since(mid).Seconds() / 1e9
	return bw, peak
}

// cloneLinear deep-copies a Linear's weights.
func cloneLinear(l *Linear) *Linear {
	c := *l
	switch l.Format() {
	case FormatF32:
		c.f32 = append([]float32(nil), l.f32...)
	case FormatBF16:
		c.bf16 = append([]uint16(nil), l.bf16...)
	case FormatF16:
		c.f16 = append([]uint16(nil), l.f16...)
	default:
		q := *l.q
		q.Codes = append([]uint32(nil), q.Codes...)
		q.Scales = append([]float32(nil), q.Scales...)
		q.Biases = append([]float32(nil), q.Biases...)
		c.q = &q
	}
	return &c
}

// BenchmarkQuantRows compares, on AVX2, the multi-row quantized kernels (rows) with the one- and two-row
// kernels they replace (pairs), side by side on the same weights, for the row counts of verify blocks: a stack
// of copies of one matrix (3072×1024 and 1024×3072 like a 306M model's MLP) holding 64 MiB or more, each
// read from memory once per pass as a model's layers are. One worker (a shared machine disturbs one worker
// less); min-us is the fastest pass over the stack, the least disturbed by other work; GMAC/s follows from it.
//
//	go test -run '^$' -bench QuantRows -benchtime 10x -count 3 ./adapters/cpu/kernel
func BenchmarkQuantRows(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates 64 MiB or more per format")
	}
	if !useAVX2 || useAVX512 {
		b.Skip("the multi-row AVX2 kernels run on AVX2 without AVX-512")
	}
	defer func() { quantRowsMin = 3 }()
	r := rand.New(rand.NewPCG(5, 5))
	pool := NewPool(1)
	for _, sz := range [][2]int{{3072, 1024}, {1024, 3072}} {
		out, in := sz[0], sz[1]
		for _, bits := range []int{4, 8, 3} {
			q, _ := quantFixture(r, out, in, bits, 64)
			one, _ := NewQuant(out, in, q)
			var stack []*Linear
			for bytes := 0; bytes < 64<<20; bytes += one.Bytes() {
				l := cloneLinear(one)
				l.Pool = pool
				stack = append(stack, l)
			}
			for _, rows := range benchRows {
				x := randVec(r, rows*in, 1)
				dst := make([]float32, rows*out)
				for _, k := range []struct {
					name string
					min  int
				}{{"pairs", 1 << 30}, {"rows", 1}} {
					b.Run(fmt.Sprintf("q%d/%dx%d/rows=%d/%s", bits, out, in, rows, k.name), func(b *testing.B) {
						quantRowsMin = k.min
						best := time.Duration(math.MaxInt64)
						for b.Loop() {
							start := time.Now()
							for _, l := range stack {
								l.Forward(dst, x, rows)
							}
							best = min(best, time.Since(start))
						}
						b.ReportMetric(float64(best.Nanoseconds())/1e3, "min-us")
						b.ReportMetric(float64(len(stack)*rows*out*in)/best.Seconds()/1e9, "GMAC/s")
					})
				}
			}
		}
	}
}

var benchRows = []int{2, 4, 8, 16}

// BenchmarkDenseRows compares the 6 × 2 AVX2 tiles with the 4 × 2 ones alone (f32 and bf16, L3-resident
// 3072×1024; min-us as in BenchmarkQuantRows).
//
//	go test -run '^$' -bench DenseRows -benchtime 20x -count 5 ./adapters/cpu/kernel
func BenchmarkDenseRows(b *testing.B) {
	if !useAVX2 || useAVX512 {
		b.Skip("the 6 × 2 tiles run on AVX2 without AVX-512")
	}
	defer func() { denseTile6 = true }()
	r := rand.New(rand.NewPCG(6, 6))
	const out, in = 3072, 1024
	ls := benchLinears(r, out, in)
	for _, name := range []string{"f32", "bf16"} {
		l := ls[name]
		l.Pool = NewPool(1)
		for _, rows := range []int{8, 16} {
			x := randVec(r, rows*in, 1)
			dst := make([]float32, rows*out)
			for _, six := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/rows=%d/tile6=%v", name, rows, six), func(b *testing.B) {
					denseTile6 = six
					best := time.Duration(math.MaxInt64)
					for b.Loop() {
						start := time.Now()
						l.Forward(dst, x, rows)
						best = min(best, time.Since(start))
					}
					b.ReportMetric(float64(best.Nanoseconds())/1e3, "min-us")
				})
			}
		}
	}
}
