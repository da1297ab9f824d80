package cpu

import (
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// A float64 re-implementation of docs/model-math.md#forward-pass, written for clarity rather than speed: whole
// sequence at once, no caches, no shared code with the production kernels beyond reading the loaded weights.

func mat64(l *kernel.Linear) [][]float64 {
	out := make([][]float64, l.Out)
	row := make([]float32, l.In)
	for r := range out {
		l.Row(row, r)
		out[r] = make([]float64, l.In)
		for j, v := range row {
			out[r][j] = float64(v)
		}
	}
	return out
}

func apply64(w [][]float64, x []float64) []float64 {
	y := make([]float64, len(w))
	for o, row := range w {
		for j, v := range row {
			y[o] += v * x[j]
		}
	}
	return y
}

func rms64(x []float64, w []float32, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * inv
		if w != nil {
			y[i] *= float64(w[i])
		}
	}
	return y
}

func sig64(x float64) float64  { return 1 / (1 + math.Exp(-x)) }
func silu64(x float64) float64 { return x * sig64(x) }

func softmax64(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	y := make([]float64, len(x))
	var s float64
	for i, v := range x {
		y[i] = math.Exp(v - m)
		s += y[i]
	}
	for i := range y {
		y[i] /= s
	}
	return y
}

func swiglu64(f *model.FFN[*weight], x []float64) []float64 {
	g, u := apply64(mat64(f.Gate.lin), x), apply64(mat64(f.Up.lin), x)
	for i := range g {
		g[i] = silu64(g[i]) * u[i]
	}
	return apply64(mat64(f.Down.lin), g)
}

func refForward(m *model.Target[*weight], tokens []ports.Token) [][]float64 {
	a := &m.Arch
	T, H := len(tokens), a.Hidden
	eps := float64(a.Eps)
	emb := mat64(m.Embed.lin)
	x := make([][]float64, T)
	for t, tok := range tokens {
		x[t] = append([]float64(nil), emb[tok]...)
	}
	for li := range m.Layers {
		ly := &m.Layers[li]
		n := make([][]float64, T)
		for t := range T {
			n[t] = rms64(x[t], ly.InNorm.vec, eps)
		}
		var mix [][]float64
		if ly.Kind == ports.LayerAttention {
			mix = refAttention(m, ly.Attn, n)
		} else {
			mix = refGDN(m, ly.GDN, n)
		}
		for t := range T {
			for i := range H {
				x[t][i] += mix[t][i]
			}
			p := rms64(x[t], ly.PostNorm.vec, eps)
			var f []float64
			if ly.MoE != nil {
				f = refMoE(m, ly.MoE, p)
			} else {
				f = swiglu64(ly.MLP, p)
			}
			for i := range H {
				x[t][i] += f[i]
			}
		}
	}
	head := mat64(m.LMHead.lin)
	logits := make([][]float64, T)
	for t := range T {
		logits[t] = apply64(head, rms64(x[t], m.FinalNorm.vec, eps))
	}
	return logits
}

func refAttention(m *model.Target[*weight], w *model.Attention[*weight], n [][]float64) [][]float64 {
	a := &m.Arch
	T, Hq, Hkv, d, r := len(n), a.Heads, a.KVHeads, a.HeadDim, a.RotaryDims
	wq, wk, wv, wo := mat64(w.Q.lin), mat64(w.K.lin), mat64(w.V.lin), mat64(w.O.lin)
	rope := func(v []float64, pos int) {
		for i := range r / 2 {
			th := float64(pos) * math.Pow(a.RopeTheta, -float64(2*i)/float64(r))
			x0, x1 := v[i], v[i+r/2]
			v[i] = x0*math.Cos(th) - x1*math.Sin(th)
			v[i+r/2] = x1*math.Cos(th) + x0*math.Sin(th)
		}
	}
	q := make([][][]float64, T)
	gate := make([][][]float64, T)
	k := make([][][]float64, T)
	v := make([][][]float64, T)
	for t := range T {
		qa, ka, va := apply64(wq, n[t]), apply64(wk, n[t]), apply64(wv, n[t])
		q[t], gate[t] = make([][]float64, Hq), make([][]float64, Hq)
		for h := range Hq {
			if a.OutputGate {
				q[t][h] = qa[2*h*d : 2*h*d+d]
				gate[t][h] = qa[2*h*d+d : 2*(h+1)*d]
			} else {
				q[t][h] = qa[h*d : (h+1)*d]
			}
			q[t][h] = rms64(q[t][h], w.QNorm.vec, float64(a.Eps))
			rope(q[t][h], t)
		}
		k[t], v[t] = make([][]float64, Hkv), make([][]float64, Hkv)
		for h := range Hkv {
			k[t][h] = rms64(ka[h*d:(h+1)*d], w.KNorm.vec, float64(a.Eps))
			rope(k[t][h], t)
			v[t][h] = va[h*d : (h+1)*d]
		}
	}
	out := make([][]float64, T)
	for t := range T {
		o := make([]float64, Hq*d)
		for h := range Hq {
			kv := h / (Hq / Hkv)
			sc := make([]float64, t+1)
			for p := range t + 1 {
				for i := range d {
					sc[p] += q[t][h][i] * k[p][kv][i]
				}
				sc[p] /= math.Sqrt(float64(d))
			}
			pr := softmax64(sc)
			for p := range t + 1 {
				for i := range d {
					o[h*d+i] += pr[p] * v[p][kv][i]
				}
			}
			if a.OutputGate {
				for i := range d {
					o[h*d+i] *= sig64(gate[t][h][i])
				}
			}
		}
		out[t] = apply64(wo, o)
	}
	return out
}

func refGDN(m *model.Target[*weight], w *model.DeltaNet[*weight], n [][]float64) [][]float64 {
	a := &m.Arch
	T, Hk, Hv, dk, dv, Kc := len(n), a.KeyHeads, a.ValueHeads, a.KeyDim, a.ValueDim, a.ConvKernel
	Dk, Dv := Hk*dk, Hv*dv
	C := 2*Dk + Dv
	P := make([][]float64, T)
	z := make([][]float64, T)
	b := make([][]float64, T)
	ar := make([][]float64, T)
	for t := range T {
		if w.QKVZ != nil {
			// Ungroup the Qwen3-Next layout by key head (docs/model-math.md#qwen3-next-projection-layout).
			rho := Hv / Hk
			u, bb := apply64(mat64(w.QKVZ.lin), n[t]), apply64(mat64(w.BA.lin), n[t])
			gw := 2*dk + 2*rho*dv
			P[t], z[t], b[t], ar[t] = make([]float64, C), make([]float64, Dv), make([]float64, Hv), make([]float64, Hv)
			for g := range Hk {
				u0 := u[g*gw:]
				copy(P[t][g*dk:], u0[:dk])
				copy(P[t][Dk+g*dk:], u0[dk:2*dk])
				copy(P[t][2*Dk+g*rho*dv:], u0[2*dk:2*dk+rho*dv])
				copy(z[t][g*rho*dv:], u0[2*dk+rho*dv:gw])
				copy(b[t][g*rho:], bb[g*2*rho:g*2*rho+rho])
				copy(ar[t][g*rho:], bb[g*2*rho+rho:(g+1)*2*rho])
			}
		} else {
			P[t], z[t] = apply64(mat64(w.QKV.lin), n[t]), apply64(mat64(w.Z.lin), n[t])
			b[t], ar[t] = apply64(mat64(w.B.lin), n[t]), apply64(mat64(w.A.lin), n[t])
		}
	}
	Y := make([][]float64, T)
	for t := range T {
		Y[t] = make([]float64, C)
		for c := range C {
			var s float64
			for j := range Kc {
				src := t + j - (Kc - 1)
				if src >= 0 {
					s += float64(w.Conv.vec[c*Kc+j]) * P[src][c]
				}
			}
			Y[t][c] = silu64(s)
		}
	}
	l2 := func(v []float64, scale float64) []float64 {
		var ss float64
		for _, x := range v {
			ss += x * x
		}
		inv := 1 / math.Sqrt(ss+1e-6)
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = x * inv * scale
		}
		return out
	}
	S := make([][]float64, Hv) // [dv*dk]
	for h := range S {
		S[h] = make([]float64, dv*dk)
	}
	out := make([][]float64, T)
	for t := range T {
		o := make([]float64, Dv)
		for h := range Hv {
			kh := h / (Hv / Hk)
			q := l2(Y[t][kh*dk:(kh+1)*dk], 1/math.Sqrt(float64(dk)))
			k := l2(Y[t][Dk+kh*dk:Dk+(kh+1)*dk], 1)
			v := Y[t][2*Dk+h*dv : 2*Dk+(h+1)*dv]
			beta := sig64(b[t][h])
			x := ar[t][h] + float64(w.DtBias.vec[h])
			sp := math.Max(x, 0) + math.Log1p(math.Exp(-math.Abs(x)))
			alpha := math.Exp(float64(w.NegA.vec[h]) * sp)
			Sh := S[h]
			for i := range Sh {
				Sh[i] *= alpha
			}
			for i := range dv {
				var mem float64
				for j := range dk {
					mem += Sh[i*dk+j] * k[j]
				}
				delta := beta * (v[i] - mem)
				for j := range dk {
					Sh[i*dk+j] += delta * k[j]
				}
			}
			oh := o[h*dv : (h+1)*dv]
			for i := range dv {
				for j := range dk {
					oh[i] += Sh[i*dk+j] * q[j]
				}
			}
			normed := rms64(oh, w.Norm.vec, float64(a.Eps))
			for i := range dv {
				oh[i] = normed[i] * silu64(z[t][h*dv+i])
			}
		}
		out[t] = apply64(mat64(w.Out.lin), o)
	}
	return out
}

func refMoE(m *model.Target[*weight], w *model.MoE[*weight], x []float64) []float64 {
	a := &m.Arch
	p := softmax64(apply64(mat64(w.Router.lin), x))
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return p[idx[i]] > p[idx[j]] })
	top := idx[:a.TopK]
	var sum float64
	for _, e := range top {
		sum += p[e]
	}
	y := make([]float64, a.Hidden)
	for _, e := range top {
		wt := p[e]
		if a.NormTopK {
			wt /= sum
		}
		f := swiglu64(expertFFN(w, e), x)
		for i := range y {
			y[i] += wt * f[i]
		}
	}
	if w.Shared != nil {
		f := swiglu64(w.Shared, x)
		g := 1.0
		if w.SharedGate != nil {
			g = sig64(apply64(mat64(w.SharedGate.lin), x)[0])
		}
		for i := range y {
			y[i] += g * f[i]
		}
	}
	return y
}

// The production float32 forward agrees with the float64 reference to 1e-4 on every logit.
func TestMatchesFloat64Reference(t *testing.T) {
	for name, f := range map[string]testmodel.TargetSpec{
		"qwen3":                     {Family: "qwen3", Seed: 71, Layers: 2},
		"qwen3_5 gated partial":     {Family: "qwen3_5", Seed: 72, Layers: 4, OutputGate: true, PartialRotary: 0.25},
		"qwen3_next moe":            {Family: "qwen3_next", Seed: 73, Layers: 4, MoE: true, MLPOnlyLayers: []int{0}},
		"qwen3_5_moe norm q4":       {Family: "qwen3_5_moe", Seed: 74, Layers: 4, OutputGate: true, MoE: true, NormTopK: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
		"qwen3_5 hf layout ungated": {Family: "qwen3_5", Seed: 75, Layers: 4, PartialRotary: 1},
	} {
		t.Run(name, func(t *testing.T) {
			tg := loadFixture(t, f, 2)
			toks := tokensOf(10, 12)
			got, _, _ := run(t, openSession(t, tg, nil), toks, false)
			want := refForward(tg.m, toks)
			var worst float64
			for tt := range toks {
				for j := range testmodel.Vocab {
					worst = math.Max(worst, math.Abs(want[tt][j]-float64(got[tt*testmodel.Vocab+j])))
				}
			}
			require.Less(t, worst, 1e-4, "max |Δlogit|")
			t.Logf("max |Δlogit| = %.3g", worst)
		})
	}
}

// expertFFN is expert e of a MoE block as a plain MLP (gate and up cut from a fused matrix).
func expertFFN(w *model.MoE[*weight], e int) *model.FFN[*weight] {
	f := &model.FFN[*weight]{Down: &weight{lin: w.Down.experts[e]}, Inter: w.Inter}
	if w.GateUp == nil {
		f.Gate, f.Up = &weight{lin: w.Gate.experts[e]}, &weight{lin: w.Up.experts[e]}
		return f
	}
	gu := w.GateUp.experts[e]
	g, err := gu.Rows(0, w.Inter)
	if err != nil {
		panic(err)
	}
	u, err := gu.Rows(w.Inter, 2*w.Inter)
	if err != nil {
		panic(err)
	}
	f.Gate, f.Up = &weight{lin: g}, &weight{lin: u}
	return f
}
