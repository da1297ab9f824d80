package ops

import (
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ model.DraftBackend[Act, *Weight] = Backend{}

// GroupConv builds the convolution on a [T, G, H/G] view: per tap the block shifted down by the tap (zero
// rows on top), times the base kernel broadcast over rows, plus times the per-row, per-group dynamic
// kernel, added in the order the CPU reference adds them.
func (o Backend) GroupConv(x, dyn Act, base *Weight, taps int) Act {
	g := o.G
	T, H := x.R, x.C
	G := dyn.C / taps
	gs := H / G
	xg := g.Reshape(x.A, T, G, gs)
	dg := g.Reshape(dyn.A, T, taps, G, 1)
	bg := g.Reshape(o.Cast(base.vec), taps, G, gs)
	var out arr
	for j := range min(taps, T) {
		shifted := xg
		if j > 0 {
			shifted = g.Concat(0, g.Zeros(mlxc.ArrayDtype(xg), j, G, gs), g.Slice(xg, []int{0, 0, 0}, []int{T - j, G, gs}))
		}
		b := g.Reshape(g.Slice(bg, []int{j, 0, 0}, []int{j + 1, G, gs}), G, gs)
		d := g.Reshape(g.Slice(dg, []int{0, j, 0, 0}, []int{T, j + 1, G, 1}), T, G, 1)
		t := g.Mul(b, shifted)
		if out == 0 {
			out = t
		} else {
			out = g.Add(out, t)
		}
		out = g.Add(out, g.Mul(d, shifted))
	}
	return Act{g.Reshape(out, T, H), T, H}
}

// Softcap computes in float32 and returns x's dtype.
func (o Backend) Softcap(x Act, c float32) Act {
	g := o.G
	y := g.Mul(g.Tanh(g.Div(o.F32(x.A), g.Scalar(c))), g.Scalar(c))
	return Act{o.Cast(y), x.R, x.C}
}

// TopK sorts each row on the device (MLX's argsort keeps equal values in index order, so ties go to the
// lower id) and reads the first k ids and values; k = 1 is an argmax, which also returns the first maximum.
func (o Backend) TopK(x Act, k int) ([]ports.Token, []float32) {
	g := o.G
	var idx arr
	if k == 1 {
		idx = g.Reshape(g.Argmax(x.A, -1), x.R, 1)
	} else {
		idx = g.Slice(g.Argsort(g.Neg(x.A), -1), []int{0, 0}, []int{x.R, k})
	}
	ids := g.Astype(idx, mlxc.Int32)
	vals := g.Astype(g.TakeAlong(x.A, idx, -1), mlxc.Float32)
	g.Eval(ids, vals)
	return g.ReadI32(ids), g.ReadF32(vals)
}

// Host evaluates x and copies it out as float32.
func (o Backend) Host(x Act) []float32 {
	a := o.G.Astype(x.A, mlxc.Float32)
	o.G.Eval(a)
	return o.G.ReadF32(a)
}
