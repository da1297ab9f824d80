package cpu

import (
	"fmt"
	"math"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/ports"
)

type attnWeights struct {
	q, k, v, o *kernel.Linear
	qNorm      []float32
	kNorm      []float32
}

type gdnWeights struct {
	// Qwen3.5 form: qkv [C,H], z [Dv,H], b and a [Hv,H]. Qwen3-Next form: qkvz and ba, grouped by key head.
	qkv, z, b, a *kernel.Linear
	qkvz, ba     *kernel.Linear
	conv         []float32 // [C, Kc]
	negA         []float32 // −exp(A_log) [Hv]
	dtBias       []float32 // [Hv]
	norm         []float32 // [Dv/Hv]
	out          *kernel.Linear
}

type ffnWeights struct{ gate, up, down *kernel.Linear }

type moeWeights struct {
	router     *kernel.Linear
	experts    []ffnWeights
	shared     *ffnWeights
	sharedGate *kernel.Linear // [1,H], nil when absent
}

type layer struct {
	kind     ports.LayerKind
	inNorm   []float32
	postNorm []float32
	attn     *attnWeights
	gdn      *gdnWeights
	mlp      *ffnWeights
	moe      *moeWeights
}

type model struct {
	arch      hfmodel.Arch
	pool      *kernel.Pool
	embed     *kernel.Linear
	lmHead    *kernel.Linear
	finalNorm []float32
	layers    []layer
	rope      *kernel.Rope
}

// setPool makes every Linear run on the model's pool.
func (m *model) setPool() {
	set := func(ls ...*kernel.Linear) {
		for _, l := range ls {
			if l != nil {
				l.Pool = m.pool
			}
		}
	}
	set(m.embed, m.lmHead)
	for i := range m.layers {
		ly := &m.layers[i]
		if ly.attn != nil {
			set(ly.attn.q, ly.attn.k, ly.attn.v, ly.attn.o)
		}
		if ly.gdn != nil {
			g := ly.gdn
			set(g.qkv, g.z, g.b, g.a, g.qkvz, g.ba, g.out)
		}
		if ly.mlp != nil {
			set(ly.mlp.gate, ly.mlp.up, ly.mlp.down)
		}
		if ly.moe != nil {
			set(ly.moe.router, ly.moe.sharedGate)
			for _, e := range ly.moe.experts {
				set(e.gate, e.up, e.down)
			}
			if ly.moe.shared != nil {
				set(ly.moe.shared.gate, ly.moe.shared.up, ly.moe.shared.down)
			}
		}
	}
}

// checkShapes verifies every weight against the arch, so a forward pass can never index out of range.
func (m *model) checkShapes() error {
	a := &m.arch
	H := a.Hidden
	want := func(name string, l *kernel.Linear, out, in int) error {
		if l == nil {
			return fmt.Errorf("%s: missing", name)
		}
		if l.Out != out || l.In != in {
			return fmt.Errorf("%s: shape [%d,%d], want [%d,%d]", name, l.Out, l.In, out, in)
		}
		return nil
	}
	vec := func(name string, v []float32, n int) error {
		if len(v) != n {
			return fmt.Errorf("%s: %d values, want %d", name, len(v), n)
		}
		return nil
	}
	errs := []error{want("embed_tokens", m.embed, a.Vocab, H), want("lm_head", m.lmHead, a.Vocab, H), vec("norm", m.finalNorm, H)}
	if len(m.layers) != a.Layers {
		return fmt.Errorf("%d layers, want %d", len(m.layers), a.Layers)
	}
	for i := range m.layers {
		ly := &m.layers[i]
		p := fmt.Sprintf("layers.%d.", i)
		errs = append(errs, vec(p+"input_layernorm", ly.inNorm, H), vec(p+"post_attention_layernorm", ly.postNorm, H))
		switch a.Kinds[i] {
		case ports.LayerAttention:
			at := ly.attn
			if at == nil {
				errs = append(errs, fmt.Errorf("%sself_attn: missing", p))
				break
			}
			errs = append(errs, want(p+"self_attn.q_proj", at.q, a.QProjOut(), H), want(p+"self_attn.k_proj", at.k, a.KVHeads*a.HeadDim, H),
				want(p+"self_attn.v_proj", at.v, a.KVHeads*a.HeadDim, H), want(p+"self_attn.o_proj", at.o, H, a.Heads*a.HeadDim),
				vec(p+"self_attn.q_norm", at.qNorm, a.HeadDim), vec(p+"self_attn.k_norm", at.kNorm, a.HeadDim))
		case ports.LayerRecurrent:
			g := ly.gdn
			if g == nil {
				errs = append(errs, fmt.Errorf("%slinear_attn: missing", p))
				break
			}
			C, Dv, Hv := a.ConvDim(), a.ValueHeads*a.ValueDim, a.ValueHeads
			q := p + "linear_attn."
			if g.qkvz != nil {
				errs = append(errs, want(q+"in_proj_qkvz", g.qkvz, C+Dv, H), want(q+"in_proj_ba", g.ba, 2*Hv, H))
			} else {
				errs = append(errs, want(q+"in_proj_qkv", g.qkv, C, H), want(q+"in_proj_z", g.z, Dv, H),
					want(q+"in_proj_b", g.b, Hv, H), want(q+"in_proj_a", g.a, Hv, H))
			}
			errs = append(errs, vec(q+"conv1d", g.conv, C*a.ConvKernel), vec(q+"A_log", g.negA, Hv), vec(q+"dt_bias", g.dtBias, Hv),
				vec(q+"norm", g.norm, a.ValueDim), want(q+"out_proj", g.out, H, Dv))
		}
		switch {
		case a.MoE[i]:
			mo := ly.moe
			if mo == nil {
				errs = append(errs, fmt.Errorf("%smlp: MoE weights missing", p))
				break
			}
			errs = append(errs, want(p+"mlp.gate", mo.router, a.Experts, H))
			if len(mo.experts) != a.Experts {
				errs = append(errs, fmt.Errorf("%smlp.experts: %d experts, want %d", p, len(mo.experts), a.Experts))
			}
			for e, ex := range mo.experts {
				errs = append(errs, ffnShapes(want, fmt.Sprintf("%smlp.experts.%d", p, e), ex, a.MoEIntermediate, H)...)
			}
			if mo.shared != nil {
				errs = append(errs, ffnShapes(want, p+"mlp.shared_expert", *mo.shared, a.SharedIn, H)...)
				if mo.sharedGate != nil {
					errs = append(errs, want(p+"mlp.shared_expert_gate", mo.sharedGate, 1, H))
				}
			}
		default:
			if ly.mlp == nil {
				errs = append(errs, fmt.Errorf("%smlp: missing", p))
				break
			}
			errs = append(errs, ffnShapes(want, p+"mlp", *ly.mlp, a.Intermediate, H)...)
		}
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func ffnShapes(want func(string, *kernel.Linear, int, int) error, p string, f ffnWeights, inter, h int) []error {
	return []error{want(p+".gate_proj", f.gate, inter, h), want(p+".up_proj", f.up, inter, h), want(p+".down_proj", f.down, h, inter)}
}

// negExp returns −exp(A_log) in float32 (computed in float64, rounded once).
func negExp(aLog []float32) []float32 {
	out := make([]float32, len(aLog))
	for i, v := range aLog {
		out[i] = float32(-math.Exp(float64(v)))
	}
	return out
}
