// Package machine measures a machine's limits for benchmarks: the figures the CPU kernels are judged against
// (decode products against read bandwidth, multi-row products against f32 FMA peak). It is a package, not a
// _test file, so the kernels' benchmarks and the backend's model benchmarks report the same ratios.
package machine

import (
	"time"

	"github.com/higgs-go/higgs/adapters/cpu/kernel/workers"
)

func nanotime() int64 { return time.Now().UnixNano() }

// StreamSum reads every element of buf once and returns their sum. With buf much larger than the caches and
// one call per worker, its speed is the machine's practical read bandwidth.
func StreamSum(buf []float32) float32 {
	n := len(buf) &^ 63
	var s float32
	if useAVX2 && n > 0 {
		s = streamSumAVX2(&buf[0], n)
	} else {
		var a [8]float32
		for i := 0; i < n; i += 8 {
			v := (*[8]float32)(buf[i : i+8])
			for k := range a {
				a[k] += v[k]
			}
		}
		for _, v := range a {
			s += v
		}
	}
	for _, v := range buf[n:] {
		s += v
	}
	return s
}

// FMAPeakFlops is the number of f32 floating-point operations one FMAPeak iteration performs.
const FMAPeakFlops = 12 * 8 * 2

// FMAPeak runs iters iterations of independent register-resident FMAs (FMAPeakFlops each): the core's f32
// peak with the vector unit the kernels use. Without that unit it runs the same count of scalar FMAs.
func FMAPeak(iters int) float32 {
	if useAVX2 {
		return fmaPeakAVX2(iters)
	}
	var a [12]float32
	x, y := float32(1), float32(0.99999994)
	for range iters * 8 {
		for k := range a {
			a[k] += x * y
		}
	}
	var s float32
	for _, v := range a {
		s += v
	}
	return s
}

// Limits are a machine's measured ceilings for the kernels.
type Limits struct {
	// ReadGBs is the read bandwidth from memory, all workers streaming disjoint halves of a buffer far larger
	// than the caches, in GB/s (10⁹ bytes).
	ReadGBs float64
	// PeakGFlops is the f32 FMA peak of all workers, in GFLOP/s.
	PeakGFlops float64
}

// MeasureLimits measures Limits with p's workers, taking the best of reps runs of each (the machine may be
// shared; the best run is the closest to the hardware). It allocates and touches bufBytes of memory (use at
// least 8× the last-level cache) and is meant for benchmarks only.
func MeasureLimits(p *workers.Pool, bufBytes int, reps int) Limits {
	n := bufBytes / 4
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = 1
	}
	w := p.Threads()
	chunk := (n/w + 63) &^ 63
	sums := make([]float32, w)
	var lim Limits
	for range max(reps, 1) {
		start := nanotime()
		p.For(n, chunk, func(lo, hi int) { sums[lo/chunk] = StreamSum(buf[lo:hi]) })
		if gbs := float64(4*n) / float64(nanotime()-start); gbs > lim.ReadGBs {
			lim.ReadGBs = gbs
		}
	}
	const iters = 1 << 22
	for range max(reps, 1) {
		start := nanotime()
		p.For(w, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				sums[i] = FMAPeak(iters)
			}
		})
		if gf := float64(w) * iters * FMAPeakFlops / float64(nanotime()-start); gf > lim.PeakGFlops {
			lim.PeakGFlops = gf
		}
	}
	return lim
}
