package mlx

import (
	"errors"
	"math"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// kvCache is one attention layer's cache: [1, Hkv, n, d] each (0 while empty).
type kvCache struct{ k, v arr }

// gdnState is one GDN layer's recurrent state: conv [Kc−1, C] (raw pre-conv rows) and ssm [1, Hv, dv, dk] fp32.
type gdnState struct{ conv, ssm arr }

// gdnTape is one GDN layer's record of a block (docs/model-math.md#the-innovation-tape): the pre-block state,
// per-step decay α [T,Hv], innovation δ [T,Hv,dv,1], keys k̂ (expanded to value heads) [T,Hv,1,dk] and the raw rows
// [T,C].
type gdnTape struct {
	t                  int
	s0, cs0            arr
	alpha, delta, keys arr
	rows               arr
}

// pass is one graph's view of a sequence's state (model.State): a target session's caches and recurrent
// layers, or a drafter session's context caches. New state arrays are graph-owned until the session adopts
// them after evaluation.
type pass struct {
	o    ops
	kv   []*kvCache
	gdn  []*gdnState
	tape *Tape // nil unless the forward records one
}

var _ model.State[act, *weight] = (*pass)(nil)

// heads turns [T, h·d] into [1, h, T, d].
func (p *pass) heads(x act, d int) arr {
	g := p.o.g
	return g.expand(g.transpose(g.reshape(x.a, x.r, x.c/d, d), 1, 0, 2), 0)
}

func (p *pass) Remember(layer int, k, v act, a model.Attend[*weight]) {
	g := p.o.g
	c := p.kv[layer]
	kh := g.rope(p.heads(k, a.HeadDim), *a.Rope.rope, a.Pos)
	vh := p.heads(v, a.HeadDim)
	if c.k != 0 {
		kh, vh = g.concat(2, c.k, kh), g.concat(2, c.v, vh)
	}
	c.k, c.v = kh, vh
}

// Attention rotates q and k, then runs MLX's fused attention over [cache ; block]: with the causal mask
// when every block slot queries (lower-right aligned: slot i sees the cache and slots ≤ i), with no mask for a
// full non-causal layer, and with an explicit mask for sliding windows or a block whose queries are its first
// rows only (docs/model-math.md#drafter-layer).
func (p *pass) Attention(layer int, q, k, v act, a model.Attend[*weight]) act {
	g := p.o.g
	d := a.HeadDim
	c := p.kv[layer]
	rope := *a.Rope.rope
	qh := g.rope(p.heads(q, d), rope, a.Pos)
	kh := g.rope(p.heads(k, d), rope, a.Pos)
	vh := p.heads(v, d)
	Hkv := k.c / d
	n := 0
	if c.k != 0 {
		n = shapeOf(c.k)[2]
		kh, vh = g.concat(2, c.k, kh), g.concat(2, c.v, vh)
	}
	if a.Keep {
		c.k, c.v = kh, vh
	}
	scale := float32(1 / math.Sqrt(float64(d)))
	var o arr
	switch {
	case a.Window == 0 && !a.Causal:
		o = g.sdpa(qh, kh, vh, scale, false)
	case a.Window == 0 && q.r == k.r:
		o = g.sdpa(qh, kh, vh, scale, q.r > 1)
	default:
		// Drop the cached keys no query can see, mask the rest.
		lo := 0
		if a.Window > 0 {
			lo = max(0, a.Pos-a.Window+1)
		}
		if lo > 0 {
			L := n + k.r
			kh = g.slice(kh, []int{0, 0, lo, 0}, []int{1, Hkv, L, d})
			vh = g.slice(vh, []int{0, 0, lo, 0}, []int{1, Hkv, L, d})
		}
		mask := visibility(n, lo, q.r, k.r, a)
		o = g.sdpaMask(qh, kh, vh, scale, uploadBool(g, mask, q.r, n-lo+k.r))
	}
	return act{g.reshape(g.transpose(o, 0, 2, 1, 3), q.r, q.c), q.r, q.c}
}

// visibility is the [rows, n−lo+bs] mask of block queries 0..rows−1 (at positions pos+i, pos = n) over cached
// keys lo..n−1 and block keys 0..bs−1, as the CPU backend's attention: a cached key j is visible when
// pos+i−j < W (any key without a window), a block key j when |i−j| < W and, for causal layers, j ≤ i.
func visibility(n, lo, rows, bs int, a model.Attend[*weight]) []bool {
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
func (p *pass) DeltaNet(layer int, w *model.DeltaNet[*weight], pr, b, ar act) act {
	g := p.o.g
	st := p.gdn[layer]
	Hk, Hv, dk, dv, Kc := w.KeyHeads, w.ValueHeads, w.KeyDim, w.ValueDim, w.ConvKernel
	rho := Hv / Hk
	Dk, C, T := Hk*dk, w.Channels(), pr.r
	var tp *gdnTape
	if p.tape != nil {
		tp = &gdnTape{}
		p.tape.layers[layer] = tp
	}
	// The conv, the recurrence and its state run in float32 whatever the compute dtype.
	P, ba, aa := p.o.f32(pr.a), p.o.f32(b.a), p.o.f32(ar.a)
	// Causal depthwise conv over X = [cs ; P], then SiLU.
	X := g.concat(0, st.conv, P)
	var Y arr
	for j := range Kc {
		term := g.mul(g.slice(X, []int{j, 0}, []int{j + T, C}), g.slice(w.Conv.vec, []int{j, 0}, []int{j + 1, C}))
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
	beta := g.reshape(g.sigmoid(ba), T, Hv, 1, 1)
	gl := g.mul(w.NegA.vec, g.softplus(g.add(aa, w.DtBias.vec)))
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
	return act{g.reshape(g.concat(0, outs...), T, Hv*dv), T, Hv * dv}
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
func replay(g *graph, w *model.DeltaNet[*weight], tp *gdnTape, n int) (ssm, conv arr) {
	Hv, dv, dk, C, Kc := w.ValueHeads, w.ValueDim, w.KeyDim, w.Channels(), w.ConvKernel
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

// Tape is a block's recurrent record (see ports.Tape); valid until the session's next Forward.
type Tape struct {
	model.TapeHeader
	sess   any // the *Session it was taken from
	layers []*gdnTape
}

var _ ports.Tape = (*Tape)(nil)

// kvPrefix returns evaluated handles to the first n positions of a [1, h, N, d] K/V pair (the arrays
// themselves when n == N), owned by the caller, and the bytes they keep alive. A shorter prefix is made
// contiguous, which copies it when h > 1 (the rows of a head are not adjacent); with one head MLX may keep
// the source's buffer, so the whole source is counted.
func kvPrefix(g *graph, c *kvCache, n, heads, dim int) (k, v arr, held int64) {
	if c.k == 0 || g.err != nil {
		return 0, 0, 0
	}
	if shapeOf(c.k)[2] == n {
		k, err1 := dup(g.rt, c.k)
		v, err2 := dup(g.rt, c.v)
		if err := errors.Join(err1, err2); err != nil {
			g.fail(err)
			for _, h := range []arr{k, v} {
				if h != 0 {
					mlxc.ArrayFree(h)
				}
			}
			return 0, 0, 0
		}
		return k, v, arrBytes(k) + arrBytes(v)
	}
	k = g.contiguous(g.slice(c.k, []int{0, 0, 0, 0}, []int{1, heads, n, dim}))
	v = g.contiguous(g.slice(c.v, []int{0, 0, 0, 0}, []int{1, heads, n, dim}))
	g.eval(k, v)
	if g.err != nil {
		return 0, 0, 0
	}
	held = arrBytes(k) + arrBytes(v)
	if heads == 1 {
		held = arrBytes(c.k) + arrBytes(c.v)
	}
	return g.keep(k), g.keep(v), held
}
