package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hasPanelAsm is whether this CPU runs the panel kernels, and hasAMX whether it runs them on tiles, before any
// test flips them.
var hasPanelAsm, hasAMX = usePanelAsm, AMX()

// panelPath is one of the panel form's paths: Go, the VNNI kernels, or the tile kernels (every block of 16 rows).
type panelPath int

const (
	panelGo panelPath = iota
	panelVNNI
	panelAMX
)

func (p panelPath) String() string { return [...]string{"go", "vnni", "amx"}[p] }

// withPanels runs f with the panel form on, on path p (restoring the CPU's choice after).
func withPanels(p panelPath, f func()) {
	u, a, x, n := usePanels, usePanelAsm, useAMX, amxTileRows
	usePanels, usePanelAsm, useAMX = true, p != panelGo, p == panelAMX
	if p == panelAMX {
		amxTileRows = amxMinRows // every block of 16 on tiles
	}
	defer func() { usePanels, usePanelAsm, useAMX, amxTileRows = u, a, x, n }()
	f()
}

// panelPaths are the panel form's paths this CPU has: Go always, VNNI with AVX512-VNNI, tiles with AMX.
func panelPaths() []panelPath {
	p := []panelPath{panelGo}
	if hasPanelAsm {
		p = append(p, panelVNNI)
	}
	if hasAMX {
		p = append(p, panelAMX)
	}
	return p
}

// asmPanelPaths are panelPaths without Go.
func asmPanelPaths() []panelPath { return panelPaths()[1:] }

// scaleForms are the formats a panel form stores its scales and biases in, and withScaleForm makes a fixture's
// values fit one: "f32" leaves them as they are (random float32), "f16" makes them halves, "bf16" bfloat16s
// below the half's range, "sym" halves with every bias −2^(bits−1) times its scale (no biases stored).
var scaleForms = []string{"f32", "f16", "bf16", "sym"}

func withScaleForm(r *rand.Rand, q Quant, form string) Quant {
	q.Scales, q.Biases = append([]float32(nil), q.Scales...), append([]float32(nil), q.Biases...)
	for i := range q.Scales {
		switch form {
		case "f16", "sym":
			q.Scales[i] = float32(r.IntN(1000)+100) / 65536
			q.Biases[i] = -float32(r.IntN(1000)) / 2048
			if form == "sym" {
				q.Biases[i] = q.Scales[i] * -float32(int(1)<<(q.Bits-1))
			}
		case "bf16":
			q.Scales[i] = float32(r.IntN(200)+20) / (1 << 30)
			q.Biases[i] = -float32(r.IntN(200)) / (1 << 20)
		}
	}
	return q
}

// Each fixture form takes its format, and the values read back are the fixture's.
func TestPanelScaleForms(t *testing.T) {
	r := rand.New(rand.NewPCG(57, 58))
	want := map[string]int{"f32": scaleF32, "f16": scaleF16, "bf16": scaleBF16, "sym": scaleF16}
	for _, bits := range []int{4, 8} {
		for _, form := range scaleForms {
			q0, _ := quantFixture(r, 32, 128, bits, 64)
			q := withScaleForm(r, q0, form)
			p := buildPanels(&q, 32, 128)
			assert.Equal(t, want[form], p.sform, "q%d %s", bits, form)
			assert.Equal(t, form == "sym", p.bmul != 0, "q%d %s: biases derived", bits, form)
			for o := range 32 {
				for g := range 2 {
					i := ((o/panelRows)*2+g)*panelRows + o%panelRows
					require.Equal(t, math.Float32bits(q.Scales[o*2+g]), math.Float32bits(p.scale(i)))
					require.Equal(t, math.Float32bits(q.Biases[o*2+g]), math.Float32bits(p.bias(i)))
				}
			}
		}
	}
	h, ok := f16Exact(65504)
	assert.True(t, ok)
	assert.Equal(t, uint16(0x7bff), h)
	h, ok = f16Exact(float32(math.Ldexp(1, -24))) // the smallest subnormal half
	assert.True(t, ok)
	assert.Equal(t, uint16(1), h)
	for _, v := range []float32{65520, float32(math.Ldexp(1, -25)), 1 + 1.0/4096} {
		_, ok := f16Exact(v)
		assert.False(t, ok, "%g is no half", v)
	}
}

// The layout: word w of panel row j is the weight row's word w; scales and biases side by side per group.
func TestPanelLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	for _, bits := range []int{4, 8} {
		const out, in, gs = 32, 256, 64
		q, _ := quantFixture(r, out, in, bits, gs)
		p := buildPanels(&q, out, in)
		wpr, ng := q.wordsPerRow(in), in/gs
		require.Equal(t, 2, p.n)
		for o := range out {
			pi, j := o/panelRows, o%panelRows
			for w := range wpr {
				require.Equal(t, q.Codes[o*wpr+w], p.codes[pi*panelRows*wpr+w*panelRows+j], "q%d row %d word %d", bits, o, w)
			}
			for g := range ng {
				require.Equal(t, q.Scales[o*ng+g], p.scale((pi*ng+g)*panelRows+j))
				require.Equal(t, q.Biases[o*ng+g], p.bias((pi*ng+g)*panelRows+j))
			}
		}
	}
	q, _ := quantFixture(r, 20, 64, 4, 64)
	assert.False(t, panelsFit(&q, 20), "20 rows are not whole panels")
	q3, _ := quantFixture(r, 32, 64, 3, 64)
	assert.False(t, panelsFit(&q3, 32), "3-bit codes stay in the lane form")
}

// The panel kernels give panelRunGo's bits for both widths, every group size, shape and row count 1–34, and a
// block of rows gives the bits of one-row calls (so verify and decode agree in fast mode).
func TestPanelKernelsMatchGo(t *testing.T) {
	if !hasPanelAsm {
		t.Skip("no AVX512-VNNI on this CPU: the panel form runs only in Go here (TestPanelDeterministic, TestPanelError)")
	}
	r := rand.New(rand.NewPCG(53, 54))
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, in := range fastShapes(gs) {
				for k, out := range []int{16, 48, 16, 48} {
					q, _ := quantFixture(r, out, in, bits, gs)
					form := scaleForms[(k+in/gs)%len(scaleForms)] // every format, across the shapes
					q = withScaleForm(r, q, form)
					l, err := NewQuant(out, in, q)
					require.NoError(t, err)
					l.Pool = NewPoolMode(2, ModeFast)
					const maxRows = 34
					x := fastInputs(r, maxRows, in)
					ref := make([]float32, maxRows*out)
					withPanels(panelGo, func() { l.Forward(ref, x, maxRows) })
					for _, path := range asmPanelPaths() {
						withPanels(path, func() {
							for rows := 1; rows <= maxRows; rows++ {
								got := make([]float32, rows*out)
								l.Forward(got, x, rows)
								assertBits(t, ref[:rows*out], got, "%v q%d g%d in %d out %d %s rows %d", path, bits, gs, in, out, form, rows)
							}
						})
					}
				}
			}
		}
	}
}

// The panel form keeps the determinism contract: one block call equals row-by-row calls for every worker
// count, in Go and in assembly, and long inputs (Forward's tiles) change no bits.
func TestPanelDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(55, 56))
	const out, in, rows = 64, 512, 19
	x := fastInputs(r, rows, in)
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			q, _ := quantFixture(r, out, in, bits, gs)
			l, err := NewQuant(out, in, q)
			require.NoError(t, err)
			var ref []float32
			for _, asm := range panelPaths() {
				withPanels(asm, func() {
					for _, threads := range []int{1, 2, 3, 7} {
						l.Pool = NewPoolMode(threads, ModeFast)
						got := make([]float32, rows*out)
						l.Forward(got, x, rows)
						if ref == nil {
							ref = got
						}
						assertBits(t, ref, got, "q%d g%d asm %v threads %d", bits, gs, asm, threads)
						for row := range rows {
							one := make([]float32, out)
							l.Forward(one, x[row*in:(row+1)*in], 1)
							assertBits(t, ref[row*out:(row+1)*out], one, "q%d g%d asm %v row %d alone", bits, gs, asm, row)
						}
					}
				})
			}
		}
	}
	// Prefill-sized inputs run in several of Forward's tiles.
	q, _ := quantFixture(r, 32, 1024, 4, 64)
	l, err := NewQuant(32, 1024, q)
	require.NoError(t, err)
	l.Pool = NewPoolMode(2, ModeFast)
	for _, asm := range panelPaths() {
		withPanels(asm, func() {
			n := l.fastTile() + 13
			xl := fastInputs(r, n, 1024)
			all := make([]float32, n*32)
			l.Forward(all, xl, n)
			for _, row := range []int{0, 17, l.fastTile() - 1, l.fastTile(), n - 1} {
				one := make([]float32, 32)
				l.Forward(one, xl[row*1024:(row+1)*1024], 1)
				assertBits(t, all[row*32:(row+1)*32], one, "asm %v row %d of %d", asm, row, n)
			}
		})
	}
}

// The panel product's error against the exact product in float64 stays within the int8 rounding's bound (as
// TestFastError for the lane form), and a block holding NaN or Inf gives NaN.
func TestPanelError(t *testing.T) {
	r := rand.New(rand.NewPCG(57, 58))
	const out, in, rows = 48, 1024, 3
	x := randVec(r, rows*in, 1)
	x[5] = 30
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			t.Run(fmt.Sprintf("q%d_g%d", bits, gs), func(t *testing.T) {
				q, deq := quantFixture(r, out, in, bits, gs)
				l, err := NewQuant(out, in, q)
				require.NoError(t, err)
				l.Pool = NewPoolMode(2, ModeFast)
				for _, asm := range panelPaths() {
					withPanels(asm, func() {
						got := make([]float32, rows*out)
						l.Forward(got, x, rows)
						assertInt8Error(t, got, x, deq, rows, out, in, fmt.Sprintf("panels, asm %v", asm))
						for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
							xb := append([]float32(nil), x[:in]...)
							xb[70] = bad
							y := make([]float32, out)
							l.Forward(y, xb, 1)
							for o := range out {
								require.True(t, math.IsNaN(float64(y[o])), "asm %v input %v out %d: %v", asm, bad, o, y[o])
							}
						}
					})
				}
			})
		}
	}
}

// pairOutputs checks ForwardPair(a, b) against a.Forward and b.Forward over rows random input rows.
func pairOutputs(t *testing.T, r *rand.Rand, a, b *Linear, rows int, what string) {
	t.Helper()
	x := fastInputs(r, rows, a.In)
	wantA, wantB := make([]float32, rows*a.Out), make([]float32, rows*b.Out)
	a.Forward(wantA, x, rows)
	b.Forward(wantB, x, rows)
	gotA, gotB := make([]float32, rows*a.Out), make([]float32, rows*b.Out)
	ForwardPair(a, b, gotA, gotB, x, rows)
	assertBits(t, wantA, gotA, "%s: a", what)
	assertBits(t, wantB, gotB, "%s: b", what)
}

// ForwardPair gives each weight's outputs bit for bit as its own Forward does, for
// every row count 1–34 and a prefill-sized input (several tiles), in Go and in assembly, on 1–3 workers;
// pairs the panel form cannot run as one product (CanPair false) go through each Forward, with the same
// outputs.
func TestForwardPairMatchesForward(t *testing.T) {
	r := rand.New(rand.NewPCG(59, 60))
	for _, bits := range []int{4, 8} {
		for _, shape := range []struct{ outA, outB, in, gs int }{{48, 16, 512, 64}, {32, 64, 640, 64}, {16, 16, 96, 32}} {
			qa, _ := quantFixture(r, shape.outA, shape.in, bits, shape.gs)
			qb, _ := quantFixture(r, shape.outB, shape.in, bits, shape.gs)
			a, err := NewQuant(shape.outA, shape.in, qa)
			require.NoError(t, err)
			b, err := NewQuant(shape.outB, shape.in, qb)
			require.NoError(t, err)
			for _, asm := range panelPaths() {
				withPanels(asm, func() {
					for _, threads := range []int{1, 2, 3} {
						pool := NewPoolMode(threads, ModeFast)
						a.Pool, b.Pool = pool, pool
						require.True(t, CanPair(a, b))
						for rows := 1; rows <= 34; rows++ {
							pairOutputs(t, r, a, b, rows, fmt.Sprintf("q%d %+v asm %v threads %d rows %d", bits, shape, asm, threads, rows))
						}
						rows := a.fastTile() + 5
						pairOutputs(t, r, a, b, rows, fmt.Sprintf("q%d %+v asm %v threads %d rows %d", bits, shape, asm, threads, rows))
					}
				})
			}
		}
	}
	fast, exact := NewPoolMode(2, ModeFast), NewPoolMode(2, ModeExact)
	mk := func(out, in, bits, gs int, pool *Pool) *Linear {
		q, _ := quantFixture(r, out, in, bits, gs)
		l, err := NewQuant(out, in, q)
		require.NoError(t, err)
		l.Pool = pool
		return l
	}
	withPanels(panelPaths()[len(panelPaths())-1], func() { // the CPU's own path
		for name, pair := range map[string][2]*Linear{
			"bits":                      {mk(32, 256, 4, 64, fast), mk(32, 256, 8, 64, fast)},
			"group":                     {mk(32, 256, 4, 64, fast), mk(32, 256, 4, 32, fast)},
			"rows not a panel multiple": {mk(32, 256, 4, 64, fast), mk(24, 256, 4, 64, fast)},
			"exact mode":                {mk(32, 256, 4, 64, exact), mk(32, 256, 4, 64, exact)},
			"two pools":                 {mk(32, 256, 4, 64, fast), mk(32, 256, 4, 64, NewPoolMode(2, ModeFast))},
		} {
			assert.False(t, CanPair(pair[0], pair[1]), name)
			for _, rows := range []int{1, 16} {
				pairOutputs(t, r, pair[0], pair[1], rows, fmt.Sprintf("%s rows %d", name, rows))
			}
		}
		assert.False(t, CanPair(mk(32, 256, 4, 64, fast), mk(32, 512, 4, 64, fast)), "input width")
		assert.True(t, CanPair(mk(32, 256, 4, 64, fast), mk(48, 256, 4, 64, fast)), "one fast pool")
	})
}
