package mlx

import (
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// act is an activation in the graph: a [r, c] array (compute dtype unless a comment says float32).
type act struct {
	a    arr
	r, c int
}

// weight is the MLX backend's weight handle. A matrix is float (wt holds the [in, out] transpose, stored
// contiguous) or MLX affine-quantized (w packed [.., out, in·bits/32], scales and biases [.., out, in/group]);
// stacked experts add a leading axis of experts. A vector holds n values; a convolution is [taps, channels]
// (row j is the tap hitting X[t+j]); a RoPE table is rope. A float embedding also keeps byRow, because
// rows are looked up in the [V, H] layout.
type weight struct {
	out, in       int
	experts       int
	wt            arr
	w             arr
	scales, biase arr
	bits, group   int
	byRow         arr // a float matrix's [out, in] view, for row lookups (the embedding's)
	vec           arr
	n             int
	rope          *ropeSpec
}

func (l *weight) quantized() bool { return l.bits > 0 }

// apply computes x·Wᵀ for x [..., in].
func (l *weight) apply(g *graph, x arr) arr {
	if l.quantized() {
		return g.qmm(x, l.w, l.scales, l.biase, l.group, l.bits)
	}
	return g.matmul(x, l.wt)
}

// gather computes, for x [..., 1, in] and expert ids idx, x·W_idxᵀ → [..., 1, out].
func (l *weight) gather(g *graph, x, idx arr) arr {
	if l.quantized() {
		return g.gatherQmm(x, l.w, l.scales, l.biase, idx, l.group, l.bits, false)
	}
	// MLX's CPU gather_mm takes float32 only: float experts stay float32 (see loader.Linear) and run in it.
	if dt := mlxc.ArrayDtype(x); dt != mlxc.Float32 {
		return g.astype(g.gatherMm(g.astype(x, mlxc.Float32), l.wt, idx, false), dt)
	}
	return g.gatherMm(x, l.wt, idx, false)
}

// ops builds graph nodes on g; dt is the compute dtype of activations and float weights (the Gated DeltaNet
// recurrence and its state are always float32).
type ops struct {
	g  *graph
	dt mlxc.Dtype
}

var _ model.Backend[act, *weight] = ops{}

// cast converts an activation to the compute dtype (nothing for float32).
func (o ops) cast(a arr) arr {
	if o.dt == mlxc.Float32 {
		return a
	}
	return o.g.astype(a, o.dt)
}

// f32 converts an activation to float32 (nothing when computing in float32).
func (o ops) f32(a arr) arr {
	if o.dt == mlxc.Float32 {
		return a
	}
	return o.g.astype(a, mlxc.Float32)
}

// Embed looks token rows up (dequantized when the embedding is quantized).
func (o ops) Embed(e *weight, tokens []ports.Token) act {
	g := o.g
	ids := uploadI32(g, tokens, len(tokens))
	res := act{r: len(tokens), c: e.in}
	if !e.quantized() {
		if e.byRow == 0 {
			// A float matrix loaded as a Linear (DFlash2's codebooks): gather columns of Wᵀ.
			res.a = g.transpose(g.take(e.wt, ids, 1), 1, 0)
			return res
		}
		res.a = g.take(e.byRow, ids, 0)
		return res
	}
	w, s, b := g.take(e.w, ids, 0), g.take(e.scales, ids, 0), g.take(e.biase, ids, 0)
	if g.err != nil {
		return res
	}
	mode := mlxc.CString("affine")
	var r arr
	res.a = g.done("dequantize", mlxc.Dequantize(&r, w, s, b, mlxc.SomeInt(e.group), mlxc.SomeInt(e.bits), mode, 0,
		mlxc.SomeDtype(o.dt), g.s), r)
	return res
}

func (o ops) Linear(w *weight, x act) act { return act{w.apply(o.g, x.a), x.r, w.out} }

// Norm is MLX's fused RMSNorm over the last axis, on a [r, c/n, n] view for group norms.
func (o ops) Norm(x act, w *weight, eps float32) act {
	g := o.g
	if w.n == x.c {
		return act{g.rmsNorm(x.a, w.vec, eps), x.r, x.c}
	}
	v := g.rmsNorm(g.reshape(x.a, x.r, x.c/w.n, w.n), w.vec, eps)
	return act{g.reshape(v, x.r, x.c), x.r, x.c}
}

func (o ops) Add(x, y act) act { return act{o.g.add(x.a, y.a), x.r, x.c} }

func (o ops) Gate(x, gt act, a model.Act) act {
	g := o.g
	if a == model.SiLU {
		return act{g.mul(g.silu(gt.a), x.a), x.r, x.c}
	}
	return act{g.mul(x.a, g.sigmoid(gt.a)), x.r, x.c}
}

func (o ops) Split(x act, groups int, widths ...int) []act {
	g := o.g
	gw := 0
	for _, w := range widths {
		gw += w
	}
	outs := make([]act, len(widths))
	if groups == 1 {
		off := 0
		for i, w := range widths {
			outs[i] = act{g.slice(x.a, []int{0, off}, []int{x.r, off + w}), x.r, w}
			off += w
		}
		return outs
	}
	v := g.reshape(x.a, x.r, groups, gw)
	off := 0
	for i, w := range widths {
		part := g.slice(v, []int{0, 0, off}, []int{x.r, groups, off + w})
		outs[i] = act{g.reshape(part, x.r, groups*w), x.r, groups * w}
		off += w
	}
	return outs
}

func (o ops) Concat(xs ...act) act {
	as := make([]arr, len(xs))
	c := 0
	for i, x := range xs {
		as[i] = x.a
		c += x.c
	}
	return act{o.g.concat(1, as...), xs[0].r, c}
}

func (o ops) Rows(x act, lo, hi int) act {
	if lo == 0 && hi == x.r {
		return x
	}
	return act{o.g.slice(x.a, []int{lo, 0}, []int{hi, x.c}), hi - lo, x.c}
}

func (o ops) Join(xs ...act) act {
	if len(xs) == 1 {
		return xs[0]
	}
	as := make([]arr, len(xs))
	r := 0
	for i, x := range xs {
		as[i] = x.a
		r += x.r
	}
	return act{o.g.concat(0, as...), r, xs[0].c}
}

func (o ops) Scale(x act, s float32) act {
	return act{o.g.mul(x.a, o.cast(o.g.scalar(s))), x.r, x.c}
}

// GatedNorm runs in float32 (x is the recurrence's float32 output) and returns the compute dtype.
func (o ops) GatedNorm(x, z act, w *weight, eps float32) act {
	g := o.g
	h := x.c / w.n
	n := g.rmsNorm(g.reshape(x.a, x.r, h, w.n), w.vec, eps)
	y := g.mul(n, g.silu(g.reshape(o.f32(z.a), z.r, h, w.n)))
	return act{o.cast(g.reshape(y, x.r, x.c)), x.r, x.c}
}

// Experts routes each row to its top-k experts (softmax in float32, ties to the lower id via a stable sort)
// and runs them with gathered matmuls, gate and up fused into one gather when the loader fused them.
func (o ops) Experts(m *model.MoE[*weight], x act, K int, normTopK bool) act {
	g := o.g
	T, H, I := x.r, x.c, m.Inter
	p := g.softmax(m.Router.apply(g, x.a), -1) // [T,E]
	order := g.argsort(g.neg(p), -1)
	idx := g.slice(order, []int{0, 0}, []int{T, K}) // [T,K]
	wk := g.takeAlong(p, idx, -1)
	if normTopK {
		wk = g.div(wk, g.sum(wk, -1, true))
	}
	xs := g.reshape(x.a, T, 1, 1, H)
	var gate, up arr
	if m.GateUp != nil {
		gu := m.GateUp.gather(g, xs, idx) // [T,K,1,2I]
		gate = g.slice(gu, []int{0, 0, 0, 0}, []int{T, K, 1, I})
		up = g.slice(gu, []int{0, 0, 0, I}, []int{T, K, 1, 2 * I})
	} else {
		gate, up = m.Gate.gather(g, xs, idx), m.Up.gather(g, xs, idx)
	}
	y := m.Down.gather(g, g.mul(g.silu(gate), up), idx) // [T,K,1,H]
	y = g.reshape(y, T, K, H)
	return act{g.sum(g.mul(y, g.reshape(wk, T, K, 1)), 1, false), T, H}
}
