package mlx

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// loader uploads weights, looked up by canonical name (hfmodel.Checkpoint), into the arena graph. Every
// upload copies (mlx_array_new_data); nothing keeps a pointer into Go or mapped memory.
type loader struct {
	ck     *hfmodel.Checkpoint
	cfg    *hfmodel.TextConfig // nil for a drafter
	quant  *hfmodel.Quantization
	g      *graph
	dt     mlxc.Dtype // compute dtype of float weights (Float32, or BFloat16 when asked)
	zeroCN bool
}

func newLoader(st *safetensors.Store, cfg *hfmodel.TextConfig, q *hfmodel.Quantization, g *graph) (*loader, error) {
	ck, err := hfmodel.NewCheckpoint(st)
	if err != nil {
		return nil, err
	}
	return &loader{ck: ck, cfg: cfg, quant: q, g: g, dt: mlxc.Float32}, nil
}

// upload builds weights on the MLX thread: fill loads them through a loader over st (cfg nil for a drafter,
// q its quantization, float weights in dt) into a fresh arena named name; then every stored tensor must have
// been used, and what is still lazy is evaluated. It returns the arena, or releases it on failure. st is
// closed in every case: each weight has been copied into MLX.
func upload(rt *mlxc.Runtime, st *safetensors.Store, name string, cfg *hfmodel.TextConfig, q *hfmodel.Quantization,
	dt mlxc.Dtype, fill func(*loader) error) (*graph, error) {
	var arena *graph
	err := rt.Do(func() error {
		g := newGraph(rt, name)
		l, err := newLoader(st, cfg, q, g)
		if err == nil {
			l.dt = dt
			err = fill(l)
		}
		if err == nil {
			err = l.ck.Unused()
		}
		if err == nil {
			g.eval(g.tmp...)
			err = g.err
		}
		if err != nil {
			g.release()
			return err
		}
		arena = g
		return nil
	})
	if err = errors.Join(err, st.Close()); err != nil {
		return nil, err
	}
	return arena, nil
}

// linear loads canonical module c whose weight tensor is wname, with logical dims [out,in] or [E,out,in].
func (l *loader) linear(wname, c string, dims ...int) (*linear, error) {
	t, err := l.ck.Tensor(wname)
	if err != nil {
		return nil, err
	}
	in := dims[len(dims)-1]
	lin := &linear{out: dims[len(dims)-2], in: in}
	sp, quantized, err := l.ck.QuantSpec(l.quant, c)
	if err != nil {
		return nil, err
	}
	if !quantized {
		if !slices.Equal(t.Shape, dims) {
			return nil, fmt.Errorf("tensor %q: shape %v, want %v", t.Name, t.Shape, dims)
		}
		v, err := t.Float32()
		if err != nil {
			return nil, err
		}
		w := uploadF32(l.g, v, dims...)
		perm := []int{1, 0}
		if len(dims) == 3 {
			perm = []int{0, 2, 1}
		}
		// Store Wᵀ contiguous ([in,out]): BLAS reads a transposed view half as fast (24 vs 14 ms for a
		// 768×32000 GEMV here). Evaluate now and drop the [out,in] upload so loading never holds both copies
		// of every matrix at once.
		tr := l.g.transpose(w, perm...)
		x := tr
		if l.dt != mlxc.Float32 && len(dims) == 2 { // stacked float experts stay float32 (gather_mm)
			x = l.g.astype(tr, l.dt)
		}
		lin.wt = l.g.contiguous(x)
		l.g.eval(lin.wt)
		if x != tr {
			l.g.drop(x)
		}
		l.g.drop(tr) // the view would keep the upload alive
		l.g.drop(w)
		return lin, l.g.err
	}
	sc, err := l.ck.Tensor(c + ".scales")
	if err != nil {
		return nil, err
	}
	bi, err := l.ck.Tensor(c + ".biases")
	if err != nil {
		return nil, fmt.Errorf("quantized %s: %w", c, err)
	}
	s, err := hfmodel.CheckQuantizedLinear(sp, t.Shape, sc.Shape, bi.Shape, dims)
	if err != nil {
		return nil, fmt.Errorf("quantized %s: %w", c, err)
	}
	codes, err := t.Uint32()
	if err != nil {
		return nil, err
	}
	scales, err := sc.Float32()
	if err != nil {
		return nil, err
	}
	biases, err := bi.Float32()
	if err != nil {
		return nil, err
	}
	l.ck.MarkUsed(c+".scales", c+".biases")
	lin.bits, lin.group = s.Bits, s.GroupSize
	lin.w = uploadU32(l.g, codes, t.Shape...)
	lin.scales = l.cast(uploadF32(l.g, scales, sc.Shape...))
	lin.biase = l.cast(uploadF32(l.g, biases, bi.Shape...))
	return lin, l.g.err
}

// fuse stacks a and b along the output axis into one linear (gate+up → one matmul). ok is false when their
// storage differs (float vs quantized, or different bits/group), in which case the caller keeps them apart.
func (l *loader) fuse(a, b *linear) (*linear, bool) {
	if a.bits != b.bits || a.group != b.group || a.in != b.in {
		return nil, false
	}
	g := l.g
	f := &linear{out: a.out + b.out, in: a.in, bits: a.bits, group: a.group}
	if a.quantized() {
		ax := len(shapeOf(a.w)) - 2
		f.w = g.concat(ax, a.w, b.w)
		f.scales = g.concat(ax, a.scales, b.scales)
		f.biase = g.concat(ax, a.biase, b.biase)
	} else {
		f.wt = g.concat(len(shapeOf(a.wt))-1, a.wt, b.wt)
	}
	// The parts are not used apart: evaluate the fused matrix and free them.
	g.eval(f.wt, f.w, f.scales, f.biase)
	for _, x := range []arr{a.wt, a.w, a.scales, a.biase, b.wt, b.w, b.scales, b.biase} {
		g.drop(x)
	}
	return f, g.err == nil
}

func (l *loader) vector(c string, n int) ([]float32, error) {
	t, err := l.ck.Tensor(c)
	if err != nil {
		return nil, err
	}
	if t.NumElements() != n {
		return nil, fmt.Errorf("tensor %q: shape %v, want %d elements", t.Name, t.Shape, n)
	}
	return t.Float32()
}

func (l *loader) norm(c string, n int) (arr, error) {
	v, err := l.vector(c, n)
	if err != nil {
		return 0, err
	}
	if l.zeroCN {
		for i := range v {
			v[i]++
		}
	}
	return l.cast(uploadF32(l.g, v, n)), l.g.err
}

// cast converts a freshly uploaded float32 weight to the compute dtype (evaluated; the f32 copy freed).
func (l *loader) cast(a arr) arr {
	if l.dt == mlxc.Float32 || a == 0 {
		return a
	}
	r := l.g.astype(a, l.dt)
	l.g.eval(r)
	l.g.drop(a)
	return r
}

func (l *loader) load(a *hfmodel.Arch) (*model, error) {
	m := &model{arch: *a, arena: l.g, dt: l.dt}
	m.rope = newRopeSpec(l.g, a.RotaryDims, a.HeadDim, a.RopeTheta, a.Rope, a.RopeMaxPositions, l.dt)
	l.zeroCN = l.ck.ZeroCentredNorms(l.cfg)
	H := a.Hidden
	var err error
	if m.embed, err = l.linear("embed_tokens.weight", "embed_tokens", a.Vocab, H); err != nil {
		return nil, err
	}
	if !m.embed.quantized() {
		// Rows are looked up in the [V,H] layout: transpose the view back.
		m.embedF = l.g.transpose(m.embed.wt, 1, 0)
	}
	if l.cfg.TieWordEmbeddings {
		m.lmHead = m.embed
		// Some exports store the tied head anyway; the config says to use the embedding.
		l.ck.MarkUsed("lm_head.weight")
	} else if m.lmHead, err = l.linear("lm_head.weight", "lm_head", a.Vocab, H); err != nil {
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
	return m, l.g.err
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
		lin := func(name string, out, in int) (*linear, error) { return l.linear(q+name+".weight", q+name, out, in) }
		if at.q, err = lin("q_proj", a.QProjOut(), H); err != nil {
			return err
		}
		if at.k, err = lin("k_proj", a.KVHeads*a.HeadDim, H); err != nil {
			return err
		}
		if at.v, err = lin("v_proj", a.KVHeads*a.HeadDim, H); err != nil {
			return err
		}
		if at.o, err = lin("o_proj", H, a.Heads*a.HeadDim); err != nil {
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
	H, Hv, Dv, C, Kc := a.Hidden, a.ValueHeads, a.ValueHeads*a.ValueDim, a.ConvDim(), a.ConvKernel
	g := &gdnWeights{}
	lin := func(name string, out, in int) (*linear, error) { return l.linear(q+name+".weight", q+name, out, in) }
	var err error
	if l.ck.Has(q + "in_proj_qkvz.weight") {
		if g.qkvz, err = lin("in_proj_qkvz", C+Dv, H); err != nil {
			return err
		}
		if g.ba, err = lin("in_proj_ba", 2*Hv, H); err != nil {
			return err
		}
	} else {
		if g.qkv, err = lin("in_proj_qkv", C, H); err != nil {
			return err
		}
		if g.z, err = lin("in_proj_z", Dv, H); err != nil {
			return err
		}
		if g.b, err = lin("in_proj_b", Hv, H); err != nil {
			return err
		}
		if g.a, err = lin("in_proj_a", Hv, H); err != nil {
			return err
		}
	}
	t, err := l.ck.Tensor(q + "conv1d.weight")
	if err != nil {
		return err
	}
	if !slices.Equal(t.Shape, []int{C, 1, Kc}) && !slices.Equal(t.Shape, []int{C, Kc, 1}) {
		return fmt.Errorf("%sconv1d.weight: shape %v, want [%d 1 %d] (HF) or [%d %d 1] (MLX)", q, t.Shape, C, Kc, C, Kc)
	}
	cv, err := t.Float32()
	if err != nil {
		return err
	}
	// Both layouts hold w[c·Kc + j]; store [Kc, C] so row j is one slice.
	g.conv = l.g.transpose(uploadF32(l.g, cv, C, Kc), 1, 0)
	aLog, err := l.vector(q+"A_log", Hv)
	if err != nil {
		return err
	}
	negA := make([]float32, Hv)
	for i, v := range aLog {
		negA[i] = float32(-math.Exp(float64(v))) // as the CPU backend: float64, rounded once
	}
	g.negA = uploadF32(l.g, negA, Hv)
	dt, err := l.vector(q+"dt_bias", Hv)
	if err != nil {
		return err
	}
	g.dtBias = uploadF32(l.g, dt, Hv)
	nw, err := l.vector(q+"norm.weight", a.ValueDim) // gated norm: plain weight, never zero-centred
	if err != nil {
		return err
	}
	g.norm = uploadF32(l.g, nw, a.ValueDim)
	if g.out, err = lin("out_proj", H, Dv); err != nil {
		return err
	}
	ly.gdn = g
	return l.g.err
}

func (l *loader) ffn(base string, inter, h int) (*ffnWeights, error) {
	gate, err := l.linear(base+".gate_proj.weight", base+".gate_proj", inter, h)
	if err != nil {
		return nil, err
	}
	up, err := l.linear(base+".up_proj.weight", base+".up_proj", inter, h)
	if err != nil {
		return nil, err
	}
	down, err := l.linear(base+".down_proj.weight", base+".down_proj", h, inter)
	if err != nil {
		return nil, err
	}
	f := &ffnWeights{down: down, inter: inter}
	if gu, ok := l.fuse(gate, up); ok {
		f.gateUp = gu
	} else {
		f.gate, f.up = gate, up
	}
	return f, l.g.err
}

func (l *loader) moe(a *hfmodel.Arch, p string, ly *layer) error {
	H, E, I := a.Hidden, a.Experts, a.MoEIntermediate
	mo := &moeWeights{}
	var err error
	if mo.router, err = l.linear(p+"gate.weight", p+"gate", E, H); err != nil {
		return err
	}
	switch {
	case l.ck.Has(p + "switch_mlp.gate_proj.weight"):
		c := p + "switch_mlp."
		gate, err := l.linear(c+"gate_proj.weight", c+"gate_proj", E, I, H)
		if err != nil {
			return err
		}
		up, err := l.linear(c+"up_proj.weight", c+"up_proj", E, I, H)
		if err != nil {
			return err
		}
		if mo.down, err = l.linear(c+"down_proj.weight", c+"down_proj", E, H, I); err != nil {
			return err
		}
		var ok bool
		if mo.gateUp, ok = l.fuse(gate, up); !ok {
			mo.gate, mo.up = gate, up
		}
	case l.ck.Has(p+"experts.gate_up_proj") || l.ck.Has(p+"experts.gate_up_proj.weight"):
		gu, dn := p+"experts.gate_up_proj", p+"experts.down_proj"
		guName, dnName := gu, dn
		if !l.ck.Has(gu) {
			guName, dnName = gu+".weight", dn+".weight"
		}
		if mo.gateUp, err = l.linear(guName, gu, E, 2*I, H); err != nil {
			return err
		}
		if mo.down, err = l.linear(dnName, dn, E, H, I); err != nil {
			return err
		}
	default:
		// HF per-expert tensors: stack them into [E,out,in] (float only; MLX checkpoints are stacked).
		var gates, ups, downs, parts []arr
		for e := range E {
			b := fmt.Sprintf("%sexperts.%d.", p, e)
			for _, part := range []struct {
				name    string
				out, in int
				dst     *[]arr
			}{{"gate_proj", I, H, &gates}, {"up_proj", I, H, &ups}, {"down_proj", H, I, &downs}} {
				x, err := l.linear(b+part.name+".weight", b+part.name, part.out, part.in)
				if err != nil {
					return err
				}
				if x.quantized() {
					return fmt.Errorf("%s%s: quantized per-expert tensors are not supported (MLX checkpoints stack experts)", b, part.name)
				}
				*part.dst = append(*part.dst, l.g.expand(x.wt, 0))
				parts = append(parts, x.wt)
			}
		}
		gate := &linear{out: I, in: H, wt: l.g.concat(0, gates...)}
		up := &linear{out: I, in: H, wt: l.g.concat(0, ups...)}
		mo.down = &linear{out: H, in: I, wt: l.g.concat(0, downs...)}
		l.g.eval(gate.wt, up.wt, mo.down.wt)
		for _, x := range append(append(append(parts, gates...), ups...), downs...) {
			l.g.drop(x)
		}
		mo.gateUp, _ = l.fuse(gate, up)
	}
	if a.SharedIn > 0 {
		if mo.shared, err = l.ffn(p+"shared_expert", a.SharedIn, H); err != nil {
			return err
		}
		if l.ck.Has(p + "shared_expert_gate.weight") {
			if mo.sharedGate, err = l.linear(p+"shared_expert_gate.weight", p+"shared_expert_gate", 1, H); err != nil {
				return err
			}
		}
	}
	ly.moe = mo
	return l.g.err
}
