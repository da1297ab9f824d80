package cpu

import (
	"fmt"
	"slices"
	"strings"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/cpu/weights"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// loader builds the model's kernel values from one checkpoint, looked up by canonical name.
type loader struct {
	ck     *hfmodel.Checkpoint
	st     *safetensors.Store // ck.Store
	cfg    *hfmodel.TextConfig
	zeroCN bool // add 1 to zero-centred norm weights (HF hybrid checkpoints)
}

func newLoader(st *safetensors.Store, cfg *hfmodel.TextConfig) (*loader, error) {
	ck, err := hfmodel.NewCheckpoint(st)
	if err != nil {
		return nil, err
	}
	return &loader{ck: ck, st: st, cfg: cfg}, nil
}

// linear loads canonical module c ([out,in]).
func (l *loader) linear(c string, out, in int) (*kernel.Linear, error) {
	sn, err := l.ck.Stored(c + ".weight")
	if err != nil {
		return nil, err
	}
	sp, _, err := l.ck.QuantSpec(l.cfg.Quantization, c)
	if err != nil {
		return nil, err
	}
	return weights.LoadLinear(l.st, strings.TrimSuffix(sn, ".weight"), sp, out, in)
}

// stacked loads experts [E,out,in] from canonical weight tensor name wname (module c for scales/biases).
func (l *loader) stacked(wname, c string, E, out, in int) ([]*kernel.Linear, error) {
	sn, err := l.ck.Stored(wname)
	if err != nil {
		return nil, err
	}
	sp, _, err := l.ck.QuantSpec(l.cfg.Quantization, c)
	if err != nil {
		return nil, err
	}
	return weights.LoadStacked(l.st, sn, strings.TrimSuffix(sn, ".weight"), sp, E, out, in)
}

func (l *loader) vector(c string, n int) ([]float32, error) {
	sn, err := l.ck.Stored(c)
	if err != nil {
		return nil, err
	}
	return weights.Vector(l.st, sn, n)
}

// norm loads a norm weight, folding the zero-centred +1 when the checkpoint stores HF hybrid norms.
func (l *loader) norm(c string, n int) ([]float32, error) {
	v, err := l.vector(c, n)
	if err != nil {
		return nil, err
	}
	if l.zeroCN {
		for i := range v {
			v[i] += 1
		}
	}
	return v, nil
}

func (l *loader) load(a *hfmodel.Arch) (*model, error) {
	m := &model{arch: *a}
	l.zeroCN = l.ck.ZeroCentredNorms(l.cfg)
	H := a.Hidden
	var err error
	if m.embed, err = l.linear("embed_tokens", a.Vocab, H); err != nil {
		return nil, err
	}
	if l.cfg.TieWordEmbeddings {
		m.lmHead = m.embed
		// Some exports store the tied head anyway; the config says to use the embedding.
		l.ck.MarkUsed("lm_head.weight")
	} else if m.lmHead, err = l.linear("lm_head", a.Vocab, H); err != nil {
		return nil, err
	}
	if m.finalNorm, err = l.norm("norm.weight", H); err != nil {
		return nil, err
	}
	m.layers = make([]layer, a.Layers)
	for i := range m.layers {
		if err := l.layer(a, i, &m.layers[i]); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	// Models without attention layers never use RoPE (their rotary settings are not validated).
	m.rope = kernel.NewRope(2, 1)
	for _, k := range a.Kinds {
		if k == ports.LayerAttention {
			m.rope = kernel.NewRopeFreqs(a.Rope.Frequencies(a.RotaryDims, a.RopeTheta, a.RopeMaxPositions))
			break
		}
	}
	if err := m.checkShapes(); err != nil {
		return nil, err
	}
	return m, nil
}

func (l *loader) layer(a *hfmodel.Arch, i int, ly *layer) error {
	p := fmt.Sprintf("layers.%d.", i)
	H := a.Hidden
	ly.kind = a.Kinds[i]
	var err error
	if ly.inNorm, err = l.norm(p+"input_layernorm.weight", H); err != nil {
		return err
	}
	if ly.postNorm, err = l.norm(p+"post_attention_layernorm.weight", H); err != nil {
		return err
	}
	if ly.kind == ports.LayerAttention {
		at := &attnWeights{}
		q := p + "self_attn."
		if at.q, err = l.linear(q+"q_proj", a.QProjOut(), H); err != nil {
			return err
		}
		if at.k, err = l.linear(q+"k_proj", a.KVHeads*a.HeadDim, H); err != nil {
			return err
		}
		if at.v, err = l.linear(q+"v_proj", a.KVHeads*a.HeadDim, H); err != nil {
			return err
		}
		if at.o, err = l.linear(q+"o_proj", H, a.Heads*a.HeadDim); err != nil {
			return err
		}
		if at.qNorm, err = l.norm(q+"q_norm.weight", a.HeadDim); err != nil {
			return err
		}
		if at.kNorm, err = l.norm(q+"k_norm.weight", a.HeadDim); err != nil {
			return err
		}
		ly.attn = at
	} else if err := l.gdn(a, p+"linear_attn.", ly); err != nil {
		return err
	}
	if a.MoE[i] {
		return l.moe(a, p+"mlp.", ly)
	}
	ly.mlp, err = l.ffn(p+"mlp", a.Intermediate, H)
	return err
}

func (l *loader) gdn(a *hfmodel.Arch, q string, ly *layer) error {
	H, Hv, Dv := a.Hidden, a.ValueHeads, a.ValueHeads*a.ValueDim
	C := a.ConvDim()
	g := &gdnWeights{}
	var err error
	if l.ck.Has(q + "in_proj_qkvz.weight") {
		if g.qkvz, err = l.linear(q+"in_proj_qkvz", C+Dv, H); err != nil {
			return err
		}
		if g.ba, err = l.linear(q+"in_proj_ba", 2*Hv, H); err != nil {
			return err
		}
	} else {
		if g.qkv, err = l.linear(q+"in_proj_qkv", C, H); err != nil {
			return err
		}
		if g.z, err = l.linear(q+"in_proj_z", Dv, H); err != nil {
			return err
		}
		if g.b, err = l.linear(q+"in_proj_b", Hv, H); err != nil {
			return err
		}
		if g.a, err = l.linear(q+"in_proj_a", Hv, H); err != nil {
			return err
		}
	}
	convName := q + "conv1d.weight"
	if l.ck.Has(convName) {
		t, err := l.ck.Tensor(convName)
		if err != nil {
			return err
		}
		hf := []int{C, 1, a.ConvKernel}
		mlx := []int{C, a.ConvKernel, 1}
		if !slices.Equal(t.Shape, hf) && !slices.Equal(t.Shape, mlx) {
			return fmt.Errorf("%s: shape %v, want %v (HF) or %v (MLX)", convName, t.Shape, hf, mlx)
		}
	}
	// [C,1,Kc] and [C,Kc,1] hold the same numbers in the same order: w[c·Kc + j].
	if g.conv, err = l.vector(convName, C*a.ConvKernel); err != nil {
		return err
	}
	aLog, err := l.vector(q+"A_log", Hv)
	if err != nil {
		return err
	}
	g.negA = negExp(aLog)
	if g.dtBias, err = l.vector(q+"dt_bias", Hv); err != nil {
		return err
	}
	// The gated norm is a plain weight, never zero-centred.
	if g.norm, err = l.vector(q+"norm.weight", a.ValueDim); err != nil {
		return err
	}
	if g.out, err = l.linear(q+"out_proj", H, Dv); err != nil {
		return err
	}
	ly.gdn = g
	return nil
}

func (l *loader) ffn(base string, inter, h int) (*ffnWeights, error) {
	f := &ffnWeights{}
	var err error
	if f.gate, err = l.linear(base+".gate_proj", inter, h); err != nil {
		return nil, err
	}
	if f.up, err = l.linear(base+".up_proj", inter, h); err != nil {
		return nil, err
	}
	if f.down, err = l.linear(base+".down_proj", h, inter); err != nil {
		return nil, err
	}
	return f, nil
}

func (l *loader) moe(a *hfmodel.Arch, p string, ly *layer) error {
	H, E, I := a.Hidden, a.Experts, a.MoEIntermediate
	mo := &moeWeights{experts: make([]ffnWeights, E)}
	var err error
	if mo.router, err = l.linear(p+"gate", E, H); err != nil {
		return err
	}
	switch {
	case l.ck.Has(p + "switch_mlp.gate_proj.weight"):
		// MLX stacked [E,out,in].
		parts := []struct {
			name    string
			out, in int
			set     func(e int, x *kernel.Linear)
		}{
			{"gate_proj", I, H, func(e int, x *kernel.Linear) { mo.experts[e].gate = x }},
			{"up_proj", I, H, func(e int, x *kernel.Linear) { mo.experts[e].up = x }},
			{"down_proj", H, I, func(e int, x *kernel.Linear) { mo.experts[e].down = x }},
		}
		for _, pt := range parts {
			c := p + "switch_mlp." + pt.name
			xs, err := l.stacked(c+".weight", c, E, pt.out, pt.in)
			if err != nil {
				return err
			}
			for e, x := range xs {
				pt.set(e, x)
			}
		}
	case l.ck.Has(p+"experts.gate_up_proj") || l.ck.Has(p+"experts.gate_up_proj.weight"):
		// HF Qwen3.5-MoE fused: gate_up_proj [E, 2I, H] (first half gate), down_proj [E, H, I].
		gu, dn := p+"experts.gate_up_proj", p+"experts.down_proj"
		guName, dnName := gu, dn
		if !l.ck.Has(gu) {
			guName, dnName = gu+".weight", dn+".weight"
		}
		gus, err := l.stacked(guName, gu, E, 2*I, H)
		if err != nil {
			return err
		}
		dns, err := l.stacked(dnName, dn, E, H, I)
		if err != nil {
			return err
		}
		for e := range E {
			if mo.experts[e].gate, err = gus[e].Rows(0, I); err != nil {
				return err
			}
			if mo.experts[e].up, err = gus[e].Rows(I, 2*I); err != nil {
				return err
			}
			mo.experts[e].down = dns[e]
		}
	default:
		for e := range E {
			f, err := l.ffn(fmt.Sprintf("%sexperts.%d", p, e), I, H)
			if err != nil {
				return err
			}
			mo.experts[e] = *f
		}
	}
	if a.SharedIn > 0 {
		if mo.shared, err = l.ffn(p+"shared_expert", a.SharedIn, H); err != nil {
			return err
		}
		if l.ck.Has(p + "shared_expert_gate.weight") {
			if mo.sharedGate, err = l.linear(p+"shared_expert_gate", 1, H); err != nil {
				return err
			}
		}
	}
	ly.moe = mo
	return nil
}
