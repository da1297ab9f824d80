package mlx

import (
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ model.DraftBackend[act, *weight] = ops{}

// GroupConv builds the convolution on a [T, G, H/G] view: per tap the block shifted down by the tap (zero
// rows on top), times the base kernel broadcast over rows, plus times the per-row, per-group dynamic
// kernel, added in the order the CPU reference adds them.
func (o ops) GroupConv(x, dyn act, base *weight, taps int) act {
	g := o.g
	T, H := x.r, x.c
	G := dyn.c / taps
	gs := H / G
	xg := g.reshape(x.a, T, G, gs)
	dg := g.reshape(dyn.a, T, taps, G, 1)
	bg := g.reshape(o.cast(base.vec), taps, G, gs)
	var out arr
	for j := range min(taps, T) {
		shifted := xg
		if j > 0 {
			shifted = g.concat(0, g.zeros(mlxc.ArrayDtype(xg), j, G, gs), g.slice(xg, []int{0, 0, 0}, []int{T - j, G, gs}))
		}
		b := g.reshape(g.slice(bg, []int{j, 0, 0}, []int{j + 1, G, gs}), G, gs)
		d := g.reshape(g.slice(dg, []int{0, j, 0, 0}, []int{T, j + 1, G, 1}), T, G, 1)
		t := g.mul(b, shifted)
		if out == 0 {
			out = t
		} else {
			out = g.add(out, t)
		}
		out = g.add(out, g.mul(d, shifted))
	}
	return act{g.reshape(out, T, H), T, H}
}

// Softcap computes in float32 and returns x's dtype.
func (o ops) Softcap(x act, c float32) act {
	g := o.g
	y := g.mul(g.tanh(g.div(o.f32(x.a), g.scalar(c))), g.scalar(c))
	return act{o.cast(y), x.r, x.c}
}

// TopK sorts each row on the device (MLX's argsort keeps equal values in index order, so ties go to the
// lower id) and reads the first k ids and values; k = 1 is an argmax, which also returns the first maximum.
func (o ops) TopK(x act, k int) ([]ports.Token, []float32) {
	g := o.g
	var idx arr
	if k == 1 {
		idx = g.reshape(g.argmax(x.a, -1), x.r, 1)
	} else {
		idx = g.slice(g.argsort(g.neg(x.a), -1), []int{0, 0}, []int{x.r, k})
	}
	ids := g.astype(idx, mlxc.Int32)
	vals := g.astype(g.takeAlong(x.a, idx, -1), mlxc.Float32)
	g.eval(ids, vals)
	return g.readI32(ids), g.readF32(vals)
}

// Host evaluates x and copies it out as float32.
func (o ops) Host(x act) []float32 {
	a := o.g.astype(x.a, mlxc.Float32)
	o.g.eval(a)
	return o.g.readF32(a)
}
