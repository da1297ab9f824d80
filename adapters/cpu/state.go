package cpu

import (
	"math"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/model"
)

// kvCache is one attention layer's cache: rows of KVHeads·HeadDim values per position.
type kvCache struct {
	k, v []float32
}

// gdnState is one Gated DeltaNet layer's recurrent state. The conv buffer holds the last Kc−1 raw projection
// rows, oldest first (a shift buffer, so there is no ring index to save). The SSM state [Hv, dv, dk] lives in
// two ping-pong buffers: every Forward reads s[cur] and writes the other, so the pre-block state S₀ stays intact
// for tape replay until the next Forward.
type gdnState struct {
	conv []float32
	s    [2][]float32
	cur  int
}

// gdnTape is one GDN layer's record of a block (MODEL-REFERENCE §4.3).
type gdnTape struct {
	delta []float32 // [T, Hv, dv]
	y     []float32 // [T, C] post-conv rows; k̂ of key head g at row t is y[t·C+Dk+g·dk:][:dk]
	alpha []float32 // [T, Hv]
	x     []float32 // [Kc−1+T, C]: the conv state before the block, then the block's raw pre-conv rows
	s0    int       // index of the ping-pong buffer holding S₀
}

// pass is one forward's view of a sequence's state (model.State): the attention caches and recurrent
// layers of a target session, or a drafter session's context caches. touched records that a layer's state
// changed, so an interrupted pass can mark its session unusable.
type pass struct {
	pool    *kernel.Pool
	mem     *arena
	kv      []*kvCache
	gdn     []*gdnState
	tape    *Tape // nil unless the forward records one
	touched bool
}

var _ model.State[act, *weight] = (*pass)(nil)

// rotate applies RoPE to each head of x's rows, row r at position pos+r (a copy: arguments stay unwritten).
func rotate(mem *arena, x act, rope *kernel.Rope, d, pos int) []float32 {
	out := mem.get(len(x.v))
	copy(out, x.v)
	heads := x.width() / d
	half := rope.Dims / 2
	cos, sin := make([]float32, half), make([]float32, half)
	for t := range x.t {
		rope.Table(cos, sin, pos+t)
		for h := range heads {
			off := (t*heads + h) * d
			rope.Apply(out[off:off+d], cos, sin)
		}
	}
	return out
}

func (p *pass) Remember(layer int, k, v act, a model.Attend[*weight]) {
	c := p.kv[layer]
	c.k = append(c.k, rotate(p.mem, k, a.Rope.rope, a.HeadDim, a.Pos)...)
	c.v = append(c.v, v.v...)
	p.touched = true
}

// Attention is softmax attention of each query head over the visible cached keys, then the visible block
// keys, in position order; the weighted sum walks the keys in the same order (one rounding per product, never
// fused), and each (row, head) output is computed by one goroutine, so results depend neither on the worker
// count nor on the rows beside them.
func (p *pass) Attention(layer int, q, k, v act, a model.Attend[*weight]) act {
	d := a.HeadDim
	c := p.kv[layer]
	qr := rotate(p.mem, q, a.Rope.rope, d, a.Pos)
	kr := rotate(p.mem, k, a.Rope.rope, d, a.Pos)
	Hq, Hkv := q.width()/d, k.width()/d
	kvw := Hkv * d
	n := len(c.k) / kvw // cached positions, all before the block
	bs := k.t
	group := Hq / Hkv
	scale := float32(1 / math.Sqrt(float64(d)))
	hidden := func(i, j int) bool { // block key j is not visible to query slot i
		return (a.Causal && j > i) || (a.Window > 0 && (j-i >= a.Window || i-j >= a.Window))
	}
	out := p.mem.get(q.t * Hq * d)
	p.pool.For(q.t*Hq, 1, func(lo, hi int) {
		scores := make([]float32, n+bs)
		tmp := make([]float32, d)
		for idx := lo; idx < hi; idx++ {
			i, h := idx/Hq, idx%Hq
			g := h / group
			qh := qr[idx*d : (idx+1)*d]
			first := 0
			if a.Window > 0 {
				first = max(0, a.Pos+i-a.Window+1)
			}
			sc := scores[:0]
			for j := first; j < n; j++ {
				sc = append(sc, kernel.Dot(qh, c.k[j*kvw+g*d:j*kvw+g*d+d])*scale)
			}
			for j := range bs {
				if !hidden(i, j) {
					sc = append(sc, kernel.Dot(qh, kr[j*kvw+g*d:j*kvw+g*d+d])*scale)
				}
			}
			kernel.Softmax(sc)
			oh := out[idx*d : (idx+1)*d]
			s := 0
			for j := first; j < n; j++ {
				kernel.AddScaled(oh, c.v[j*kvw+g*d:j*kvw+g*d+d], tmp, sc[s])
				s++
			}
			for j := range bs {
				if !hidden(i, j) {
					kernel.AddScaled(oh, v.v[j*kvw+g*d:j*kvw+g*d+d], tmp, sc[s])
					s++
				}
			}
		}
	})
	if a.Keep {
		c.k = append(c.k, kr...)
		c.v = append(c.v, v.v...)
		p.touched = true
	}
	return act{out, q.t}
}

// DeltaNet runs one Gated DeltaNet layer's recurrence (see model.State), recording the block's innovations
// when the pass records a tape.
func (p *pass) DeltaNet(layer int, w *model.DeltaNet[*weight], pr, b, araw act) act {
	st := p.gdn[layer]
	Hk, Hv, dk, dv, Kc := w.KeyHeads, w.ValueHeads, w.KeyDim, w.ValueDim, w.ConvKernel
	Dk, Dv := Hk*dk, Hv*dv
	C := 2*Dk + Dv
	rho := Hv / Hk
	T := pr.t
	var tp *gdnTape
	if p.tape != nil {
		tp = &gdnTape{}
		p.tape.layers[layer] = tp
	}
	p.touched = true
	// The conv window X = [conv state; P], which the tape keeps as is.
	X := p.mem.get((Kc - 1 + T) * C)
	copy(X, st.conv)
	copy(X[(Kc-1)*C:], pr.v)
	if tp != nil {
		tp.x = X // never written after this point
	}
	// Causal depthwise conv over X, then SiLU.
	conv := w.Conv.vec
	Y := p.mem.get(T * C)
	fast := p.pool.Mode() == kernel.ModeFast
	p.pool.For(C, 256, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			wc := conv[c*Kc : (c+1)*Kc]
			for t := range T {
				var acc float32
				for j, wj := range wc {
					acc += float32(wj * X[(t+j)*C+c])
				}
				if fast {
					Y[t*C+c] = acc
					continue
				}
				Y[t*C+c] = kernel.SiLU(acc)
			}
		}
		if fast {
			// The fast mode's vectorized SiLU over the chunk's channels (elementwise: the same bits per row).
			for t := range T {
				kernel.SiLUFastInto(Y[t*C+lo:t*C+hi], Y[t*C+lo:t*C+hi])
			}
		}
	})
	copy(st.conv, X[T*C:])
	// L2-normalised q (scaled by dk^-1/2) and k per key head.
	qs := float32(1 / math.Sqrt(float64(dk)))
	for t := range T {
		for g := range Hk {
			kernel.L2Normalize(Y[t*C+g*dk:t*C+(g+1)*dk], 1e-6, qs)
			kernel.L2Normalize(Y[t*C+Dk+g*dk:t*C+Dk+(g+1)*dk], 1e-6, 1)
		}
	}
	negA, dtBias := w.NegA.vec, w.DtBias.vec
	beta := p.mem.get(T * Hv)
	alpha := p.mem.get(T * Hv)
	for t := range T {
		for h := range Hv {
			i := t*Hv + h
			beta[i] = kernel.Sigmoid(b.v[i])
			g := negA[h] * kernel.Softplus(araw.v[i]+dtBias[h])
			alpha[i] = float32(math.Exp(float64(g)))
		}
	}
	var delta []float32
	if tp != nil {
		delta = p.mem.get(T * Hv * dv)
		tp.alpha, tp.delta = alpha, delta
		tp.y = Y // never written after this point
		tp.s0 = st.cur
	}
	src, dst := st.s[st.cur], st.s[1-st.cur]
	o := p.mem.get(T * Dv)
	// Every operation touches one row i of a head's state at a time (decay, the memory read S_i·k̂, the rank-1
	// update S_i += δ_i k̂, the read-out S_i·q̂), so each row runs the whole block while it sits in L1: the
	// same operations in the same order as a pass over the state per step, with one pass in all.
	p.pool.For(Hv, 1, func(lo, hi int) {
		tmp := make([]float32, dk)
		for h := lo; h < hi; h++ {
			kh := h / rho
			S := dst[h*dv*dk : (h+1)*dv*dk]
			S0 := src[h*dv*dk : (h+1)*dv*dk]
			for i := range dv {
				Si, S0i := S[i*dk:(i+1)*dk], S0[i*dk:(i+1)*dk]
				for t := range T {
					khat := Y[t*C+Dk+kh*dk : t*C+Dk+(kh+1)*dk]
					qhat := Y[t*C+kh*dk : t*C+(kh+1)*dk]
					from := Si
					if t == 0 {
						from = S0i
					}
					vi := Y[t*C+2*Dk+h*dv+i]
					var di float32
					if fast {
						// One vectorized pass per step (the fast mode's dot order; the same state updates).
						o[(t*Hv+h)*dv+i], di = kernel.GDNStepFast(Si, from, khat, qhat, alpha[t*Hv+h], beta[t*Hv+h], vi)
					} else {
						decay(Si, from, alpha[t*Hv+h])
						mem := kernel.Dot(Si, khat)
						di = beta[t*Hv+h] * (vi - mem)
						kernel.AddScaled(Si, khat, tmp, di)
						o[(t*Hv+h)*dv+i] = kernel.Dot(Si, qhat)
					}
					if delta != nil {
						delta[(t*Hv+h)*dv+i] = di
					}
				}
			}
		}
	})
	st.cur = 1 - st.cur
	return act{o, T}
}

// decay sets S = α·S0 (one rounding per element). S may alias S0. Shared by the forward pass and tape replay so
// both run the same float operations.
func decay(S, S0 []float32, alpha float32) {
	kernel.ScaleInto(S, S0, alpha)
}

// rank1 adds δ ⊗ k̂ to S [dv, dk]: each product is rounded before the add (never a fused multiply-add).
func rank1(S, delta, khat, tmp []float32) {
	dk := len(khat)
	for i, di := range delta {
		kernel.AddScaled(S[i*dk:(i+1)*dk], khat, tmp, di)
	}
}

// replayGDN rebuilds a GDN layer's state after the first n steps of a taped block (MODEL-REFERENCE §4.3),
// with the forward's float operations in the forward's order.
func replayGDN(pool *kernel.Pool, w *model.DeltaNet[*weight], st *gdnState, tp *gdnTape, n int) {
	Hk, Hv, dk, dv := w.KeyHeads, w.ValueHeads, w.KeyDim, w.ValueDim
	C, Dk := w.Channels(), Hk*dk
	rho := Hv / Hk
	src, dst := st.s[tp.s0], st.s[1-tp.s0]
	if n == 0 {
		copy(dst, src)
	} else {
		pool.For(Hv, 1, func(lo, hi int) {
			tmp := make([]float32, dk)
			for h := lo; h < hi; h++ {
				kh := h / rho
				S := dst[h*dv*dk : (h+1)*dv*dk]
				S0 := src[h*dv*dk : (h+1)*dv*dk]
				for t := range n {
					if t == 0 {
						decay(S, S0, tp.alpha[t*Hv+h])
					} else {
						decay(S, S, tp.alpha[t*Hv+h])
					}
					rank1(S, tp.delta[(t*Hv+h)*dv:(t*Hv+h+1)*dv], tp.y[t*C+Dk+kh*dk:t*C+Dk+(kh+1)*dk], tmp)
				}
			}
		})
	}
	st.cur = 1 - tp.s0
	// Conv state = rows n..n+Kc−2 of [cs₀; P].
	copy(st.conv, tp.x[n*C:])
}
