package cpu

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

// fixture describes a tiny random checkpoint. The logical model (weights as the forward pass uses them) is
// generated from Seed alone; the other fields choose how it is stored, so differently stored fixtures with the
// same seed and shape describe the same model.
type fixture struct {
	Family   string // qwen3, qwen3_next, qwen3_5, qwen3_5_moe
	Seed     uint64
	Layers   int
	Interval int // hybrid full_attention_interval
	Tied     bool
	// HeadCopy stores an untied lm_head equal to the embedding (to compare with the tied form).
	HeadCopy bool
	MoE      bool
	NormTopK bool
	MLPOnly  []int
	Partial  float64 // partial_rotary_factor (hybrid)
	Gate     bool    // attn_output_gate (qwen3_5*)

	MLXLayout bool   // conv [C,Kc,1], norms folded, mlx-lm prefixes
	Experts   string // "per-expert", "fused", "switch"
	BF16      bool   // store float matrices as BF16
	QuantBits int    // > 0: MLX affine quantization of every Linear
	QuantGS   int
	Dequant   bool // store the dequantized values of the quantized model as F32 (reference for Quant)
	Context   int
}

// Tiny dimensions: every Linear input is a multiple of 32 so any group size up to 64 applies.
const (
	fxH, fxV, fxHq, fxHkv, fxD = 64, 96, 4, 2, 16
	fxHk, fxHv, fxDk, fxDv     = 2, 4, 16, 16
	fxKc, fxI, fxE, fxTopK     = 4, 64, 4, 2
	fxIMoE, fxIShared          = 32, 32
)

func (f fixture) hybrid() bool { return f.Family != "qwen3" }

func (f fixture) kinds() []string {
	out := make([]string, f.Layers)
	for i := range out {
		if !f.hybrid() || (i+1)%f.Interval == 0 {
			out[i] = "full_attention"
		} else {
			out[i] = "linear_attention"
		}
	}
	return out
}

func (f fixture) config() map[string]any {
	c := map[string]any{
		"model_type": f.Family, "hidden_size": fxH, "intermediate_size": fxI, "num_hidden_layers": f.Layers,
		"num_attention_heads": fxHq, "num_key_value_heads": fxHkv, "head_dim": fxD, "vocab_size": fxV,
		"max_position_embeddings": f.Context, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
		"tie_word_embeddings": f.Tied, "eos_token_id": 3,
	}
	if f.hybrid() {
		c["layer_types"] = f.kinds()
		c["full_attention_interval"] = f.Interval
		c["partial_rotary_factor"] = f.Partial
		c["linear_num_key_heads"], c["linear_num_value_heads"] = fxHk, fxHv
		c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"] = fxDk, fxDv, fxKc
		if f.Family != "qwen3_next" {
			c["attn_output_gate"] = f.Gate
		}
	}
	if f.MoE {
		c["num_experts"], c["num_experts_per_tok"] = fxE, fxTopK
		c["moe_intermediate_size"], c["shared_expert_intermediate_size"] = fxIMoE, fxIShared
		c["norm_topk_prob"] = f.NormTopK
		c["decoder_sparse_step"] = 1
		if f.MLPOnly != nil {
			c["mlp_only_layers"] = f.MLPOnly
		}
	}
	if f.QuantBits > 0 && !f.Dequant {
		c["quantization"] = map[string]any{"group_size": f.QuantGS, "bits": f.QuantBits}
	}
	return c
}

func (f fixture) isMoE(i int) bool {
	if !f.MoE {
		return false
	}
	for _, j := range f.MLPOnly {
		if j == i {
			return false
		}
	}
	return true
}

// tensorSet accumulates tensors to write.
type tensorSet struct {
	t  testing.TB
	f  fixture
	ts []safetensors.Tensor
}

func (s *tensorSet) prefix(c string) string {
	switch {
	case s.f.Family == "qwen3_5" || s.f.Family == "qwen3_5_moe":
		if s.f.MLXLayout {
			if c == "lm_head.weight" || c == "lm_head.scales" || c == "lm_head.biases" {
				return "language_model." + c
			}
			return "language_model.model." + c
		}
		if c == "lm_head.weight" {
			return c
		}
		return "model.language_model." + c
	}
	if c == "lm_head.weight" || c == "lm_head.scales" || c == "lm_head.biases" {
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
	if s.f.QuantBits > 0 {
		spec := quant.Spec{Bits: s.f.QuantBits, GroupSize: s.f.QuantGS}
		packed, sc, bi, err := quant.Pack(v, rows, in, spec)
		require.NoError(s.t, err)
		// Scales and biases are stored as BF16 (as MLX does for bf16 models); dequantize what is stored.
		for i := range sc {
			sc[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(sc[i]))
			bi[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(bi[i]))
		}
		sdims := append(append([]int(nil), dims[:len(dims)-1]...), in/spec.GroupSize)
		if s.f.Dequant {
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

// write creates the checkpoint directory.
func (f fixture) write(t testing.TB) string {
	t.Helper()
	if f.Context == 0 {
		f.Context = 256
	}
	if f.Interval == 0 {
		f.Interval = 2
	}
	if f.Partial == 0 {
		f.Partial = 0.5
	}
	dir := t.TempDir()
	cfg, err := json.Marshal(f.config())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644))
	s := &tensorSet{t: t, f: f}
	g := gen{rand.New(rand.NewPCG(f.Seed, 99))}
	zc := f.hybrid() // HF hybrid norms are zero-centred
	norm := func(c string, n int) {
		v := g.vec(n, -0.2, 0.2)
		if !zc || f.MLXLayout || f.QuantBits > 0 && !f.Dequant || f.Experts == "switch" {
			for i := range v {
				v[i] += 1
			}
		}
		s.raw(c, []int{n}, v)
	}
	embed := g.mat(fxV, fxH)
	for i := range embed {
		embed[i] *= 4
	}
	s.linear("embed_tokens", fxV, fxH, embed)
	head := g.mat(fxV, fxH)
	if f.HeadCopy {
		head = embed
	}
	if f.Tied {
		head = embed
	} else {
		s.linear("lm_head", fxV, fxH, head)
	}
	norm("norm.weight", fxH)
	C := 2*fxHk*fxDk + fxHv*fxDv
	Dv := fxHv * fxDv
	rho := fxHv / fxHk
	for i, kind := range f.kinds() {
		p := fmt.Sprintf("layers.%d.", i)
		norm(p+"input_layernorm.weight", fxH)
		norm(p+"post_attention_layernorm.weight", fxH)
		if kind == "full_attention" {
			qOut := fxHq * fxD
			if f.Family == "qwen3_next" || (f.hybrid() && f.Gate) {
				qOut *= 2
			}
			s.linear(p+"self_attn.q_proj", qOut, fxH, g.mat(qOut, fxH))
			s.linear(p+"self_attn.k_proj", fxHkv*fxD, fxH, g.mat(fxHkv*fxD, fxH))
			s.linear(p+"self_attn.v_proj", fxHkv*fxD, fxH, g.mat(fxHkv*fxD, fxH))
			s.linear(p+"self_attn.o_proj", fxH, fxHq*fxD, g.mat(fxH, fxHq*fxD))
			norm(p+"self_attn.q_norm.weight", fxD)
			norm(p+"self_attn.k_norm.weight", fxD)
		} else {
			q := p + "linear_attn."
			qkv, z, b, a := g.mat(C, fxH), g.mat(Dv, fxH), g.mat(fxHv, fxH), g.mat(fxHv, fxH)
			if f.Family == "qwen3_next" {
				// Group rows by key head: [q_g | k_g | v_g (ρ heads) | z_g (ρ heads)], [b_g (ρ) | a_g (ρ)].
				var qkvz, ba []float32
				row := func(m []float32, r int) []float32 { return m[r*fxH : (r+1)*fxH] }
				for gi := range fxHk {
					for j := range fxDk {
						qkvz = append(qkvz, row(qkv, gi*fxDk+j)...)
					}
					for j := range fxDk {
						qkvz = append(qkvz, row(qkv, fxHk*fxDk+gi*fxDk+j)...)
					}
					for j := range rho * fxDv {
						qkvz = append(qkvz, row(qkv, 2*fxHk*fxDk+gi*rho*fxDv+j)...)
					}
					for j := range rho * fxDv {
						qkvz = append(qkvz, row(z, gi*rho*fxDv+j)...)
					}
					for j := range rho {
						ba = append(ba, row(b, gi*rho+j)...)
					}
					for j := range rho {
						ba = append(ba, row(a, gi*rho+j)...)
					}
				}
				s.linear(q+"in_proj_qkvz", C+Dv, fxH, qkvz)
				s.linear(q+"in_proj_ba", 2*fxHv, fxH, ba)
			} else {
				s.linear(q+"in_proj_qkv", C, fxH, qkv)
				s.linear(q+"in_proj_z", Dv, fxH, z)
				s.linear(q+"in_proj_b", fxHv, fxH, b)
				s.linear(q+"in_proj_a", fxHv, fxH, a)
			}
			conv := g.vec(C*fxKc, -0.6, 0.6)
			if f.MLXLayout || f.QuantBits > 0 && !f.Dequant {
				s.raw(q+"conv1d.weight", []int{C, fxKc, 1}, conv)
			} else {
				s.raw(q+"conv1d.weight", []int{C, 1, fxKc}, conv)
			}
			aLog := g.vec(fxHv, -1, 1.5)
			s.raw(q+"A_log", []int{fxHv}, aLog)
			s.raw(q+"dt_bias", []int{fxHv}, g.vec(fxHv, -0.5, 1.5))
			s.raw(q+"norm.weight", []int{fxDv}, g.vec(fxDv, 0.8, 1.2))
			s.linear(q+"out_proj", fxH, Dv, g.mat(fxH, Dv))
		}
		if !f.isMoE(i) {
			s.linear(p+"mlp.gate_proj", fxI, fxH, g.mat(fxI, fxH))
			s.linear(p+"mlp.up_proj", fxI, fxH, g.mat(fxI, fxH))
			s.linear(p+"mlp.down_proj", fxH, fxI, g.mat(fxH, fxI))
			continue
		}
		m := p + "mlp."
		s.linear(m+"gate", fxE, fxH, g.mat(fxE, fxH))
		gates, ups, downs := make([][]float32, fxE), make([][]float32, fxE), make([][]float32, fxE)
		for e := range fxE {
			gates[e], ups[e], downs[e] = g.mat(fxIMoE, fxH), g.mat(fxIMoE, fxH), g.mat(fxH, fxIMoE)
		}
		cat := func(parts ...[]float32) []float32 {
			var out []float32
			for _, p := range parts {
				out = append(out, p...)
			}
			return out
		}
		switch f.Experts {
		case "switch":
			s.matrix(m+"switch_mlp.gate_proj", m+"switch_mlp.gate_proj.weight", []int{fxE, fxIMoE, fxH}, cat(gates...))
			s.matrix(m+"switch_mlp.up_proj", m+"switch_mlp.up_proj.weight", []int{fxE, fxIMoE, fxH}, cat(ups...))
			s.matrix(m+"switch_mlp.down_proj", m+"switch_mlp.down_proj.weight", []int{fxE, fxH, fxIMoE}, cat(downs...))
		case "fused":
			var gu []float32
			for e := range fxE {
				gu = append(gu, gates[e]...)
				gu = append(gu, ups[e]...)
			}
			s.matrix(m+"experts.gate_up_proj", m+"experts.gate_up_proj", []int{fxE, 2 * fxIMoE, fxH}, gu)
			s.matrix(m+"experts.down_proj", m+"experts.down_proj", []int{fxE, fxH, fxIMoE}, cat(downs...))
		default:
			for e := range fxE {
				ep := fmt.Sprintf("%sexperts.%d.", m, e)
				s.linear(ep+"gate_proj", fxIMoE, fxH, gates[e])
				s.linear(ep+"up_proj", fxIMoE, fxH, ups[e])
				s.linear(ep+"down_proj", fxH, fxIMoE, downs[e])
			}
		}
		s.linear(m+"shared_expert.gate_proj", fxIShared, fxH, g.mat(fxIShared, fxH))
		s.linear(m+"shared_expert.up_proj", fxIShared, fxH, g.mat(fxIShared, fxH))
		s.linear(m+"shared_expert.down_proj", fxH, fxIShared, g.mat(fxH, fxIShared))
		s.linear(m+"shared_expert_gate", 1, fxH, g.mat(1, fxH))
	}
	require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), s.ts, nil))
	return dir
}
