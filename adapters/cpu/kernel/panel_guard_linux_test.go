//go:build linux && amd64 && !purego

package kernel

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// guardedPanels moves p's codes, scales and biases against inaccessible pages.
func guardedPanels(t *testing.T, p *panels, tail bool) *panels {
	cb := guarded(t, 4*len(p.codes), tail)
	codes := unsafe.Slice((*uint32)(unsafe.Pointer(&cb[0])), len(p.codes))
	copy(codes, p.codes)
	g := *p
	g.codes = codes
	g.scales = guardedBytes(t, p.scales, tail)
	if len(p.biases) > 0 {
		g.biases = guardedBytes(t, p.biases, tail)
	}
	return &g
}

// guardedBytes is a copy of src against an inaccessible page.
func guardedBytes(t *testing.T, src []byte, tail bool) []byte {
	b := guarded(t, len(src), tail)
	copy(b, src)
	return b
}

// The panel kernels, VNNI and tiles (both widths, every group size, 1 to 33 rows) on panels and outputs placed against
// inaccessible pages give panelRunGo's bits: the prefetching one- and two-row kernels and the last panel's
// reads stay inside the weights.
func TestPanelKernelsStayInBounds(t *testing.T) {
	if !hasPanelAsm {
		t.Skip("no AVX512-VNNI on this CPU: the panel kernels do not run here")
	}
	r := rand.New(rand.NewPCG(71, 72))
	for _, tail := range []bool{true, false} {
		for _, bits := range []int{4, 8} {
			for _, g := range []int{32, 64, 128} {
				for k, shape := range [][2]int{{16, g}, {32, 3 * g}, {16, 128 + g}} {
					out, in := shape[0], shape[1]
					q, _ := quantFixture(r, out, in, bits, g)
					q = withScaleForm(r, q, scaleForms[(k+g/32)%len(scaleForms)]) // their formats' reads too
					l, err := NewQuant(out, in, q)
					require.NoError(t, err)
					l.Pool = NewPoolMode(2, ModeFast)
					gp := guardedPanels(t, buildPanels(&q, out, in), tail)
					l.pan.once.Do(func() { l.pan.p = gp })
					for _, rows := range []int{1, 2, 3, 5, 7, 8, 13, 15, 16, 17, 31, 33} {
						x := guardedF32(t, randVec(r, rows*in, 1), tail)
						b := make([]float32, rows*out)
						withPanels(panelGo, func() { l.Forward(b, x, rows) })
						for _, path := range asmPanelPaths() {
							a := guardedF32(t, make([]float32, rows*out), tail)
							withPanels(path, func() { l.Forward(a, x, rows) })
							assertBits(t, b, a, "%v tail %v q%d g%d out %d in %d rows %d", path, tail, bits, g, out, in, rows)
						}
					}
				}
			}
		}
	}
}
