package mlx

import (
	"math"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/ports"
)

// attnState is one attention layer's KV cache: [1, Hkv, n, d] each (0 while empty).
type attnState struct{ k, v arr }

// gdnState is one GDN layer's recurrent state: conv [Kc−1, C] (raw pre-conv rows) and ssm [1, Hv, dv, dk] fp32.
type gdnState struct{ conv, ssm arr }

// gdnTape is one GDN layer's record of a block (MODEL-REFERENCE §4.3): the pre-block state, per-step decay
// α [T,Hv], innovation δ [T,Hv,dv,1], keys k̂ (expanded to value heads) [T,Hv,1,dk] and the raw rows [T,C].
type gdnTape struct {
	t                  int
	s0, cs0            arr
	alpha, delta, keys arr
	rows               arr
}

// embed looks up token rows [T,H] (dequantized when the embedding is quantized).
func (m *model) embedRows(g *graph, ids arr) arr {
	if !m.embed.quantized() {
		return g.take(m.embedF, ids, 0)
	}
	e := m.embed
	w := g.take(e.w, ids, 0)
	s := g.take(e.scales, ids, 0)
	b := g.take(e.biase, ids, 0)
	if g.err != nil {
		return 0
	}
	mode := mlxc.CString("affine")
	var r arr
	return g.done("dequantize", mlxc.Dequantize(&r, w, s, b, mlxc.SomeInt(e.group), mlxc.SomeInt(e.bits), mode, 0,
		mlxc.SomeDtype(m.dt), g.s), r)
}

// attention runs one (optionally gated) attention layer on h [T,H] at positions n.., appending to st.
func (m *model) attention(g *graph, w *attnWeights, st *attnState, h arr, T, n int) arr {
	a := &m.arch
	d := a.HeadDim
	q := w.q.apply(g, h)
	var gate arr
	if a.OutputGate {
		q2 := g.reshape(q, T, a.Heads, 2*d)
		q = g.slice(q2, []int{0, 0, 0}, []int{T, a.Heads, d})
		gate = g.reshape(g.slice(q2, []int{0, 0, d}, []int{T, a.Heads, 2 * d}), T, a.Heads*d)
	} else {
		q = g.reshape(q, T, a.Heads, d)
	}
	k := g.reshape(w.k.apply(g, h), T, a.KVHeads, d)
	v := g.reshape(w.v.apply(g, h), T, a.KVHeads, d)
	q = g.rmsNorm(q, w.qNorm, a.Eps)
	k = g.rmsNorm(k, w.kNorm, a.Eps)
	q = g.rope(g.expand(g.transpose(q, 1, 0, 2), 0), m.rope, n)
	k = g.rope(g.expand(g.transpose(k, 1, 0, 2), 0), m.rope, n)
	v = g.expand(g.transpose(v, 1, 0, 2), 0)
	if st.k != 0 {
		k = g.concat(2, st.k, k)
		v = g.concat(2, st.v, v)
	}
	st.k, st.v = k, v // graph-owned until the session adopts them after evaluation
	o := g.sdpa(q, k, v, float32(1/math.Sqrt(float64(d))), T > 1)
	o = g.reshape(g.transpose(o, 0, 2, 1, 3), T, a.Heads*d)
	if gate != 0 {
		o = g.mul(o, g.sigmoid(gate))
	}
	return w.o.apply(g, o)
}

// softplus is max(x,0) + log1p(exp(−|x|)) (the stable form).
func (g *graph) softplus(x arr) arr {
	return g.add(g.maximum(x, g.scalar(0)), g.log1p(g.exp(g.neg(g.abs(x)))))
}

// l2norm divides by sqrt(Σx² + eps) over the last axis.
func (g *graph) l2norm(x arr, eps float32) arr {
	return g.div(x, g.sqrt(g.add(g.sum(g.square(x), -1, true), g.scalar(eps))))
}

// gdn runs one Gated DeltaNet layer on h [T,H] with the sequential recurrence in fp32, updating st and, when
// tp is non-nil, recording the tape.
func (m *model) gdn(g *graph, w *gdnWeights, st *gdnState, h arr, T int, tp *gdnTape) arr {
	a := &m.arch
	Hk, Hv, dk, dv, Kc := a.KeyHeads, a.ValueHeads, a.KeyDim, a.ValueDim, a.ConvKernel
	rho := Hv / Hk
	Dk, Dv, C := Hk*dk, Hv*dv, a.ConvDim()
	var P, z, b, ar arr
	if w.qkvz != nil {
		U := g.reshape(w.qkvz.apply(g, h), T, Hk, 2*dk+2*rho*dv)
		q := g.reshape(g.slice(U, []int{0, 0, 0}, []int{T, Hk, dk}), T, Dk)
		k := g.reshape(g.slice(U, []int{0, 0, dk}, []int{T, Hk, 2 * dk}), T, Dk)
		v := g.reshape(g.slice(U, []int{0, 0, 2 * dk}, []int{T, Hk, 2*dk + rho*dv}), T, Dv)
		z = g.reshape(g.slice(U, []int{0, 0, 2*dk + rho*dv}, []int{T, Hk, 2*dk + 2*rho*dv}), T, Hv, dv)
		P = g.concat(1, q, k, v)
		B := g.reshape(w.ba.apply(g, h), T, Hk, 2*rho)
		b = g.reshape(g.slice(B, []int{0, 0, 0}, []int{T, Hk, rho}), T, Hv)
		ar = g.reshape(g.slice(B, []int{0, 0, rho}, []int{T, Hk, 2 * rho}), T, Hv)
	} else {
		P = w.qkv.apply(g, h)
		z = g.reshape(w.z.apply(g, h), T, Hv, dv)
		b = w.b.apply(g, h)
		ar = w.a.apply(g, h)
	}
	// The conv, the recurrence and its state run in float32 whatever the compute dtype.
	P, z, b, ar = m.f32(g, P), m.f32(g, z), m.f32(g, b), m.f32(g, ar)
	// Causal depthwise conv over X = [cs ; P], then SiLU.
	X := g.concat(0, st.conv, P)
	var Y arr
	for j := range Kc {
		term := g.mul(g.slice(X, []int{j, 0}, []int{j + T, C}), g.slice(w.conv, []int{j, 0}, []int{j + 1, C}))
		if j == 0 {
			Y = term
		} else {
			Y = g.add(Y, term)
		}
	}
	Y = g.silu(Y)
	newConv := g.slice(X, []int{T, 0}, []int{T + Kc - 1, C})
	q := g.reshape(g.slice(Y, []int{0, 0}, []int{T, Dk}), T, Hk, dk)
	k := g.reshape(g.slice(Y, []int{0, Dk}, []int{T, 2 * Dk}), T, Hk, dk)
	v := g.reshape(g.slice(Y, []int{0, 2 * Dk}, []int{T, C}), T, Hv, dv)
	q = g.mul(g.l2norm(q, 1e-6), g.scalar(float32(1/math.Sqrt(float64(dk)))))
	k = g.l2norm(k, 1e-6)
	// Key head κ = ⌊h/ρ⌋ serves value heads κρ..κρ+ρ−1: repeat each key head ρ times.
	expandHeads := func(x arr) arr {
		if rho == 1 {
			return x
		}
		x = g.expand(x, 2) // [T,Hk,1,dk]
		x = g.concat(2, repeat(x, rho)...)
		return g.reshape(x, T, Hv, dk)
	}
	qh := g.reshape(expandHeads(q), T, Hv, dk, 1) // column vectors
	kh := g.reshape(expandHeads(k), T, Hv, 1, dk) // row vectors
	beta := g.reshape(g.sigmoid(b), T, Hv, 1, 1)  // [T,Hv,1,1]
	gl := g.mul(w.negA, g.softplus(g.add(ar, w.dtBias)))
	alpha := g.reshape(g.exp(gl), T, Hv, 1, 1)
	vcol := g.reshape(v, T, Hv, dv, 1)
	S := st.ssm
	outs := make([]arr, T)
	var deltas []arr
	// The state is [1,Hv,dv,dk] and every per-step operand keeps its leading axis of 1, so a step is a slice
	// (none when T is 1) plus the arithmetic: no reshapes on the hot path.
	for t := range T {
		at := g.row(alpha, t, T, Hv, 1, 1)
		bt := g.row(beta, t, T, Hv, 1, 1)
		kt := g.row(kh, t, T, Hv, 1, dk) // [1,Hv,1,dk]
		qt := g.row(qh, t, T, Hv, dk, 1) // [1,Hv,dk,1]
		vt := g.row(vcol, t, T, Hv, dv, 1)
		S = g.mul(at, S)                                // decay (its own rounding step)
		mem := g.matmul(S, g.transpose(kt, 0, 1, 3, 2)) // [1,Hv,dv,1]
		delta := g.mul(bt, g.sub(vt, mem))              // [1,Hv,dv,1]
		S = g.add(S, g.mul(delta, kt))                  // rank-1 write
		outs[t] = g.matmul(S, qt)                       // [1,Hv,dv,1]
		if tp != nil {
			deltas = append(deltas, delta)
		}
	}
	if tp != nil {
		tp.t, tp.s0, tp.cs0 = T, st.ssm, st.conv
		tp.alpha, tp.keys, tp.rows = alpha, kh, P
		tp.delta = g.concat(0, deltas...) // [T,Hv,dv,1]
	}
	st.ssm, st.conv = S, newConv
	o := g.reshape(g.concat(0, outs...), T, Hv, dv)
	o = g.mul(g.rmsNorm(o, w.norm, a.Eps), g.silu(z))
	return w.out.apply(g, m.cast(g, g.reshape(o, T, Dv)))
}

// row returns x[t:t+1] of x [T, dims...] (x itself when T is 1).
func (g *graph) row(x arr, t, T int, dims ...int) arr {
	if T == 1 {
		return x
	}
	start, stop := make([]int, len(dims)+1), append([]int{t + 1}, dims...)
	start[0] = t
	return g.slice(x, start, stop)
}

func repeat(x arr, n int) []arr {
	out := make([]arr, n)
	for i := range out {
		out[i] = x
	}
	return out
}

// replay rebuilds a GDN layer's state after the first n steps of a taped block with the forward's op order
// (decay, then rank-1 add), so it is bit-exact with the forward on MLX.
func (m *model) replay(g *graph, tp *gdnTape, n int) (ssm, conv arr) {
	a := &m.arch
	Hv, dv, dk, C, Kc := a.ValueHeads, a.ValueDim, a.KeyDim, a.ConvDim(), a.ConvKernel
	S := tp.s0
	for t := range n {
		at := g.row(tp.alpha, t, tp.t, Hv, 1, 1)
		kt := g.row(tp.keys, t, tp.t, Hv, 1, dk)
		dt := g.row(tp.delta, t, tp.t, Hv, dv, 1)
		S = g.mul(at, S)
		S = g.add(S, g.mul(dt, kt))
	}
	X := g.concat(0, tp.cs0, tp.rows)
	return S, g.slice(X, []int{n, 0}, []int{n + Kc - 1, C})
}

// ffn is the SwiGLU block with gate and up fused: one matmul, split, silu(gate)·up, down.
func (m *model) ffn(g *graph, w *ffnWeights, h arr, T int) arr {
	var gate, up arr
	if w.gateUp != nil {
		gu := w.gateUp.apply(g, h)
		I := w.inter
		gate = g.slice(gu, []int{0, 0}, []int{T, I})
		up = g.slice(gu, []int{0, I}, []int{T, 2 * I})
	} else {
		gate, up = w.gate.apply(g, h), w.up.apply(g, h)
	}
	return w.down.apply(g, g.mul(g.silu(gate), up))
}

// moe routes each row to its top-k experts (softmax in fp32, ties to the lower id via a stable sort) and runs
// them with gathered matmuls, gate and up fused into one gather.
func (m *model) moe(g *graph, w *moeWeights, h arr, T int) arr {
	a := &m.arch
	K, I, H := a.TopK, a.MoEIntermediate, a.Hidden
	p := g.softmax(w.router.apply(g, h), -1) // [T,E]
	order := g.argsort(g.neg(p), -1)
	idx := g.slice(order, []int{0, 0}, []int{T, K}) // [T,K]
	wk := g.takeAlong(p, idx, -1)
	if a.NormTopK {
		wk = g.div(wk, g.sum(wk, -1, true))
	}
	x := g.reshape(h, T, 1, 1, H)
	var gate, up arr
	if w.gateUp != nil {
		gu := w.gateUp.gather(g, x, idx) // [T,K,1,2I]
		gate = g.slice(gu, []int{0, 0, 0, 0}, []int{T, K, 1, I})
		up = g.slice(gu, []int{0, 0, 0, I}, []int{T, K, 1, 2 * I})
	} else {
		gate, up = w.gate.gather(g, x, idx), w.up.gather(g, x, idx)
	}
	y := w.down.gather(g, g.mul(g.silu(gate), up), idx) // [T,K,1,H]
	y = g.reshape(y, T, K, H)
	y = g.sum(g.mul(y, g.reshape(wk, T, K, 1)), 1, false) // [T,H]
	if w.shared != nil {
		s := m.ffn(g, w.shared, h, T)
		if w.sharedGate != nil {
			s = g.mul(s, g.sigmoid(w.sharedGate.apply(g, h)))
		}
		y = g.add(y, s)
	}
	return y
}

// layerForward runs decoder layer i on x [T,H] and returns the new residual stream.
func (m *model) layerForward(g *graph, i int, x arr, T, n int, st *sessState, tp *gdnTape) arr {
	a := &m.arch
	ly := &m.layers[i]
	h := g.rmsNorm(x, ly.inNorm, a.Eps)
	var out arr
	if ly.kind == ports.LayerAttention {
		out = m.attention(g, ly.attn, st.attn[i], h, T, n)
	} else {
		out = m.gdn(g, ly.gdn, st.gdn[i], h, T, tp)
	}
	x = g.add(x, out)
	h = g.rmsNorm(x, ly.postNorm, a.Eps)
	if ly.moe != nil {
		out = m.moe(g, ly.moe, h, T)
	} else {
		out = m.ffn(g, ly.mlp, h, T)
	}
	return g.add(x, out)
}

// sessState is the per-layer state a forward pass reads and replaces.
type sessState struct {
	attn []*attnState
	gdn  []*gdnState
}
