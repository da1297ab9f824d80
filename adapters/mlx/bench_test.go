package mlx

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// A synthetic ~100M-parameter hybrid Qwen3-Next (f32): H 768, 12 layers (every 4th full attention), dense
// MLP 2048, vocab 32000 tied. Random weights; only the timing matters.
const (
	bH, bLayers, bI, bV     = 768, 12, 2048, 32000
	bHq, bHkv, bD           = 12, 4, 64
	bHk, bHv, bDk, bDv, bKc = 4, 8, 64, 64, 4
	benchPromptLen, benchBS = 64, 16
)

var (
	benchOnce sync.Once
	benchDir  string
	benchErr  error
)

func writeBenchModel() (string, error) {
	dir, err := os.MkdirTemp("", "higgs-mlx-bench-")
	if err != nil {
		return "", err
	}
	kinds := make([]string, bLayers)
	for i := range kinds {
		kinds[i] = "linear_attention"
		if (i+1)%4 == 0 {
			kinds[i] = "full_attention"
		}
	}
	cfg := map[string]any{
		"model_type": "qwen3_next", "hidden_size": bH, "intermediate_size": bI, "num_hidden_layers": bLayers,
		"num_attention_heads": bHq, "num_key_value_heads": bHkv, "head_dim": bD, "vocab_size": bV,
		"max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true,
		"layer_types": kinds, "full_attention_interval": 4, "partial_rotary_factor": 0.25,
		"linear_num_key_heads": bHk, "linear_num_value_heads": bHv, "linear_key_head_dim": bDk,
		"linear_value_head_dim": bDv, "linear_conv_kernel_dim": bKc,
	}
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return "", err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ts []safetensors.Tensor
	add := func(name string, scale float32, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = (rng.Float32()*2 - 1) * scale
		}
		t, e := safetensors.FromFloat32("model."+name, safetensors.F32, shape, v)
		if e != nil && err == nil {
			err = e
		}
		ts = append(ts, t)
	}
	lin := func(name string, out, in int) { add(name+".weight", 1/float32(in), out, in) }
	add("embed_tokens.weight", 0.05, bV, bH)
	add("norm.weight", 0.1, bH)
	C, Dv := 2*bHk*bDk+bHv*bDv, bHv*bDv
	for i, k := range kinds {
		p := fmt.Sprintf("layers.%d.", i)
		add(p+"input_layernorm.weight", 0.1, bH)
		add(p+"post_attention_layernorm.weight", 0.1, bH)
		if k == "full_attention" {
			lin(p+"self_attn.q_proj", 2*bHq*bD, bH)
			lin(p+"self_attn.k_proj", bHkv*bD, bH)
			lin(p+"self_attn.v_proj", bHkv*bD, bH)
			lin(p+"self_attn.o_proj", bH, bHq*bD)
			add(p+"self_attn.q_norm.weight", 0.1, bD)
			add(p+"self_attn.k_norm.weight", 0.1, bD)
		} else {
			q := p + "linear_attn."
			lin(q+"in_proj_qkvz", C+Dv, bH)
			lin(q+"in_proj_ba", 2*bHv, bH)
			add(q+"conv1d.weight", 0.5, C, 1, bKc)
			add(q+"A_log", 1, bHv)
			add(q+"dt_bias", 1, bHv)
			add(q+"norm.weight", 1, bDv)
			lin(q+"out_proj", bH, Dv)
		}
		lin(p+"mlp.gate_proj", bI, bH)
		lin(p+"mlp.up_proj", bI, bH)
		lin(p+"mlp.down_proj", bH, bI)
	}
	if err != nil {
		return "", err
	}
	return dir, safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, nil)
}

func benchTarget(b *testing.B) *Target {
	requireMLX(b)
	benchOnce.Do(func() { benchDir, benchErr = writeBenchModel() })
	require.NoError(b, benchErr)
	tg, err := Load(b.Context(), benchDir, LoadOptions{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = tg.Close() })
	return tg
}

func benchPrompt() []ports.Token {
	p := make([]ports.Token, benchPromptLen)
	for i := range p {
		p[i] = ports.Token((i*7919 + 13) % bV)
	}
	return p
}

func reportProfile(b *testing.B, s *Session, before profile) {
	p := s.prof
	n := float64(p.forwards - before.forwards)
	build := float64((p.build - before.build).Nanoseconds()) / n
	eval := float64((p.eval - before.eval).Nanoseconds()) / n
	read := float64((p.read - before.read).Nanoseconds()) / n
	b.ReportMetric(build, "build-ns/fwd")
	b.ReportMetric(eval, "eval-ns/fwd")
	b.ReportMetric(100*(build+read)/(build+eval+read), "go-%")
}

// BenchmarkDecodeStep: one token forward after a 64-token prefill (Go-side graph building vs MLX evaluation).
func BenchmarkDecodeStep(b *testing.B) {
	tg := benchTarget(b)
	s, err := tg.NewSession(b.Context(), nil)
	require.NoError(b, err)
	defer s.Close()
	r, err := s.Forward(b.Context(), benchPrompt(), ports.ForwardOptions{Rows: 1})
	require.NoError(b, err)
	tok := r.Greedy[0]
	ms := s.(*Session)
	before := ms.prof
	for b.Loop() {
		if s.Len() >= 4000 {
			require.NoError(b, s.TrimKV(benchPromptLen))
		}
		r, err := s.Forward(b.Context(), []ports.Token{tok}, ports.ForwardOptions{})
		require.NoError(b, err)
		tok = r.Greedy[0]
	}
	reportProfile(b, ms, before)
}

// BenchmarkVerifyRound: a 16-token verify with taps and tape, rolled back to 5 positions by tape replay
// (the per-round target work of speculative decoding).
func BenchmarkVerifyRound(b *testing.B) {
	tg := benchTarget(b)
	s, err := tg.NewSession(b.Context(), []int{1, 5, 9})
	require.NoError(b, err)
	defer s.Close()
	_, err = s.Forward(b.Context(), benchPrompt(), ports.ForwardOptions{Rows: 1})
	require.NoError(b, err)
	block := make([]ports.Token, benchBS)
	for i := range block {
		block[i] = ports.Token(100 + i)
	}
	ms := s.(*Session)
	before := ms.prof
	for b.Loop() {
		pre := s.Len()
		fr, err := s.Forward(b.Context(), block, ports.ForwardOptions{Taps: true, RecordTape: true})
		require.NoError(b, err)
		require.NoError(b, s.TrimKV(pre+5))
		require.NoError(b, ms.ReplayTape(b.Context(), fr.Tape, 5))
		if s.Len() >= 3900 {
			_ = s.Close()
			b.Fatal("context filled; lower b.N")
		}
	}
	reportProfile(b, ms, before)
}

// BenchmarkCPUDecodeStep is BenchmarkDecodeStep on the CPU backend (same checkpoint), for comparison.
func BenchmarkCPUDecodeStep(b *testing.B) {
	benchOnce.Do(func() { benchDir, benchErr = writeBenchModel() })
	require.NoError(b, benchErr)
	tg, err := cpu.Load(b.Context(), benchDir, cpu.LoadOptions{})
	require.NoError(b, err)
	defer tg.Close()
	s, err := tg.NewSession(b.Context(), nil)
	require.NoError(b, err)
	defer s.Close()
	r, err := s.Forward(b.Context(), benchPrompt(), ports.ForwardOptions{Rows: 1})
	require.NoError(b, err)
	tok := r.Greedy[0]
	for b.Loop() {
		if s.Len() >= 4000 {
			require.NoError(b, s.TrimKV(benchPromptLen))
		}
		r, err := s.Forward(b.Context(), []ports.Token{tok}, ports.ForwardOptions{})
		require.NoError(b, err)
		tok = r.Greedy[0]
	}
}
