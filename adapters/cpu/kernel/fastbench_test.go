package kernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkFastRows times Forward alone (no side measurements) on the 306M synth's shapes, 4- and 8-bit
// weights with groups of 64, in both modes (and the fast mode's lane form), for the row counts of decode, verify blocks and prefill tiles.
// The machine may be shared: compare runs side by side with -count.
//
//	go test -run '^$' -bench FastRows -benchtime 20x -count 3 ./adapters/cpu/kernel
func BenchmarkFastRows(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, sz := range [][2]int{{3072, 1024}, {1024, 3072}} {
		out, in := sz[0], sz[1]
		for _, bits := range []int{4, 8} {
			q, _ := quantFixture(r, out, in, bits, 64)
			l, _ := NewQuant(out, in, q)
			// "fast" is the fast mode as this CPU runs it; "lanes" the fast mode with the panel form off (on a
			// CPU without AVX512-VNNI the two are the same kernels).
			for _, variant := range []string{"exact", "fast", "lanes"} {
				mode := ModeFast
				if variant == "exact" {
					mode = ModeExact
				}
				l.Pool = NewPoolMode(0, mode)
				for _, rows := range []int{1, 4, 8, 16, 128} {
					x := randVec(r, rows*in, 1)
					dst := make([]float32, rows*out)
					b.Run(fmt.Sprintf("q%d/%s/%dx%d/rows=%d", bits, variant, out, in, rows), func(b *testing.B) {
						p := usePanels
						usePanels = p && variant != "lanes"
						defer func() { usePanels = p }()
						for b.Loop() {
							l.Forward(dst, x, rows)
						}
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows)/1e3, "us/row")
					})
				}
			}
		}
	}
}
