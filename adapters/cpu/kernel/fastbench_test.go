package kernel

import (
	"fmt"
	"math/rand/v2"
	"runtime"
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
			// CPU without AVX512-VNNI the two are the same kernels); "vnni" the panel form without AMX tiles, on a
			// CPU with them.
			variants := []string{"exact", "fast", "lanes"}
			if hasAMX {
				variants = append(variants, "vnni")
			}
			for _, variant := range variants {
				mode := ModeFast
				if variant == "exact" {
					mode = ModeExact
				}
				l.Pool = NewPoolMode(0, mode)
				for _, rows := range []int{1, 4, 8, 16, 128} {
					x := randVec(r, rows*in, 1)
					dst := make([]float32, rows*out)
					b.Run(fmt.Sprintf("q%d/%s/%dx%d/rows=%d", bits, variant, out, in, rows), func(b *testing.B) {
						p, u := usePanels, useAMX
						usePanels, useAMX = p && variant != "lanes", u && variant != "vnni"
						defer func() { usePanels, useAMX = p, u }()
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

// BenchmarkGocoderShapes times the fast mode's products on the bundled gocoder's narrow matrices (its Gated
// DeltaNet input projection 1536×640, MLP down 640×1280, 4-bit groups of 64; its tied LM head 4096×640, 8-bit)
// on one worker, for 1 to 16 input rows, in multiply-adds per second of wall time and of the thread's CPU time
// (the steadier figure on a shared machine): what a verify's products cost against the VNNI units' issue rate
// (docs/performance.md).
//
//	go test -run '^$' -bench GocoderShapes -benchtime 3000x ./adapters/cpu/kernel
func BenchmarkGocoderShapes(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, sh := range []struct{ out, in, bits int }{{1536, 640, 4}, {640, 1280, 4}, {640, 2560, 4}, {4096, 640, 8}} {
		q, _ := quantFixture(r, sh.out, sh.in, sh.bits, 64)
		l, _ := NewQuant(sh.out, sh.in, q)
		l.Pool = NewPoolMode(1, ModeFast)
		for _, rows := range []int{1, 2, 4, 8, 16} {
			x := randVec(r, rows*sh.in, 1)
			dst := make([]float32, rows*sh.out)
			for _, path := range asmPanelPaths() {
				b.Run(fmt.Sprintf("q%d/%dx%d/rows=%d/%v", sh.bits, sh.out, sh.in, rows, path), func(b *testing.B) {
					u, n := useAMX, amxTileRows
					useAMX, amxTileRows = path == panelAMX, amxMinRows // the tiles on every block of 16
					defer func() { useAMX, amxTileRows = u, n }()
					// One worker runs on this goroutine: pinned, the thread's CPU clock times the products alone.
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					c0 := threadCPU()
					for b.Loop() {
						l.Forward(dst, x, rows)
					}
					macs := float64(sh.out*sh.in*rows) * float64(b.N)
					b.ReportMetric(macs/b.Elapsed().Seconds()/1e9, "GMAC/s")
					b.ReportMetric(macs/(threadCPU()-c0).Seconds()/1e9, "cpu-GMAC/s")
				})
			}
		}
	}
}
