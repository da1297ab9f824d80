package kernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkF16Decode compares, for one input row (decode), f16 weights streamed by FormatF16 against the same
// weights widened to float32 (what loading an f16 checkpoint did before FormatF16) and against bf16, on
// stacks of distinct copies (384 MiB of f16: more than the L3) read from memory once per pass. Every
// iteration runs the three passes back to back, then a read-bandwidth stream on all workers. The machine may
// be shared, so each figure is a median over the iterations and each ratio a median of per-iteration ratios;
// %bw is the weight bytes per second against the stream's GB/s of the same iteration (the bound).
//
//	go test -run '^$' -bench F16Decode -benchtime 10x ./adapters/cpu/kernel
func BenchmarkF16Decode(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates about 1.4 GiB")
	}
	const total = 384 << 20
	r := rand.New(rand.NewPCG(37, 20))
	lim := newSideLimits(192 << 20)
	for _, shape := range [][2]int{{3072, 1024}, {1024, 3072}} {
		out, in := shape[0], shape[1]
		h, w := f16Fixture(r, out, in)
		bf := make([]uint16, len(w))
		for i, v := range w {
			bf[i] = F32ToBF16(v)
		}
		x := randVec(r, in, 1)
		dst := make([]float32, out)
		n := total / (2 * out * in)
		stacks := map[string][]*Linear{}
		for range n {
			lh, _ := NewF16(out, in, append([]uint16(nil), h...))
			lf, _ := NewF32(out, in, append([]float32(nil), w...))
			lb, _ := NewBF16(out, in, append([]uint16(nil), bf...))
			stacks["f16"] = append(stacks["f16"], lh)
			stacks["f32"] = append(stacks["f32"], lf)
			stacks["bf16"] = append(stacks["bf16"], lb)
		}
		names := []string{"f32", "f16", "bf16"}
		for _, threads := range []int{2, 1} {
			pool := NewPool(threads)
			for _, s := range stacks {
				for _, l := range s {
					l.Pool = pool
				}
			}
			b.Run(fmt.Sprintf("%dx%d/threads=%d", out, in, threads), func(b *testing.B) {
				secs := map[string][]float64{}
				pct := map[string][]float64{}
				var speedup []float64
				for b.Loop() {
					t := map[string]float64{}
					for _, name := range names {
						start := time.Now()
						for _, l := range stacks[name] {
							l.Forward(dst, x, 1)
						}
						t[name] = time.Since(start).Seconds()
						secs[name] = append(secs[name], t[name])
					}
					bw, _ := lim.run()
					for _, name := range names {
						bytes := float64(n * stacks[name][0].Bytes())
						pct[name] = append(pct[name], 100*bytes/t[name]/1e9/bw)
					}
					speedup = append(speedup, t["f32"]/t["f16"])
				}
				for _, name := range names {
					b.ReportMetric(median(secs[name])*1e6/float64(n), name+"-us/matrix")
					b.ReportMetric(median(pct[name]), name+"-%bw")
				}
				b.ReportMetric(median(speedup), "f16-speedup")
			})
		}
	}
}
