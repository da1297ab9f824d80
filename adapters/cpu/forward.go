package cpu

import (
	"cmp"
	"math"
	"slices"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
)

// attnState is one attention layer's KV cache: rows of KVHeads·HeadDim per position.
type attnState struct {
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

// attention runs gated/plain GQA attention for T rows of a (already input-normed) at positions pos..pos+T−1,
// appending to st, and writes the projected output into out [T,H].
func (m *model) attention(w *attnWeights, st *attnState, a, out []float32, T, pos int) {
	ar := &m.arch
	Hq, Hkv, d := ar.Heads, ar.KVHeads, ar.HeadDim
	qw := Hq * d
	if ar.OutputGate {
		qw *= 2
	}
	q2 := make([]float32, T*qw)
	w.q.Forward(q2, a, T)
	kNew := make([]float32, T*Hkv*d)
	vNew := make([]float32, T*Hkv*d)
	w.k.Forward(kNew, a, T)
	w.v.Forward(vNew, a, T)
	q := q2
	var gate []float32
	if ar.OutputGate {
		// Per head the projection holds [query | gate].
		q = make([]float32, T*Hq*d)
		gate = make([]float32, T*Hq*d)
		for t := range T {
			for h := range Hq {
				src := q2[(t*Hq+h)*2*d:]
				copy(q[(t*Hq+h)*d:(t*Hq+h+1)*d], src[:d])
				copy(gate[(t*Hq+h)*d:(t*Hq+h+1)*d], src[d:2*d])
			}
		}
	}
	kernel.RMSNorm(q, q, w.qNorm, ar.Eps)
	kernel.RMSNorm(kNew, kNew, w.kNorm, ar.Eps)
	half := m.rope.Dims / 2
	cos, sin := make([]float32, half), make([]float32, half)
	for t := range T {
		m.rope.Table(cos, sin, pos+t)
		for h := range Hq {
			m.rope.Apply(q[(t*Hq+h)*d:(t*Hq+h+1)*d], cos, sin)
		}
		for h := range Hkv {
			m.rope.Apply(kNew[(t*Hkv+h)*d:(t*Hkv+h+1)*d], cos, sin)
		}
	}
	st.k = append(st.k, kNew...)
	st.v = append(st.v, vNew...)
	o := make([]float32, T*Hq*d)
	scale := float32(1 / math.Sqrt(float64(d)))
	group := Hq / Hkv
	kvw := Hkv * d
	m.pool.For(T*Hq, 1, func(lo, hi int) {
		scores := make([]float32, pos+T)
		tmp := make([]float32, d)
		for i := lo; i < hi; i++ {
			t, h := i/Hq, i%Hq
			kv := h / group
			qh := q[i*d : (i+1)*d]
			n := pos + t + 1 // causal: keys 0..pos+t
			sc := scores[:n]
			for p := range n {
				sc[p] = kernel.Dot(qh, st.k[p*kvw+kv*d:p*kvw+kv*d+d]) * scale
			}
			kernel.Softmax(sc)
			oh := o[i*d : (i+1)*d]
			for p, wgt := range sc {
				kernel.AddScaled(oh, st.v[p*kvw+kv*d:p*kvw+kv*d+d], tmp, wgt)
			}
			if gate != nil {
				g := gate[i*d : (i+1)*d]
				for j := range oh {
					oh[j] *= kernel.Sigmoid(g[j])
				}
			}
		}
	})
	w.o.Forward(out, o, T)
}

// gdn runs one Gated DeltaNet layer over T rows of a, updating st, and writes the output projection into out.
// When tp is non-nil the block's innovations are recorded into it.
func (m *model) gdn(w *gdnWeights, st *gdnState, a, out []float32, T int, tp *gdnTape) {
	ar := &m.arch
	Hk, Hv, dk, dv, Kc := ar.KeyHeads, ar.ValueHeads, ar.KeyDim, ar.ValueDim, ar.ConvKernel
	Dk, Dv := Hk*dk, Hv*dv
	C := 2*Dk + Dv
	rho := Hv / Hk
	// The projection is written straight into the conv window X = [conv state; P], which the tape keeps as is.
	X := make([]float32, (Kc-1+T)*C)
	copy(X, st.conv)
	P := X[(Kc-1)*C:]
	z := make([]float32, T*Dv)
	b := make([]float32, T*Hv)
	araw := make([]float32, T*Hv)
	if w.qkvz != nil {
		// Qwen3-Next: outputs grouped by key head: [q_g | k_g | v (ρ heads) | z (ρ heads)] and [b (ρ) | a (ρ)].
		gw := 2*dk + 2*rho*dv
		U := make([]float32, T*Hk*gw)
		w.qkvz.Forward(U, a, T)
		B := make([]float32, T*2*Hv)
		w.ba.Forward(B, a, T)
		for t := range T {
			for g := range Hk {
				u := U[(t*Hk+g)*gw:]
				pr := P[t*C:]
				copy(pr[g*dk:(g+1)*dk], u[:dk])
				copy(pr[Dk+g*dk:Dk+(g+1)*dk], u[dk:2*dk])
				copy(pr[2*Dk+g*rho*dv:2*Dk+(g+1)*rho*dv], u[2*dk:2*dk+rho*dv])
				copy(z[t*Dv+g*rho*dv:t*Dv+(g+1)*rho*dv], u[2*dk+rho*dv:gw])
				bb := B[(t*Hk+g)*2*rho:]
				copy(b[t*Hv+g*rho:t*Hv+(g+1)*rho], bb[:rho])
				copy(araw[t*Hv+g*rho:t*Hv+(g+1)*rho], bb[rho:2*rho])
			}
		}
	} else {
		w.qkv.Forward(P, a, T)
		w.z.Forward(z, a, T)
		w.b.Forward(b, a, T)
		w.a.Forward(araw, a, T)
	}
	if tp != nil {
		tp.x = X // never written after this point
	}
	// Causal depthwise conv over X, then SiLU.
	Y := make([]float32, T*C)
	m.pool.For(C, 256, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			wc := w.conv[c*Kc : (c+1)*Kc]
			for t := range T {
				var acc float32
				for j, wj := range wc {
					acc += float32(wj * X[(t+j)*C+c])
				}
				Y[t*C+c] = kernel.SiLU(acc)
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
	beta := make([]float32, T*Hv)
	alpha := make([]float32, T*Hv)
	for t := range T {
		for h := range Hv {
			i := t*Hv + h
			beta[i] = kernel.Sigmoid(b[i])
			g := w.negA[h] * kernel.Softplus(araw[i]+w.dtBias[h])
			alpha[i] = float32(math.Exp(float64(g)))
		}
	}
	var delta []float32
	if tp != nil {
		delta = make([]float32, T*Hv*dv)
		tp.alpha = alpha
		tp.delta = delta
		tp.y = Y // never written after this point
		tp.s0 = st.cur
	}
	src, dst := st.s[st.cur], st.s[1-st.cur]
	o := make([]float32, T*Dv)
	m.pool.For(Hv, 1, func(lo, hi int) {
		tmp := make([]float32, dk)
		d := make([]float32, dv)
		for h := lo; h < hi; h++ {
			kh := h / rho
			S := dst[h*dv*dk : (h+1)*dv*dk]
			S0 := src[h*dv*dk : (h+1)*dv*dk]
			for t := range T {
				khat := Y[t*C+Dk+kh*dk : t*C+Dk+(kh+1)*dk]
				qhat := Y[t*C+kh*dk : t*C+(kh+1)*dk]
				v := Y[t*C+2*Dk+h*dv : t*C+2*Dk+(h+1)*dv]
				if t == 0 {
					decay(S, S0, alpha[t*Hv+h])
				} else {
					decay(S, S, alpha[t*Hv+h])
				}
				bt := beta[t*Hv+h]
				for i := range dv {
					mem := kernel.Dot(S[i*dk:(i+1)*dk], khat)
					d[i] = bt * (v[i] - mem)
				}
				rank1(S, d, khat, tmp)
				oh := o[(t*Hv+h)*dv : (t*Hv+h+1)*dv]
				for i := range dv {
					oh[i] = kernel.Dot(S[i*dk:(i+1)*dk], qhat)
				}
				if delta != nil {
					copy(delta[(t*Hv+h)*dv:(t*Hv+h+1)*dv], d)
				}
			}
		}
	})
	st.cur = 1 - st.cur
	m.pool.GatedRMSNorm(o, o, z, w.norm, ar.Eps)
	w.out.Forward(out, o, T)
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

// replayGDN rebuilds a GDN layer's state after the first n steps of a taped block (MODEL-REFERENCE §4.3).
func (m *model) replayGDN(st *gdnState, tp *gdnTape, n int) {
	ar := &m.arch
	Hk, Hv, dk, dv := ar.KeyHeads, ar.ValueHeads, ar.KeyDim, ar.ValueDim
	C, Dk := ar.ConvDim(), Hk*dk
	rho := Hv / Hk
	src, dst := st.s[tp.s0], st.s[1-tp.s0]
	if n == 0 {
		copy(dst, src)
	} else {
		m.pool.For(Hv, 1, func(lo, hi int) {
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

// ffn is the SwiGLU MLP over T rows.
func ffn(f *ffnWeights, x, out []float32, T int) {
	inter := f.gate.Out
	g := make([]float32, T*inter)
	u := make([]float32, T*inter)
	f.gate.Forward(g, x, T)
	f.up.Forward(u, x, T)
	f.gate.Pool.SwiGLU(g, g, u)
	f.down.Forward(out, g, T)
}

// moe runs the sparse MoE block over T rows of x into out [T,H]. Each token's sum runs in a fixed order (its
// top-k slots by rank, then the shared expert), so results do not depend on T.
func (m *model) moe(w *moeWeights, x, out []float32, T int) {
	ar := &m.arch
	H, E, K := ar.Hidden, ar.Experts, ar.TopK
	probs := make([]float32, T*E)
	w.router.Forward(probs, x, T)
	idx := make([]int, T*K)
	wts := make([]float32, T*K)
	order := make([]int, E)
	for t := range T {
		p := probs[t*E : (t+1)*E]
		kernel.Softmax(p)
		for e := range order {
			order[e] = e
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p[b], p[a]) })
		var sum float32
		for j := range K {
			idx[t*K+j] = order[j]
			wts[t*K+j] = p[order[j]]
			sum += p[order[j]]
		}
		if ar.NormTopK {
			for j := range K {
				wts[t*K+j] /= sum
			}
		}
	}
	// Group (token, slot) pairs by expert so each expert runs once over its rows.
	slotOut := make([]float32, T*K*H)
	rowsOf := make([][]int, E)
	for i, e := range idx {
		rowsOf[e] = append(rowsOf[e], i)
	}
	for e, slots := range rowsOf {
		if len(slots) == 0 {
			continue
		}
		n := len(slots)
		xin := make([]float32, n*H)
		for r, s := range slots {
			t := s / K
			copy(xin[r*H:(r+1)*H], x[t*H:(t+1)*H])
		}
		y := make([]float32, n*H)
		ffn(&w.experts[e], xin, y, n)
		for r, s := range slots {
			copy(slotOut[s*H:(s+1)*H], y[r*H:(r+1)*H])
		}
	}
	var shared, sg []float32
	if w.shared != nil {
		shared = make([]float32, T*H)
		ffn(w.shared, x, shared, T)
		if w.sharedGate != nil {
			sg = make([]float32, T)
			w.sharedGate.Forward(sg, x, T)
		}
	}
	tmp := make([]float32, H)
	for t := range T {
		o := out[t*H : (t+1)*H]
		clear(o)
		for j := range K {
			kernel.AddScaled(o, slotOut[(t*K+j)*H:(t*K+j+1)*H], tmp, wts[t*K+j])
		}
		if shared != nil {
			g := float32(1)
			if sg != nil {
				g = kernel.Sigmoid(sg[t])
			}
			kernel.AddScaled(o, shared[t*H:(t+1)*H], tmp, g)
		}
	}
}
