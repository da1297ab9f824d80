package ops

import (
	"errors"
	"math"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// KVCache is one attention layer's cache: [1, Hkv, n, d] each (0 while empty), in the compute dtype, or with
// Q8 int8 codes with float32 scales KS, VS [1, Hkv, n, 1] (kv8.go).
type KVCache struct {
	K, V   arr
	KS, VS arr
	Q8     bool
}

// Arrays lists the cache's handles in a fixed order: K, V, then an 8-bit cache's scales.
func (c *KVCache) Arrays() []*arr {
	if c.Q8 {
		return []*arr{&c.K, &c.V, &c.KS, &c.VS}
	}
	return []*arr{&c.K, &c.V}
}

// GDNState is one GDN layer's recurrent state: conv [Kc−1, C] (raw pre-conv rows) and ssm [1, Hv, dv, dk] fp32.
type GDNState struct{ Conv, SSM arr }

// GDNTape is one GDN layer's record of a block (docs/model-math.md#the-innovation-tape): the pre-block state,
// per-step decay α [T,Hv], innovation δ [T,Hv,dv,1], keys k̂ (expanded to value heads) [T,Hv,1,dk] and the raw rows
// [T,C].
type GDNTape struct {
	t                  int
	S0, CS0            arr
	Alpha, Delta, Keys arr
	Rows               arr
}

// Pass is one graph's view of a sequence's state (model.State): a target session's caches and recurrent
// layers, or a drafter session's context caches. New state arrays are graph-owned until the session adopts
// them after evaluation.
type Pass struct {
	O    Backend
	KV   []*KVCache
	GDN  []*GDNState
	Tape *Tape // nil unless the forward records one
	// Tree, when set, runs the block as a verification tree's nodes (tree.go); nil for a sequence.
	Tree *Tree
}

// rope rotates x [1, heads, T, d] at positions pos.. (a tree's nodes at pos+depth).
func (p *Pass) rope(x arr, rs graph.RopeSpec, pos int) arr {
	if p.Tree != nil {
		return p.Tree.rope(p.O.G, x, rs, pos)
	}
	return p.O.G.Rope(x, rs, pos)
}

var _ model.State[Act, *Weight] = (*Pass)(nil)

// heads turns [T, h·d] into [1, h, T, d].
func (p *Pass) heads(x Act, d int) arr {
	g := p.O.G
	return g.Expand(g.Transpose(g.Reshape(x.A, x.R, x.C/d, d), 1, 0, 2), 0)
}

func (p *Pass) Remember(layer int, k, v Act, a model.Attend[*Weight]) {
	g := p.O.G
	c := p.KV[layer]
	kh := g.Rope(p.heads(k, a.HeadDim), *a.Rope.rope, a.Pos)
	vh := p.heads(v, a.HeadDim)
	if c.Q8 {
		p.append8(c, kh, vh)
		return
	}
	if c.K != 0 {
		kh, vh = g.Concat(2, c.K, kh), g.Concat(2, c.V, vh)
	}
	c.K, c.V = kh, vh
}

// Attention rotates q and k, then runs MLX's fused attention over [cache ; block]: with the causal mask
// when every block slot queries (lower-right aligned: slot i sees the cache and slots ≤ i), with no mask for a
// full non-causal layer, and with an explicit mask for sliding windows or a block whose queries are its first
// rows only (docs/model-math.md#drafter-layer).
func (p *Pass) Attention(layer int, q, k, v Act, a model.Attend[*Weight]) Act {
	g := p.O.G
	d := a.HeadDim
	c := p.KV[layer]
	rope := *a.Rope.rope
	qh := p.rope(p.heads(q, d), rope, a.Pos)
	kh := p.rope(p.heads(k, d), rope, a.Pos)
	vh := p.heads(v, d)
	Hkv := k.C / d
	n := 0
	if c.Q8 {
		// The block's rows as the cache will hold them (kv8.go), after the cached rows read back.
		kq, ks := quantize8(g, kh)
		vq, vs := quantize8(g, vh)
		kh, vh = dequantize8(g, kq, ks, p.O.DT), dequantize8(g, vq, vs, p.O.DT)
		if c.K != 0 {
			n = graph.ShapeOf(c.K)[2]
			kh = g.Concat(2, dequantize8(g, c.K, c.KS, p.O.DT), kh)
			vh = g.Concat(2, dequantize8(g, c.V, c.VS, p.O.DT), vh)
		}
		if a.Keep {
			c.K, c.V, c.KS, c.VS = cat2(g, c.K, kq), cat2(g, c.V, vq), cat2(g, c.KS, ks), cat2(g, c.VS, vs)
		}
	} else {
		if c.K != 0 {
			n = graph.ShapeOf(c.K)[2]
			kh, vh = g.Concat(2, c.K, kh), g.Concat(2, c.V, vh)
		}
		if a.Keep {
			c.K, c.V = kh, vh
		}
	}
	scale := float32(1 / math.Sqrt(float64(d)))
	var o arr
	switch {
	case p.Tree != nil:
		o = g.SDPAMask(qh, kh, vh, scale, p.Tree.visibility(g, n))
	case a.Window == 0 && !a.Causal:
		o = g.SDPA(qh, kh, vh, scale, false)
	case a.Window == 0 && q.R == k.R:
		o = g.SDPA(qh, kh, vh, scale, q.R > 1)
	default:
		// Drop the cached keys no query can see, mask the rest.
		lo := 0
		if a.Window > 0 {
			lo = max(0, a.Pos-a.Window+1)
		}
		if lo > 0 {
			L := n + k.R
			kh = g.Slice(kh, []int{0, 0, lo, 0}, []int{1, Hkv, L, d})
			vh = g.Slice(vh, []int{0, 0, lo, 0}, []int{1, Hkv, L, d})
		}
		mask := visibility(n, lo, q.R, k.R, a)
		o = g.SDPAMask(qh, kh, vh, scale, graph.UploadBool(g, mask, q.R, n-lo+k.R))
	}
	return Act{g.Reshape(g.Transpose(o, 0, 2, 1, 3), q.R, q.C), q.R, q.C}
}

// visibility is the [rows, n−lo+bs] mask of block queries 0..rows−1 (at positions pos+i, pos = n) over cached
// keys lo..n−1 and block keys 0..bs−1, as the CPU backend's attention: a cached key j is visible when
// pos+i−j < W (any key without a window), a block key j when |i−j| < W and, for causal layers, j ≤ i.
func visibility(n, lo, rows, bs int, a model.Attend[*Weight]) []bool {
	cols := n - lo + bs
	m := make([]bool, rows*cols)
	for i := range rows {
		for c := range cols {
			if c < n-lo {
				m[i*cols+c] = a.Window == 0 || a.Pos+i-(lo+c) < a.Window
				continue
			}
			j := c - (n - lo)
			m[i*cols+c] = (!a.Causal || j <= i) && (a.Window == 0 || (i-j < a.Window && j-i < a.Window))
		}
	}
	return m
}

// DeltaNet runs the recurrence sequentially in float32 (see model.State), updating the layer's state and,
// when the pass records a tape, recording it.
func (p *Pass) DeltaNet(layer int, w *model.DeltaNet[*Weight], pr, b, ar Act) Act {
	g := p.O.G
	st := p.GDN[layer]
	Hk, Hv, dk, dv, Kc := w.KeyHeads, w.ValueHeads, w.KeyDim, w.ValueDim, w.ConvKernel
	rho := Hv / Hk
	Dk, C, T := Hk*dk, w.Channels(), pr.R
	tr := p.Tree
	var tp *GDNTape
	switch {
	case tr != nil:
		tp = &GDNTape{}
		tr.Layers[layer] = tp
	case p.Tape != nil:
		tp = &GDNTape{}
		p.Tape.Layers[layer] = tp
	}
	// The conv, the recurrence and its state run in float32 whatever the compute dtype.
	P, ba, aa := p.O.F32(pr.A), p.O.F32(b.A), p.O.F32(ar.A)
	// Causal depthwise conv over X = [cs ; P], then SiLU. A tree's node reads its ancestors' rows: the same
	// products and sums as a chain's, on gathered rows.
	X := g.Concat(0, st.Conv, P)
	var Y arr
	for j := range Kc {
		var xj arr
		if tr != nil {
			xj = g.Take(X, tr.convRows(g, j, Kc), 0)
		} else {
			xj = g.Slice(X, []int{j, 0}, []int{j + T, C})
		}
		term := g.Mul(xj, g.Slice(w.Conv.vec, []int{j, 0}, []int{j + 1, C}))
		if j == 0 {
			Y = term
		} else {
			Y = g.Add(Y, term)
		}
	}
	Y = g.SiLU(Y)
	q := g.Reshape(g.Slice(Y, []int{0, 0}, []int{T, Dk}), T, Hk, dk)
	k := g.Reshape(g.Slice(Y, []int{0, Dk}, []int{T, 2 * Dk}), T, Hk, dk)
	v := g.Reshape(g.Slice(Y, []int{0, 2 * Dk}, []int{T, C}), T, Hv, dv)
	q = g.Mul(g.L2Norm(q, 1e-6), g.Scalar(float32(1/math.Sqrt(float64(dk)))))
	k = g.L2Norm(k, 1e-6)
	// Key head κ = ⌊h/ρ⌋ serves value heads κρ..κρ+ρ−1: repeat each key head ρ times.
	expandHeads := func(x arr) arr {
		if rho == 1 {
			return x
		}
		x = g.Expand(x, 2) // [T,Hk,1,dk]
		x = g.Concat(2, repeat(x, rho)...)
		return g.Reshape(x, T, Hv, dk)
	}
	qh := g.Reshape(expandHeads(q), T, Hv, dk, 1) // column vectors
	kh := g.Reshape(expandHeads(k), T, Hv, 1, dk) // row vectors
	beta := g.Reshape(g.Sigmoid(ba), T, Hv, 1, 1)
	gl := g.Mul(w.NegA.vec, g.Softplus(g.Add(aa, w.DtBias.vec)))
	alpha := g.Reshape(g.Exp(gl), T, Hv, 1, 1)
	vcol := g.Reshape(v, T, Hv, dv, 1)
	S := st.SSM
	outs := make([]arr, T)
	var deltas []arr
	var states []arr // a tree's state after each node
	if tr != nil {
		states = make([]arr, T)
	}
	// The state is [1,Hv,dv,dk] and every per-step operand keeps its leading axis of 1, so a step is a slice
	// (none when T is 1) plus the arithmetic: no reshapes on the hot path.
	for t := range T {
		at := g.Row(alpha, t, T, Hv, 1, 1)
		bt := g.Row(beta, t, T, Hv, 1, 1)
		kt := g.Row(kh, t, T, Hv, 1, dk) // [1,Hv,1,dk]
		qt := g.Row(qh, t, T, Hv, dk, 1) // [1,Hv,dk,1]
		vt := g.Row(vcol, t, T, Hv, dv, 1)
		if tr != nil {
			// A node continues its parent's state (the layer's own for a root).
			if par := tr.Parents[t]; par >= 0 {
				S = states[par]
			} else {
				S = st.SSM
			}
		}
		S = g.Mul(at, S)                                // decay (its own rounding step)
		mem := g.Matmul(S, g.Transpose(kt, 0, 1, 3, 2)) // [1,Hv,dv,1]
		delta := g.Mul(bt, g.Sub(vt, mem))              // [1,Hv,dv,1]
		S = g.Add(S, g.Mul(delta, kt))                  // rank-1 write
		outs[t] = g.Matmul(S, qt)                       // [1,Hv,dv,1]
		if tp != nil {
			deltas = append(deltas, delta)
		}
		if tr != nil {
			states[t] = S
		}
	}
	if tp != nil {
		tp.t, tp.S0, tp.CS0 = T, st.SSM, st.Conv
		tp.Alpha, tp.Keys, tp.Rows = alpha, kh, P
		tp.Delta = g.Concat(0, deltas...) // [T,Hv,dv,1]
	}
	if tr == nil {
		// A tree leaves the layer's state as it was: the session replays the kept path from the tape.
		st.SSM, st.Conv = S, g.Slice(X, []int{T, 0}, []int{T + Kc - 1, C})
	}
	return Act{g.Reshape(g.Concat(0, outs...), T, Hv*dv), T, Hv * dv}
}

func repeat(x arr, n int) []arr {
	out := make([]arr, n)
	for i := range out {
		out[i] = x
	}
	return out
}

// Replay rebuilds a GDN layer's state after the first n steps of a taped block with the forward's op order
// (decay, then rank-1 add), so it is bit-exact with the forward on MLX.
func Replay(g *graph.Graph, w *model.DeltaNet[*Weight], tp *GDNTape, n int) (ssm, conv arr) {
	Hv, dv, dk, C, Kc := w.ValueHeads, w.ValueDim, w.KeyDim, w.Channels(), w.ConvKernel
	S := tp.S0
	for t := range n {
		at := g.Row(tp.Alpha, t, tp.t, Hv, 1, 1)
		kt := g.Row(tp.Keys, t, tp.t, Hv, 1, dk)
		dt := g.Row(tp.Delta, t, tp.t, Hv, dv, 1)
		S = g.Mul(at, S)
		S = g.Add(S, g.Mul(dt, kt))
	}
	X := g.Concat(0, tp.CS0, tp.Rows)
	return S, g.Slice(X, []int{n, 0}, []int{n + Kc - 1, C})
}

// Tape is a block's recurrent record (see ports.Tape); valid until the session's next Forward.
type Tape struct {
	model.TapeHeader
	Sess   any // the adapters/mlx *Session it was taken from, which frees it
	Layers []*GDNTape
}

var _ ports.Tape = (*Tape)(nil)

// KVPrefix returns a cache of evaluated handles to the first n positions of c's [1, h, N, d] K/V pair (and
// of an 8-bit cache's [1, h, N, 1] scales), owned by the caller, and the bytes they keep alive.
func KVPrefix(g *graph.Graph, c *KVCache, n, heads, dim int) (KVCache, int64) {
	out := KVCache{Q8: c.Q8}
	var held int64
	out.K, out.V, held = pairPrefix(g, c.K, c.V, n, heads, dim)
	if c.Q8 {
		var h int64
		out.KS, out.VS, h = pairPrefix(g, c.KS, c.VS, n, heads, 1)
		held += h
	}
	return out, held
}

// pairPrefix returns evaluated handles to the first n positions of a [1, h, N, d] pair (the arrays
// themselves when n == N), owned by the caller, and the bytes they keep alive. A shorter prefix is made
// contiguous, which copies it when h > 1 (the rows of a head are not adjacent); with one head MLX may keep
// the source's buffer, so the whole source is counted.
func pairPrefix(g *graph.Graph, K, V arr, n, heads, dim int) (k, v arr, held int64) {
	if K == 0 || g.Err != nil {
		return 0, 0, 0
	}
	if graph.ShapeOf(K)[2] == n {
		k, err1 := graph.Dup(g.Runtime, K)
		v, err2 := graph.Dup(g.Runtime, V)
		if err := errors.Join(err1, err2); err != nil {
			g.Fail(err)
			for _, h := range []arr{k, v} {
				if h != 0 {
					mlxc.ArrayFree(h)
				}
			}
			return 0, 0, 0
		}
		return k, v, graph.ArrBytes(k) + graph.ArrBytes(v)
	}
	k = g.Contiguous(g.Slice(K, []int{0, 0, 0, 0}, []int{1, heads, n, dim}))
	v = g.Contiguous(g.Slice(V, []int{0, 0, 0, 0}, []int{1, heads, n, dim}))
	g.Eval(k, v)
	if g.Err != nil {
		return 0, 0, 0
	}
	held = graph.ArrBytes(k) + graph.ArrBytes(v)
	if heads == 1 {
		held = graph.ArrBytes(K) + graph.ArrBytes(V)
	}
	return g.Keep(k), g.Keep(v), held
}
