package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Not parallel: it switches the package's feature flags. Every Linear.Forward path writes every dst element (the CPU backend hands ops unzeroed output buffers): a
// NaN-filled dst gives the zero-filled one's bits, for f32, bf16 and every quantized width and group, in both
// modes, on every kernel path this CPU has (the feature flags turned off one by one) and on the portable one.
func TestForwardWritesEveryElement(t *testing.T) {
	type flags struct {
		name                                                 string
		avx2, avx512, vnni, favx2, panels, q16, fused, pairs bool
	}
	nat := flags{"native", useAVX2, useAVX512, useVNNI, useFastAVX2, usePanels, quant16, quantFused, quantPairs}
	cfgs := []flags{nat,
		{"nopanels", useAVX2, useAVX512, useVNNI, useFastAVX2, false, true, true, true},
		{"novnni", useAVX2, useAVX512, false, useFastAVX2, false, true, true, true},
		{"no16 nofused nopairs", useAVX2, useAVX512, useVNNI, useFastAVX2, usePanels, false, false, false},
		{"avx2", useAVX2, false, false, useFastAVX2, false, true, true, true},
		{"portable", false, false, false, false, false, true, true, true},
	}
	defer func() {
		useAVX2, useAVX512, useVNNI, useFastAVX2, usePanels, usePanelAsm, quant16, quantFused, quantPairs = nat.avx2, nat.avx512, nat.vnni, nat.favx2, nat.panels, nat.panels, nat.q16, nat.fused, nat.pairs
	}()
	r := rand.New(rand.NewPCG(3, 4))
	rowsList := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 20, 31, 33, 70}
	if testing.Short() {
		rowsList = []int{0, 1, 3, 8, 16, 17, 33}
	}
	for _, c := range cfgs {
		useAVX2, useAVX512, useVNNI, useFastAVX2, usePanels, usePanelAsm, quant16, quantFused, quantPairs = c.avx2, c.avx512, c.vnni, c.favx2, c.panels, c.panels, c.q16, c.fused, c.pairs
		for _, mode := range []Mode{ModeExact, ModeFast} {
			for _, threads := range []int{1, 3} {
				pool := NewPoolMode(threads, mode)
				for _, out := range []int{16, 18, 48} {
					for _, in := range []int{64, 128, 384} {
						var ls []*Linear
						names := []string{}
						w := randVec(r, out*in, 1)
						ls = append(ls, must(NewF32(out, in, w)))
						names = append(names, "f32")
						b := make([]uint16, out*in)
						for i, v := range w {
							b[i] = uint16(math.Float32bits(v) >> 16)
						}
						ls = append(ls, must(NewBF16(out, in, b)))
						names = append(names, "bf16")
						for _, bits := range []int{2, 3, 4, 5, 6, 8} {
							for _, gs := range []int{32, 64, 128} {
								if in%gs != 0 {
									continue
								}
								q, _ := quantFixture(r, out, in, bits, gs)
								ls = append(ls, must(NewQuant(out, in, q)))
								names = append(names, "q")
							}
						}
						for li, l := range ls {
							l.Pool = pool
							if l.q != nil {
								l.pan = new(panelState)
							}
							for _, rows := range rowsList {
								x := randVec(r, rows*in, 1)
								z := make([]float32, rows*out)
								l.Forward(z, x, rows)
								n := make([]float32, rows*out)
								for i := range n {
									n[i] = float32(math.NaN())
								}
								l.Forward(n, x, rows)
								for i := range z {
									if math.Float32bits(z[i]) != math.Float32bits(n[i]) {
										t.Fatalf("%s mode%d th%d %s out%d in%d rows%d: element %d: %v vs %v", c.name, mode, threads, names[li], out, in, rows, i, z[i], n[i])
									}
								}
							}
						}
					}
				}
			}
		}
	}
}
