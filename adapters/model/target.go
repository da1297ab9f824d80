package model

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/ports"
)

// Target is a loaded target model's weights on one backend: Qwen3 (attention layers only), Qwen3-Next and
// Qwen3.5 (Gated DeltaNet and gated attention layers, dense or MoE MLPs).
type Target[W comparable] struct {
	Arch      hfmodel.Arch
	Embed     W
	LMHead    W // Embed itself when the embeddings are tied
	FinalNorm W
	Rope      W // the attention layers' RoPE (zero when the model has none)
	Layers    []Layer[W]
	// ZeroCentred reports whether the checkpoint stored zero-centred norms (1 was added at load).
	ZeroCentred bool
}

// Layer is one decoder layer: a token mixer (attention or Gated DeltaNet) and an MLP (dense or MoE).
type Layer[W comparable] struct {
	Kind             ports.LayerKind
	InNorm, PostNorm W
	Attn             *Attention[W]
	GDN              *DeltaNet[W]
	MLP              *FFN[W]
	MoE              *MoE[W]
}

// Attention is a (gated) GQA attention layer's weights. With OutputGate, Q's rows hold per head the query
// then the gate.
type Attention[W comparable] struct {
	Q, K, V, O   W
	QNorm, KNorm W
}

// DeltaNet is a Gated DeltaNet layer's weights and shape. Either QKV, Z, B and A (Qwen3.5) or QKVZ and BA
// (Qwen3-Next, rows grouped by key head) are set.
type DeltaNet[W comparable] struct {
	QKV, Z, B, A                                       W
	QKVZ, BA                                           W
	Conv                                               W // [channels, ConvKernel]
	NegA                                               W // −exp(A_log), per value head
	DtBias                                             W
	Norm                                               W // the gated output norm, ValueDim wide (never zero-centred)
	Out                                                W
	KeyHeads, ValueHeads, KeyDim, ValueDim, ConvKernel int
}

// Channels is the width of the short convolution: the q, k and v channels together.
func (d *DeltaNet[W]) Channels() int { return 2*d.KeyHeads*d.KeyDim + d.ValueHeads*d.ValueDim }

// FFN is a SwiGLU MLP: GateUp when the backend fused gate and up (Loader.Fuse), else Gate and Up.
type FFN[W comparable] struct {
	GateUp, Gate, Up, Down W
	Inter                  int
}

// MoE is a sparse MoE block: the router, stacked experts ([E, out, in]; GateUp [E, 2I, H] when fused) and an
// optional shared expert with an optional one-column gate.
type MoE[W comparable] struct {
	Router                 W
	GateUp, Gate, Up, Down W
	Inter                  int
	Shared                 *FFN[W]
	SharedGate             W
}

// loader reads one checkpoint by canonical name through a backend's Loader.
type loader[W comparable] struct {
	be     Loader[W]
	ck     *hfmodel.Checkpoint
	zeroCN bool
}

func (l *loader[W]) linear(module string, dims ...int) (W, error) {
	return l.be.Linear(module+".weight", module, dims...)
}

// values reads a float tensor of n values as host float32.
func (l *loader[W]) values(name string, n int) ([]float32, error) {
	t, err := l.ck.Tensor(name)
	if err != nil {
		return nil, err
	}
	if t.NumElements() != n {
		return nil, fmt.Errorf("tensor %q: shape %v, want %d values", t.Name, t.Shape, n)
	}
	return t.Float32()
}

// exact loads a float32 vector the recurrence uses (see Loader.Vector).
func (l *loader[W]) exact(name string, n int) (W, error) {
	v, err := l.values(name, n)
	if err != nil {
		var zero W
		return zero, err
	}
	return l.be.Vector(v, true)
}

// norm loads a norm weight, folding the zero-centred +1 when the checkpoint stores HF hybrid norms.
func (l *loader[W]) norm(name string, n int) (W, error) {
	v, err := l.values(name, n)
	if err != nil {
		var zero W
		return zero, err
	}
	if l.zeroCN {
		for i := range v {
			v[i]++
		}
	}
	return l.be.Vector(v, false)
}

// ffn loads a SwiGLU MLP at base, fusing gate and up when the backend wants it.
func (l *loader[W]) ffn(base string, inter, h int) (*FFN[W], error) {
	gate, err := l.linear(base+".gate_proj", inter, h)
	if err != nil {
		return nil, err
	}
	up, err := l.linear(base+".up_proj", inter, h)
	if err != nil {
		return nil, err
	}
	down, err := l.linear(base+".down_proj", h, inter)
	if err != nil {
		return nil, err
	}
	f := &FFN[W]{Down: down, Inter: inter}
	if gu, ok := l.be.Fuse(gate, up); ok {
		f.GateUp = gu
	} else {
		f.Gate, f.Up = gate, up
	}
	return f, nil
}

// LoadTarget loads a target's weights from ck through be. cfg is the parsed config and a its resolved shape.
// The caller checks afterwards that nothing in the checkpoint was left unread (ck.Unused).
func LoadTarget[W comparable](be Loader[W], ck *hfmodel.Checkpoint, cfg *hfmodel.TextConfig, a *hfmodel.Arch) (*Target[W], error) {
	return LoadStage(be, ck, cfg, a, Stage{Lo: 0, Hi: a.Layers})
}

// LoadStage loads one pipeline stage of a target: the decoder layers st.Lo..st.Hi−1 (the others stay zero
// in Layers, which keeps the model's length so layer indices are the checkpoint's), the embedding when the
// stage is the first, the final norm and LM head when it is the last. Every other stage's tensors are marked
// used without being read, so a stage touches only its slice of the (mapped) checkpoint and ck.Unused still
// refuses tensors no stage would read.
func LoadStage[W comparable](be Loader[W], ck *hfmodel.Checkpoint, cfg *hfmodel.TextConfig, a *hfmodel.Arch, st Stage) (*Target[W], error) {
	if st.Lo < 0 || st.Hi > a.Layers || st.Lo >= st.Hi {
		return nil, fmt.Errorf("stage layers [%d,%d) outside the model's %d layers", st.Lo, st.Hi, a.Layers)
	}
	l := &loader[W]{be: be, ck: ck, zeroCN: ck.ZeroCentredNorms(cfg)}
	m := &Target[W]{Arch: *a, ZeroCentred: l.zeroCN}
	H := a.Hidden
	first, last := st.Lo == 0, st.Hi == a.Layers
	head := last || st.Head
	var err error
	if first || (head && cfg.TieWordEmbeddings) {
		if m.Embed, err = l.linear("embed_tokens", a.Vocab, H); err != nil {
			return nil, err
		}
	} else {
		ck.MarkUsed("embed_tokens.weight", "embed_tokens.scales", "embed_tokens.biases")
	}
	switch {
	case !head:
		ck.MarkUsed("lm_head.weight", "lm_head.scales", "lm_head.biases")
	case cfg.TieWordEmbeddings:
		m.LMHead = m.Embed
		// Some exports store the tied head anyway; the config says to use the embedding.
		ck.MarkUsed("lm_head.weight")
	default:
		if m.LMHead, err = l.linear("lm_head", a.Vocab, H); err != nil {
			return nil, err
		}
	}
	if last {
		if m.FinalNorm, err = l.norm("norm.weight", H); err != nil {
			return nil, err
		}
	} else {
		ck.MarkUsed("norm.weight")
	}
	m.Layers = make([]Layer[W], a.Layers)
	for i := st.Lo; i < st.Hi; i++ {
		if err := l.layer(a, i, &m.Layers[i]); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	if !first || !last {
		markOtherLayers(ck, st)
	}
	// Models without attention layers never use RoPE (their rotary settings are not validated).
	if slices.Contains(a.Kinds[st.Lo:st.Hi], ports.LayerAttention) {
		spec := Rope{Dims: a.RotaryDims, Width: a.HeadDim, Base: a.RopeTheta, Scaling: a.Rope, MaxPositions: a.RopeMaxPositions}
		if m.Rope, err = be.Rope(spec); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (l *loader[W]) layer(a *hfmodel.Arch, i int, ly *Layer[W]) error {
	p := fmt.Sprintf("layers.%d.", i)
	H := a.Hidden
	ly.Kind = a.Kinds[i]
	var err error
	if ly.InNorm, err = l.norm(p+"input_layernorm.weight", H); err != nil {
		return err
	}
	if ly.PostNorm, err = l.norm(p+"post_attention_layernorm.weight", H); err != nil {
		return err
	}
	if ly.Kind == ports.LayerAttention {
		if ly.Attn, err = l.attention(p+"self_attn.", a.QProjOut(), a.Heads*a.HeadDim, a.KVHeads*a.HeadDim, a.HeadDim, H); err != nil {
			return err
		}
	} else if ly.GDN, err = l.gdn(a, p+"linear_attn."); err != nil {
		return err
	}
	if a.MoE[i] {
		ly.MoE, err = l.moe(a, p+"mlp.")
		return err
	}
	ly.MLP, err = l.ffn(p+"mlp", a.Intermediate, H)
	return err
}

// attention loads q/k/v/o and the per-head q/k norms: q is qOut rows (twice the heads' width with an output
// gate), o reads qw values.
func (l *loader[W]) attention(q string, qOut, qw, kvw, d, h int) (*Attention[W], error) {
	at := &Attention[W]{}
	var errs []error
	lin := func(name string, out, in int) W {
		w, err := l.linear(q+name, out, in)
		errs = append(errs, err)
		return w
	}
	at.Q = lin("q_proj", qOut, h)
	at.K = lin("k_proj", kvw, h)
	at.V = lin("v_proj", kvw, h)
	at.O = lin("o_proj", h, qw)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var err error
	if at.QNorm, err = l.norm(q+"q_norm.weight", d); err != nil {
		return nil, err
	}
	if at.KNorm, err = l.norm(q+"k_norm.weight", d); err != nil {
		return nil, err
	}
	return at, nil
}

func (l *loader[W]) gdn(a *hfmodel.Arch, q string) (*DeltaNet[W], error) {
	g := &DeltaNet[W]{KeyHeads: a.KeyHeads, ValueHeads: a.ValueHeads, KeyDim: a.KeyDim, ValueDim: a.ValueDim, ConvKernel: a.ConvKernel}
	H, Hv, Dv, C, Kc := a.Hidden, a.ValueHeads, a.ValueHeads*a.ValueDim, g.Channels(), a.ConvKernel
	var errs []error
	lin := func(name string, out, in int) W {
		w, err := l.linear(q+name, out, in)
		errs = append(errs, err)
		return w
	}
	if l.ck.Has(q + "in_proj_qkvz.weight") {
		g.QKVZ = lin("in_proj_qkvz", C+Dv, H)
		g.BA = lin("in_proj_ba", 2*Hv, H)
	} else {
		g.QKV = lin("in_proj_qkv", C, H)
		g.Z = lin("in_proj_z", Dv, H)
		g.B = lin("in_proj_b", Hv, H)
		g.A = lin("in_proj_a", Hv, H)
	}
	g.Out = lin("out_proj", H, Dv)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	convName := q + "conv1d.weight"
	t, err := l.ck.Tensor(convName)
	if err != nil {
		return nil, err
	}
	// [C,1,Kc] (HF) and [C,Kc,1] (MLX) hold the same numbers in the same order: w[c·Kc + j].
	if !slices.Equal(t.Shape, []int{C, 1, Kc}) && !slices.Equal(t.Shape, []int{C, Kc, 1}) {
		return nil, fmt.Errorf("%s: shape %v, want [%d 1 %d] (HF) or [%d %d 1] (MLX)", convName, t.Shape, C, Kc, C, Kc)
	}
	cv, err := t.Float32()
	if err != nil {
		return nil, err
	}
	if g.Conv, err = l.be.Conv(cv, C, Kc); err != nil {
		return nil, err
	}
	aLog, err := l.values(q+"A_log", Hv)
	if err != nil {
		return nil, err
	}
	negA := make([]float32, Hv)
	for i, v := range aLog {
		negA[i] = float32(-math.Exp(float64(v))) // in float64, rounded once
	}
	if g.NegA, err = l.be.Vector(negA, true); err != nil {
		return nil, err
	}
	if g.DtBias, err = l.exact(q+"dt_bias", Hv); err != nil {
		return nil, err
	}
	// The gated norm is a plain weight, never zero-centred.
	if g.Norm, err = l.exact(q+"norm.weight", a.ValueDim); err != nil {
		return nil, err
	}
	return g, nil
}

func (l *loader[W]) moe(a *hfmodel.Arch, p string) (*MoE[W], error) {
	H, E, I := a.Hidden, a.Experts, a.MoEIntermediate
	mo := &MoE[W]{Inter: I}
	var err error
	if mo.Router, err = l.linear(p+"gate", E, H); err != nil {
		return nil, err
	}
	switch {
	case l.ck.Has(p + "switch_mlp.gate_proj.weight"):
		// MLX: stacked [E, out, in].
		c := p + "switch_mlp."
		var errs []error
		stacked := func(name string, out, in int) W {
			w, err := l.linear(c+name, E, out, in)
			errs = append(errs, err)
			return w
		}
		gate, up := stacked("gate_proj", I, H), stacked("up_proj", I, H)
		mo.Down = stacked("down_proj", H, I)
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		var ok bool
		if mo.GateUp, ok = l.be.Fuse(gate, up); !ok {
			mo.Gate, mo.Up = gate, up
		}
	case l.ck.Has(p+"experts.gate_up_proj") || l.ck.Has(p+"experts.gate_up_proj.weight"):
		// HF Qwen3.5-MoE: gate_up_proj [E, 2I, H] (first half gate), down_proj [E, H, I], with or without a
		// ".weight" suffix.
		gu, dn := p+"experts.gate_up_proj", p+"experts.down_proj"
		guName, dnName := gu, dn
		if !l.ck.Has(gu) {
			guName, dnName = gu+".weight", dn+".weight"
		}
		if mo.GateUp, err = l.be.Linear(guName, gu, E, 2*I, H); err != nil {
			return nil, err
		}
		if mo.Down, err = l.be.Linear(dnName, dn, E, H, I); err != nil {
			return nil, err
		}
	default:
		// HF per-expert tensors.
		gates, ups, downs := make([]W, E), make([]W, E), make([]W, E)
		for e := range E {
			b := fmt.Sprintf("%sexperts.%d.", p, e)
			if gates[e], err = l.linear(b+"gate_proj", I, H); err != nil {
				return nil, err
			}
			if ups[e], err = l.linear(b+"up_proj", I, H); err != nil {
				return nil, err
			}
			if downs[e], err = l.linear(b+"down_proj", H, I); err != nil {
				return nil, err
			}
		}
		gate, err := l.be.Stack(gates)
		if err != nil {
			return nil, err
		}
		up, err := l.be.Stack(ups)
		if err != nil {
			return nil, err
		}
		if mo.Down, err = l.be.Stack(downs); err != nil {
			return nil, err
		}
		var ok bool
		if mo.GateUp, ok = l.be.Fuse(gate, up); !ok {
			mo.Gate, mo.Up = gate, up
		}
	}
	if a.SharedIn > 0 {
		if mo.Shared, err = l.ffn(p+"shared_expert", a.SharedIn, H); err != nil {
			return nil, err
		}
		if l.ck.Has(p + "shared_expert_gate.weight") {
			if mo.SharedGate, err = l.linear(p+"shared_expert_gate", 1, H); err != nil {
				return nil, err
			}
		}
	}
	return mo, nil
}
