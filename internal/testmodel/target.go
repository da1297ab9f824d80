// Package testmodel writes the tiny checkpoints the tests load: reference targets of every supported family
// and storage form (Target), DFlash drafters of any shape and layout (Drafter), the random synthetic
// targets and drafters of adapters/synth in a test's temporary directory (Synth, SynthDrafter), the
// hand-made tokenizer (Tokenizer), and edits of a written checkpoint (EditConfig, RewriteWeights, Quantize,
// Truncate). It is imported only by _test.go files (the import-boundary test checks it); the synthetic-model
// writer that `higgs-verify synth` uses stays production code in adapters/synth.
//
// Every helper takes a testing.TB and fails the test on error, so a test reads as one line per checkpoint.
package testmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// Dimensions of a reference target (TargetSpec): every Linear input is a multiple of 32 so any group size up
// to 64 applies.
const (
	Hidden = 64 // hidden size
	Vocab  = 96 // vocabulary size
	// EOS is the eos_token_id written to config.json.
	EOS = 3

	heads, kvHeads, headDim       = 4, 2, 16
	linKHeads, linVHeads          = 2, 4
	linKDim, linVDim, convKernel  = 16, 16, 4
	inter, experts, expertsPerTok = 64, 4, 2
	moeInter, sharedInter         = 32, 32
)

// Expert layouts of a MoE target (TargetSpec.ExpertLayout).
const (
	// ExpertsPerExpert stores experts.{e}.{gate,up,down}_proj (the Hugging Face layout; the default).
	ExpertsPerExpert = "per-expert"
	// ExpertsFused stores experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I] (Qwen3.5 MoE).
	ExpertsFused = "fused"
	// ExpertsSwitch stores switch_mlp.{gate,up,down}_proj.weight [E, out, in] (mlx-lm).
	ExpertsSwitch = "switch"
)

// TargetSpec describes a tiny random reference target. The logical model (the weights as the forward pass
// uses them) is drawn from Seed and the shape fields alone; the storage fields (MLXLayout, ExpertLayout,
// BF16, Quant, StoreDequantized, and the Qwen3-Next fused projections) only choose how it is stored, so
// differently stored targets with the same seed and shape describe the same model.
type TargetSpec struct {
	Family string // qwen3, qwen3_next, qwen3_5, qwen3_5_moe
	Seed   uint64
	Layers int
	// FullAttentionInterval places a full-attention layer every so many layers of a hybrid (default 2).
	FullAttentionInterval int
	// Tied ties the LM head to the embedding (tie_word_embeddings).
	Tied bool
	// HeadCopy stores an untied lm_head equal to the embedding (to compare with the tied form).
	HeadCopy bool
	// MoE gives every layer not in MLPOnlyLayers a sparse MoE block with a shared expert.
	MoE           bool
	NormTopK      bool  // norm_topk_prob
	MLPOnlyLayers []int // mlp_only_layers: dense MLP layers of a MoE model
	// PartialRotary is a hybrid's partial_rotary_factor (default 0.5).
	PartialRotary float64
	// OutputGate is attn_output_gate (qwen3_5*; Qwen3-Next always gates).
	OutputGate bool
	// Context is max_position_embeddings (default 256).
	Context int

	// MLXLayout stores the mlx-lm way: conv1d [C, K, 1], zero-centred norms with the 1 folded in, and the
	// language_model prefixes of mlx-lm's Qwen3.5.
	MLXLayout bool
	// ExpertLayout is one of ExpertsPerExpert (default), ExpertsFused, ExpertsSwitch.
	ExpertLayout string
	// BF16 stores float matrices as BF16.
	BF16 bool
	// Quant, when non-nil, stores every Linear (embedding included) MLX affine-quantized with BF16 scales
	// and biases, and adds the quantization block to config.json.
	Quant *quant.Spec
	// StoreDequantized, with Quant, stores the dequantized values of the quantized model as F32 instead (no
	// quantization block): the float reference a quantized target must match.
	StoreDequantized bool
}

func (f TargetSpec) hybrid() bool { return f.Family != "qwen3" }

func (f TargetSpec) quantized() bool { return f.Quant != nil && !f.StoreDequantized }

// LayerTypes returns the layer types of the target f describes.
func (f TargetSpec) LayerTypes() []string {
	f.defaults()
	out := make([]string, f.Layers)
	for i := range out {
		if !f.hybrid() || (i+1)%f.FullAttentionInterval == 0 {
			out[i] = "full_attention"
		} else {
			out[i] = "linear_attention"
		}
	}
	return out
}

func (f *TargetSpec) defaults() {
	if f.Context == 0 {
		f.Context = 256
	}
	if f.FullAttentionInterval == 0 {
		f.FullAttentionInterval = 2
	}
	if f.PartialRotary == 0 {
		f.PartialRotary = 0.5
	}
}

func (f TargetSpec) config() map[string]any {
	c := map[string]any{
		"model_type": f.Family, "hidden_size": Hidden, "intermediate_size": inter, "num_hidden_layers": f.Layers,
		"num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": headDim, "vocab_size": Vocab,
		"max_position_embeddings": f.Context, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
		"tie_word_embeddings": f.Tied, "eos_token_id": EOS,
	}
	if f.hybrid() {
		c["layer_types"] = f.LayerTypes()
		c["full_attention_interval"] = f.FullAttentionInterval
		c["partial_rotary_factor"] = f.PartialRotary
		c["linear_num_key_heads"], c["linear_num_value_heads"] = linKHeads, linVHeads
		c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"] = linKDim, linVDim, convKernel
		if f.Family != "qwen3_next" {
			c["attn_output_gate"] = f.OutputGate
		}
	}
	if f.MoE {
		c["num_experts"], c["num_experts_per_tok"] = experts, expertsPerTok
		c["moe_intermediate_size"], c["shared_expert_intermediate_size"] = moeInter, sharedInter
		c["norm_topk_prob"] = f.NormTopK
		c["decoder_sparse_step"] = 1
		if f.MLPOnlyLayers != nil {
			c["mlp_only_layers"] = f.MLPOnlyLayers
		}
	}
	if f.quantized() {
		c["quantization"] = map[string]any{"group_size": f.Quant.GroupSize, "bits": f.Quant.Bits}
	}
	return c
}

func (f TargetSpec) isMoE(i int) bool {
	if !f.MoE {
		return false
	}
	for _, j := range f.MLPOnlyLayers {
		if j == i {
			return false
		}
	}
	return true
}

// tensorSet accumulates the tensors of a target.
type tensorSet struct {
	t  testing.TB
	f  TargetSpec
	ts []safetensors.Tensor
}

func (s *tensorSet) prefix(c string) string {
	head := c == "lm_head.weight" || c == "lm_head.scales" || c == "lm_head.biases"
	switch {
	case s.f.Family == "qwen3_5" || s.f.Family == "qwen3_5_moe":
		if s.f.MLXLayout {
			if head {
				return "language_model." + c
			}
			return "language_model.model." + c
		}
		if c == "lm_head.weight" {
			return c
		}
		return "model.language_model." + c
	}
	if head {
		return c
	}
	return "model." + c
}

func (s *tensorSet) raw(name string, shape []int, v []float32) {
	t, err := safetensors.FromFloat32(s.prefix(name), safetensors.F32, shape, v)
	require.NoError(s.t, err)
	s.ts = append(s.ts, t)
}

// matrix stores a Linear weight (module c, logical shape dims) as F32/BF16 or quantized.
func (s *tensorSet) matrix(c, wname string, dims []int, v []float32) {
	in := dims[len(dims)-1]
	rows := len(v) / in
	if s.f.Quant != nil {
		spec := *s.f.Quant
		packed, sc, bi, err := quant.Pack(v, rows, in, spec)
		require.NoError(s.t, err)
		// Scales and biases are stored as BF16 (as MLX does for bf16 models); dequantize what is stored.
		for i := range sc {
			sc[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(sc[i]))
			bi[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(bi[i]))
		}
		sdims := append(append([]int(nil), dims[:len(dims)-1]...), in/spec.GroupSize)
		if s.f.StoreDequantized {
			deq := make([]float32, len(v))
			require.NoError(s.t, quant.Dequantize(deq, packed, sc, bi, rows, in, spec))
			t, err := safetensors.FromFloat32(s.prefix(wname), safetensors.F32, dims, deq)
			require.NoError(s.t, err)
			s.ts = append(s.ts, t)
			return
		}
		wdims := append(append([]int(nil), dims[:len(dims)-1]...), in*spec.Bits/32)
		tw, err := safetensors.FromUint32(s.prefix(wname), wdims, packed)
		require.NoError(s.t, err)
		ts, err := safetensors.FromFloat32(s.prefix(c+".scales"), safetensors.BF16, sdims, sc)
		require.NoError(s.t, err)
		tb, err := safetensors.FromFloat32(s.prefix(c+".biases"), safetensors.BF16, sdims, bi)
		require.NoError(s.t, err)
		s.ts = append(s.ts, tw, ts, tb)
		return
	}
	dt := safetensors.F32
	if s.f.BF16 {
		dt = safetensors.BF16
	}
	t, err := safetensors.FromFloat32(s.prefix(wname), dt, dims, v)
	require.NoError(s.t, err)
	s.ts = append(s.ts, t)
}

func (s *tensorSet) linear(c string, out, in int, v []float32) {
	s.matrix(c, c+".weight", []int{out, in}, v)
}

// gen draws the logical model's values in a fixed order so every storage form of one seed agrees.
type gen struct{ r *rand.Rand }

func (g gen) mat(out, in int) []float32 {
	v := make([]float32, out*in)
	sc := float32(1.5 / math.Sqrt(float64(in)))
	for i := range v {
		v[i] = (g.r.Float32()*2 - 1) * sc
	}
	return v
}

func (g gen) vec(n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + g.r.Float32()*(hi-lo)
	}
	return v
}

// Target writes the target f describes into a fresh t.TempDir() and returns the directory.
func Target(t testing.TB, f TargetSpec) string {
	t.Helper()
	dir := t.TempDir()
	WriteTarget(t, dir, f)
	return dir
}

// WriteTarget writes config.json and model.safetensors of the target f describes into dir.
func WriteTarget(t testing.TB, dir string, f TargetSpec) {
	t.Helper()
	f.defaults()
	switch f.ExpertLayout {
	case "", ExpertsPerExpert, ExpertsFused, ExpertsSwitch:
	default:
		require.Failf(t, "testmodel: bad target spec", "expert layout %q", f.ExpertLayout)
	}
	cfg, err := json.Marshal(f.config())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644))
	s := &tensorSet{t: t, f: f}
	g := gen{rand.New(rand.NewPCG(f.Seed, 99))}
	zc := f.hybrid() // HF hybrid norms are zero-centred
	norm := func(c string, n int) {
		v := g.vec(n, -0.2, 0.2)
		if !zc || f.MLXLayout || f.quantized() || f.ExpertLayout == ExpertsSwitch {
			for i := range v {
				v[i] += 1
			}
		}
		s.raw(c, []int{n}, v)
	}
	embed := g.mat(Vocab, Hidden)
	for i := range embed {
		embed[i] *= 4
	}
	s.linear("embed_tokens", Vocab, Hidden, embed)
	head := g.mat(Vocab, Hidden)
	if f.HeadCopy || f.Tied {
		head = embed
	}
	if !f.Tied {
		s.linear("lm_head", Vocab, Hidden, head)
	}
	norm("norm.weight", Hidden)
	for i, kind := range f.LayerTypes() {
		p := fmt.Sprintf("layers.%d.", i)
		norm(p+"input_layernorm.weight", Hidden)
		norm(p+"post_attention_layernorm.weight", Hidden)
		if kind == "full_attention" {
			qOut := heads * headDim
			if f.Family == "qwen3_next" || (f.hybrid() && f.OutputGate) {
				qOut *= 2
			}
			s.linear(p+"self_attn.q_proj", qOut, Hidden, g.mat(qOut, Hidden))
			s.linear(p+"self_attn.k_proj", kvHeads*headDim, Hidden, g.mat(kvHeads*headDim, Hidden))
			s.linear(p+"self_attn.v_proj", kvHeads*headDim, Hidden, g.mat(kvHeads*headDim, Hidden))
			s.linear(p+"self_attn.o_proj", Hidden, heads*headDim, g.mat(Hidden, heads*headDim))
			norm(p+"self_attn.q_norm.weight", headDim)
			norm(p+"self_attn.k_norm.weight", headDim)
		} else {
			s.deltaNet(g, p+"linear_attn.")
		}
		if !f.isMoE(i) {
			s.linear(p+"mlp.gate_proj", inter, Hidden, g.mat(inter, Hidden))
			s.linear(p+"mlp.up_proj", inter, Hidden, g.mat(inter, Hidden))
			s.linear(p+"mlp.down_proj", Hidden, inter, g.mat(Hidden, inter))
			continue
		}
		s.moe(g, p+"mlp.")
	}
	require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), s.ts, nil))
}

// deltaNet draws and stores one Gated DeltaNet block under prefix q.
func (s *tensorSet) deltaNet(g gen, q string) {
	C := 2*linKHeads*linKDim + linVHeads*linVDim
	Dv := linVHeads * linVDim
	rho := linVHeads / linKHeads
	qkv, z, b, a := g.mat(C, Hidden), g.mat(Dv, Hidden), g.mat(linVHeads, Hidden), g.mat(linVHeads, Hidden)
	if s.f.Family == "qwen3_next" {
		// Group rows by key head: [q_g | k_g | v_g (ρ heads) | z_g (ρ heads)], [b_g (ρ) | a_g (ρ)].
		var qkvz, ba []float32
		row := func(m []float32, r int) []float32 { return m[r*Hidden : (r+1)*Hidden] }
		for gi := range linKHeads {
			for j := range linKDim {
				qkvz = append(qkvz, row(qkv, gi*linKDim+j)...)
			}
			for j := range linKDim {
				qkvz = append(qkvz, row(qkv, linKHeads*linKDim+gi*linKDim+j)...)
			}
			for j := range rho * linVDim {
				qkvz = append(qkvz, row(qkv, 2*linKHeads*linKDim+gi*rho*linVDim+j)...)
			}
			for j := range rho * linVDim {
				qkvz = append(qkvz, row(z, gi*rho*linVDim+j)...)
			}
			for j := range rho {
				ba = append(ba, row(b, gi*rho+j)...)
			}
			for j := range rho {
				ba = append(ba, row(a, gi*rho+j)...)
			}
		}
		s.linear(q+"in_proj_qkvz", C+Dv, Hidden, qkvz)
		s.linear(q+"in_proj_ba", 2*linVHeads, Hidden, ba)
	} else {
		s.linear(q+"in_proj_qkv", C, Hidden, qkv)
		s.linear(q+"in_proj_z", Dv, Hidden, z)
		s.linear(q+"in_proj_b", linVHeads, Hidden, b)
		s.linear(q+"in_proj_a", linVHeads, Hidden, a)
	}
	conv := g.vec(C*convKernel, -0.6, 0.6)
	if s.f.MLXLayout || s.f.quantized() {
		s.raw(q+"conv1d.weight", []int{C, convKernel, 1}, conv)
	} else {
		s.raw(q+"conv1d.weight", []int{C, 1, convKernel}, conv)
	}
	s.raw(q+"A_log", []int{linVHeads}, g.vec(linVHeads, -1, 1.5))
	s.raw(q+"dt_bias", []int{linVHeads}, g.vec(linVHeads, -0.5, 1.5))
	s.raw(q+"norm.weight", []int{linVDim}, g.vec(linVDim, 0.8, 1.2))
	s.linear(q+"out_proj", Hidden, Dv, g.mat(Hidden, Dv))
}

// moe draws and stores one sparse MoE block (router, experts in the spec's layout, shared expert) under m.
func (s *tensorSet) moe(g gen, m string) {
	s.linear(m+"gate", experts, Hidden, g.mat(experts, Hidden))
	gates, ups, downs := make([][]float32, experts), make([][]float32, experts), make([][]float32, experts)
	for e := range experts {
		gates[e], ups[e], downs[e] = g.mat(moeInter, Hidden), g.mat(moeInter, Hidden), g.mat(Hidden, moeInter)
	}
	cat := func(parts ...[]float32) []float32 {
		var out []float32
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	switch s.f.ExpertLayout {
	case ExpertsSwitch:
		s.matrix(m+"switch_mlp.gate_proj", m+"switch_mlp.gate_proj.weight", []int{experts, moeInter, Hidden}, cat(gates...))
		s.matrix(m+"switch_mlp.up_proj", m+"switch_mlp.up_proj.weight", []int{experts, moeInter, Hidden}, cat(ups...))
		s.matrix(m+"switch_mlp.down_proj", m+"switch_mlp.down_proj.weight", []int{experts, Hidden, moeInter}, cat(downs...))
	case ExpertsFused:
		var gu []float32
		for e := range experts {
			gu = append(gu, gates[e]...)
			gu = append(gu, ups[e]...)
		}
		s.matrix(m+"experts.gate_up_proj", m+"experts.gate_up_proj", []int{experts, 2 * moeInter, Hidden}, gu)
		s.matrix(m+"experts.down_proj", m+"experts.down_proj", []int{experts, Hidden, moeInter}, cat(downs...))
	default:
		for e := range experts {
			ep := fmt.Sprintf("%sexperts.%d.", m, e)
			s.linear(ep+"gate_proj", moeInter, Hidden, gates[e])
			s.linear(ep+"up_proj", moeInter, Hidden, ups[e])
			s.linear(ep+"down_proj", Hidden, moeInter, downs[e])
		}
	}
	s.linear(m+"shared_expert.gate_proj", sharedInter, Hidden, g.mat(sharedInter, Hidden))
	s.linear(m+"shared_expert.up_proj", sharedInter, Hidden, g.mat(sharedInter, Hidden))
	s.linear(m+"shared_expert.down_proj", Hidden, sharedInter, g.mat(Hidden, sharedInter))
	s.linear(m+"shared_expert_gate", 1, Hidden, g.mat(1, Hidden))
}
