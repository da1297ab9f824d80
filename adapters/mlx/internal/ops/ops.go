// Package ops is adapters/model's block-level interfaces on MLX, each pass written on one graph.Graph: the
// weights and their loader (Weight, Loader, Upload: model.Loader), the block ops (Backend: model.Backend and
// model.DraftBackend) and a pass's view of a sequence's state (Pass: model.State, attention over the KV
// caches and the Gated DeltaNet recurrence with its tape; Replay, KVPrefix; a verification tree's pass and
// its compaction to the kept path: Tree, ReplayPath, KeepKV). The sessions that own that state between
// passes, and everything the ports see, stay in adapters/mlx.
package ops

import (
	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// arr is an MLX array handle (graph.Graph's ops take and return them).
type arr = mlxc.Array

// Act is an activation in the graph: a [r, c] array (compute dtype unless a comment says float32).
type Act struct {
	A    arr
	R, C int
}

// Weight is the MLX backend's weight handle. A matrix is float (WT holds the [in, out] transpose, stored
// contiguous) or MLX affine-quantized (w packed [.., out, in·bits/32], scales and biases [.., out, in/group]);
// stacked experts add a leading axis of experts. A vector holds n values; a convolution is [taps, channels]
// (row j is the tap hitting X[t+j]); a RoPE table is rope. A float embedding also keeps ByRow, because
// rows are looked up in the [V, H] layout.
type Weight struct {
	out, in       int
	experts       int
	WT            arr
	w             arr
	scales, biase arr
	bits, group   int
	ByRow         arr // a float matrix's [out, in] view, for row lookups (the embedding's)
	vec           arr
	n             int
	rope          *graph.RopeSpec
}

// Quantized reports whether the weight is MLX affine-quantized.
func (l *Weight) Quantized() bool { return l.bits > 0 }

// apply computes x·Wᵀ for x [..., in].
func (l *Weight) apply(g *graph.Graph, x arr) arr {
	if l.Quantized() {
		return g.QMM(x, l.w, l.scales, l.biase, l.group, l.bits)
	}
	return g.Matmul(x, l.WT)
}

// gather computes, for x [..., 1, in] and expert ids idx, x·W_idxᵀ → [..., 1, out].
func (l *Weight) gather(g *graph.Graph, x, idx arr) arr {
	if l.Quantized() {
		return g.GatherQMM(x, l.w, l.scales, l.biase, idx, l.group, l.bits, false)
	}
	// MLX's CPU gather_mm takes float32 only: float experts stay float32 (see Loader.Linear) and run in it.
	if dt := mlxc.ArrayDtype(x); dt != mlxc.Float32 {
		return g.Astype(g.GatherMM(g.Astype(x, mlxc.Float32), l.WT, idx, false), dt)
	}
	return g.GatherMM(x, l.WT, idx, false)
}

// Backend builds graph nodes on G; DT is the compute dtype of activations and float weights (the Gated DeltaNet
// recurrence and its state are always float32).
type Backend struct {
	G  *graph.Graph
	DT mlxc.Dtype
}

var _ model.Backend[Act, *Weight] = Backend{}

// Cast converts an activation to the compute dtype (nothing for float32).
func (o Backend) Cast(a arr) arr {
	if o.DT == mlxc.Float32 {
		return a
	}
	return o.G.Astype(a, o.DT)
}

// F32 converts an activation to float32 (nothing when computing in float32).
func (o Backend) F32(a arr) arr {
	if o.DT == mlxc.Float32 {
		return a
	}
	return o.G.Astype(a, mlxc.Float32)
}

// Embed looks token rows up (dequantized when the embedding is quantized).
func (o Backend) Embed(e *Weight, tokens []ports.Token) Act {
	g := o.G
	ids := graph.UploadI32(g, tokens, len(tokens))
	res := Act{R: len(tokens), C: e.in}
	if !e.Quantized() {
		if e.ByRow == 0 {
			// A float matrix loaded as a Linear (DFlash2's codebooks): gather columns of Wᵀ.
			res.A = g.Transpose(g.Take(e.WT, ids, 1), 1, 0)
			return res
		}
		res.A = g.Take(e.ByRow, ids, 0)
		return res
	}
	w, s, b := g.Take(e.w, ids, 0), g.Take(e.scales, ids, 0), g.Take(e.biase, ids, 0)
	if g.Err != nil {
		return res
	}
	mode := mlxc.CString("affine")
	var r arr
	res.A = g.Done("dequantize", mlxc.Dequantize(&r, w, s, b, mlxc.SomeInt(e.group), mlxc.SomeInt(e.bits), mode, 0,
		mlxc.SomeDtype(o.DT), g.Stream), r)
	return res
}

func (o Backend) Linear(w *Weight, x Act) Act { return Act{w.apply(o.G, x.A), x.R, w.out} }

// Norm is MLX's fused RMSNorm over the last axis, on a [r, c/n, n] view for group norms.
func (o Backend) Norm(x Act, w *Weight, eps float32) Act {
	g := o.G
	if w.n == x.C {
		return Act{g.RMSNorm(x.A, w.vec, eps), x.R, x.C}
	}
	v := g.RMSNorm(g.Reshape(x.A, x.R, x.C/w.n, w.n), w.vec, eps)
	return Act{g.Reshape(v, x.R, x.C), x.R, x.C}
}

func (o Backend) Add(x, y Act) Act { return Act{o.G.Add(x.A, y.A), x.R, x.C} }

func (o Backend) Gate(x, gt Act, a model.Act) Act {
	g := o.G
	if a == model.SiLU {
		return Act{g.Mul(g.SiLU(gt.A), x.A), x.R, x.C}
	}
	return Act{g.Mul(x.A, g.Sigmoid(gt.A)), x.R, x.C}
}

func (o Backend) Split(x Act, groups int, widths ...int) []Act {
	g := o.G
	gw := 0
	for _, w := range widths {
		gw += w
	}
	outs := make([]Act, len(widths))
	if groups == 1 {
		off := 0
		for i, w := range widths {
			outs[i] = Act{g.Slice(x.A, []int{0, off}, []int{x.R, off + w}), x.R, w}
			off += w
		}
		return outs
	}
	v := g.Reshape(x.A, x.R, groups, gw)
	off := 0
	for i, w := range widths {
		part := g.Slice(v, []int{0, 0, off}, []int{x.R, groups, off + w})
		outs[i] = Act{g.Reshape(part, x.R, groups*w), x.R, groups * w}
		off += w
	}
	return outs
}

func (o Backend) Concat(xs ...Act) Act {
	as := make([]arr, len(xs))
	c := 0
	for i, x := range xs {
		as[i] = x.A
		c += x.C
	}
	return Act{o.G.Concat(1, as...), xs[0].R, c}
}

func (o Backend) Rows(x Act, lo, hi int) Act {
	if lo == 0 && hi == x.R {
		return x
	}
	return Act{o.G.Slice(x.A, []int{lo, 0}, []int{hi, x.C}), hi - lo, x.C}
}

func (o Backend) Join(xs ...Act) Act {
	if len(xs) == 1 {
		return xs[0]
	}
	as := make([]arr, len(xs))
	r := 0
	for i, x := range xs {
		as[i] = x.A
		r += x.R
	}
	return Act{o.G.Concat(0, as...), r, xs[0].C}
}

func (o Backend) Scale(x Act, s float32) Act {
	return Act{o.G.Mul(x.A, o.Cast(o.G.Scalar(s))), x.R, x.C}
}

// GatedNorm runs in float32 (x is the recurrence's float32 output) and returns the compute dtype.
func (o Backend) GatedNorm(x, z Act, w *Weight, eps float32) Act {
	g := o.G
	h := x.C / w.n
	n := g.RMSNorm(g.Reshape(x.A, x.R, h, w.n), w.vec, eps)
	y := g.Mul(n, g.SiLU(g.Reshape(o.F32(z.A), z.R, h, w.n)))
	return Act{o.Cast(g.Reshape(y, x.R, x.C)), x.R, x.C}
}

// Experts routes each row to its top-k experts (softmax in float32, ties to the lower id via a stable sort)
// and runs them with gathered matmuls, gate and up fused into one gather when the loader fused them.
func (o Backend) Experts(m *model.MoE[*Weight], x Act, K int, normTopK bool) Act {
	g := o.G
	T, H, I := x.R, x.C, m.Inter
	p := g.Softmax(m.Router.apply(g, x.A), -1) // [T,E]
	order := g.Argsort(g.Neg(p), -1)
	idx := g.Slice(order, []int{0, 0}, []int{T, K}) // [T,K]
	wk := g.TakeAlong(p, idx, -1)
	if normTopK {
		wk = g.Div(wk, g.Sum(wk, -1, true))
	}
	xs := g.Reshape(x.A, T, 1, 1, H)
	var gate, up arr
	if m.GateUp != nil {
		gu := m.GateUp.gather(g, xs, idx) // [T,K,1,2I]
		gate = g.Slice(gu, []int{0, 0, 0, 0}, []int{T, K, 1, I})
		up = g.Slice(gu, []int{0, 0, 0, I}, []int{T, K, 1, 2 * I})
	} else {
		gate, up = m.Gate.gather(g, xs, idx), m.Up.gather(g, xs, idx)
	}
	y := m.Down.gather(g, g.Mul(g.SiLU(gate), up), idx) // [T,K,1,H]
	y = g.Reshape(y, T, K, H)
	return Act{g.Sum(g.Mul(y, g.Reshape(wk, T, K, 1)), 1, false), T, H}
}
