package hfmodel

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/ports"
)

var update = flag.Bool("update", false, "rewrite golden files")

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// patch decodes a testdata config, applies edits (a nil value deletes the key; "text_config.x" edits inside
// text_config) and re-encodes it.
func patch(t testing.TB, name string, edits map[string]any) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(readTestdata(t, name), &m))
	for k, v := range edits {
		target := m
		if rest, ok := strings.CutPrefix(k, "text_config."); ok {
			target = m["text_config"].(map[string]any)
			k = rest
		}
		if rest, ok := strings.CutPrefix(k, "dflash_config."); ok {
			target = m["dflash_config"].(map[string]any)
			k = rest
		}
		if v == nil {
			delete(target, k)
		} else {
			target[k] = v
		}
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// checkGolden compares v (as indented JSON) with testdata/golden/name, rewriting it under -update.
func checkGolden(t *testing.T, name string, v any) {
	t.Helper()
	if c, ok := v.(*TextConfig); ok {
		// Layer kinds as words ("attention"/"recurrent") keep the golden file readable.
		b, err := json.Marshal(c)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		names := make([]string, len(c.LayerTypes))
		for i, k := range c.LayerTypes {
			names[i] = k.String()
		}
		m["LayerTypes"] = strings.Join(names, " ")
		v = m
	}
	got, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	got = append(got, '\n')
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./adapters/hfmodel -update")
	assert.Equal(t, string(want), string(got), "golden %s differs (rerun with -update if the change is intended)", name)
}

func kinds(n int, attnEvery int) []ports.LayerKind {
	out := make([]ports.LayerKind, n)
	for i := range out {
		out[i] = ports.LayerRecurrent
		if attnEvery == 1 || (i+1)%attnEvery == 0 {
			out[i] = ports.LayerAttention
		}
	}
	return out
}

func TestParseRealShapedConfigs(t *testing.T) {
	t.Run("qwen3-4b", func(t *testing.T) {
		c, err := ParseConfig(readTestdata(t, "qwen3-4b.json"))
		require.NoError(t, err)
		assert.Equal(t, ModelQwen3, c.ModelType)
		assert.False(t, c.Hybrid())
		assert.Equal(t, 128, c.HeadDim, "explicit head_dim, not hidden/heads = 80")
		assert.Equal(t, 128, c.RotaryDims())
		assert.Equal(t, 1e6, c.RopeTheta)
		assert.True(t, c.TieWordEmbeddings)
		assert.False(t, c.AttnOutputGate)
		assert.Equal(t, kinds(36, 1), c.LayerTypes)
		assert.Equal(t, []int32{151645}, c.EOSTokenIDs)
		assert.Nil(t, c.Quantization)
		for i := range 36 {
			assert.False(t, c.IsMoELayer(i))
		}
		checkGolden(t, "qwen3-4b.json", c)
	})
	t.Run("qwen3-next-80b", func(t *testing.T) {
		c, err := ParseConfig(readTestdata(t, "qwen3-next-80b-a3b.json"))
		require.NoError(t, err)
		assert.Equal(t, ModelQwen3Next, c.ModelType)
		assert.True(t, c.Hybrid())
		assert.Equal(t, 64, c.RotaryDims())
		assert.Equal(t, 1e7, c.RopeTheta)
		assert.True(t, c.AttnOutputGate, "implicit for qwen3_next")
		assert.Equal(t, kinds(48, 4), c.LayerTypes)
		assert.Equal(t, ports.LayerAttention, c.LayerTypes[3])
		assert.Equal(t, ports.LayerRecurrent, c.LayerTypes[4])
		assert.Equal(t, 512, c.NumExperts)
		assert.True(t, c.NormTopKProb)
		assert.True(t, c.IsMoELayer(0))
		assert.True(t, c.IsMoELayer(47))
		assert.False(t, c.IsMoELayer(48))
		assert.False(t, c.HasDenseMLP())
		assert.False(t, c.SeparateGDNProjections(0), "Next stores in_proj_ba fused")
		checkGolden(t, "qwen3-next-80b-a3b.json", c)
	})
	t.Run("qwen3.5-4b", func(t *testing.T) {
		c, err := ParseConfig(readTestdata(t, "qwen3.5-4b.json"))
		require.NoError(t, err)
		assert.Equal(t, ModelQwen35, c.ModelType, "text_config qwen3_5_text reports the wrapper type")
		assert.Equal(t, []string{"Qwen3_5ForConditionalGeneration"}, c.Architectures)
		assert.Equal(t, 2560, c.HiddenSize, "read from text_config")
		assert.Equal(t, 1e7, c.RopeTheta, "from rope_parameters")
		assert.Equal(t, 0.25, c.PartialRotaryFactor)
		assert.Equal(t, 64, c.RotaryDims())
		assert.Equal(t, []int{11, 11, 10}, c.MRopeSection)
		assert.True(t, c.MRopeInterleaved)
		assert.Equal(t, kinds(32, 4), c.LayerTypes)
		assert.Equal(t, []int32{248044}, c.EOSTokenIDs)
		assert.Equal(t, 0, c.NumExperts)
		assert.True(t, c.HasDenseMLP())
		checkGolden(t, "qwen3.5-4b.json", c)
	})
	t.Run("qwen3.5-35b-a3b", func(t *testing.T) {
		c, err := ParseConfig(readTestdata(t, "qwen3.5-35b-a3b.json"))
		require.NoError(t, err)
		assert.Equal(t, ModelQwen35MoE, c.ModelType)
		assert.Equal(t, 0, c.IntermediateSize, "no dense layer, so no intermediate_size needed")
		for i := range 40 {
			assert.True(t, c.IsMoELayer(i), "layer %d", i)
		}
		assert.True(t, c.NormTopKProb, "qwen3_5 default")
		assert.False(t, c.TieWordEmbeddings)
		checkGolden(t, "qwen3.5-35b-a3b.json", c)
	})
	t.Run("qwen3.5-4b mlx mixed-bit", func(t *testing.T) {
		c, err := ParseConfig(readTestdata(t, "qwen3.5-4b-mlx-mixed.json"))
		require.NoError(t, err)
		q := c.Quantization
		require.NotNil(t, q)
		assert.Equal(t, quant.Spec{Bits: 4, GroupSize: 64}, q.Default)
		assert.Equal(t, "affine", q.Mode)
		assert.Len(t, q.Overrides, 6)
		assert.Nil(t, q.Overrides["language_model.model.embed_tokens"])

		tests := []struct {
			path      string
			spec      quant.Spec
			quantized bool
		}{
			{"layers.0.linear_attn.in_proj_a", quant.Spec{Bits: 8, GroupSize: 64}, true},
			{"language_model.model.layers.0.linear_attn.in_proj_a", quant.Spec{Bits: 8, GroupSize: 64}, true},
			{"model.language_model.layers.0.linear_attn.in_proj_a.weight", quant.Spec{Bits: 8, GroupSize: 64}, true},
			{"layers.0.linear_attn.in_proj_b", quant.Spec{Bits: 4, GroupSize: 64}, true},
			{"layers.2.linear_attn.in_proj_b", quant.Spec{}, false},
			{"embed_tokens", quant.Spec{}, false},
			{"lm_head", quant.Spec{Bits: 6, GroupSize: 64}, true},
			{"language_model.lm_head.scales", quant.Spec{Bits: 6, GroupSize: 64}, true},
			{"layers.5.mlp.down_proj", quant.Spec{Bits: 4, GroupSize: 64}, true},
		}
		for _, tc := range tests {
			spec, ok := q.For(tc.path)
			assert.Equal(t, tc.quantized, ok, tc.path)
			assert.Equal(t, tc.spec, spec, tc.path)
		}

		assert.True(t, c.SeparateGDNProjections(0), "in_proj_a 8-bit vs in_proj_b 4-bit")
		assert.False(t, c.SeparateGDNProjections(1), "both overridden to the same spec")
		assert.True(t, c.SeparateGDNProjections(2), "in_proj_b not quantized")
		assert.False(t, c.SeparateGDNProjections(3), "attention layer")
		assert.False(t, c.SeparateGDNProjections(4), "both default")
		assert.False(t, c.SeparateGDNProjections(-1))
		assert.False(t, c.SeparateGDNProjections(99))
		q.ForceSeparateGDNProjections = true
		assert.True(t, c.SeparateGDNProjections(4))
		assert.False(t, c.SeparateGDNProjections(3), "still not for attention layers")
		q.ForceSeparateGDNProjections = false
		checkGolden(t, "qwen3.5-4b-mlx-mixed.json", c)
	})
}

func TestNilQuantization(t *testing.T) {
	var q *Quantization
	_, ok := q.For("layers.0.mlp.gate")
	assert.False(t, ok)
	c, err := ParseConfig(readTestdata(t, "qwen3.5-4b.json"))
	require.NoError(t, err)
	assert.False(t, c.SeparateGDNProjections(0))
}

func TestParseConfigVariants(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		edits map[string]any
		check func(t *testing.T, c *TextConfig)
	}{
		{"rope_theta only at top level for qwen3.5", "qwen3.5-4b.json", map[string]any{
			"text_config.rope_parameters": map[string]any{"rope_type": "default", "mrope_section": []int{11, 11, 10}},
			"text_config.rope_theta":      5e6,
		}, func(t *testing.T, c *TextConfig) {
			assert.Equal(t, 5e6, c.RopeTheta)
			assert.Equal(t, 0.25, c.PartialRotaryFactor, "default for the hybrid family")
		}},
		{"partial_rotary_factor top level", "qwen3.5-4b.json", map[string]any{
			"text_config.rope_parameters":       map[string]any{"rope_theta": 1e7},
			"text_config.partial_rotary_factor": 0.5,
		}, func(t *testing.T, c *TextConfig) { assert.Equal(t, 128, c.RotaryDims()) }},
		{"no text_config nesting", "qwen3-next-80b-a3b.json", map[string]any{"model_type": "qwen3_5_moe", "mlp_only_layers": nil, "intermediate_size": nil},
			func(t *testing.T, c *TextConfig) {
				assert.Equal(t, ModelQwen35MoE, c.ModelType)
				assert.True(t, c.IsMoELayer(0))
			}},
		{"interval only", "qwen3.5-4b.json", map[string]any{"text_config.layer_types": nil, "text_config.full_attention_interval": 2},
			func(t *testing.T, c *TextConfig) { assert.Equal(t, kinds(32, 2), c.LayerTypes) }},
		{"no interval, no layer_types", "qwen3.5-4b.json", map[string]any{"text_config.layer_types": nil, "text_config.full_attention_interval": nil},
			func(t *testing.T, c *TextConfig) { assert.Equal(t, kinds(32, 4), c.LayerTypes) }},
		{"layer_types without interval may be irregular", "qwen3.5-4b.json", map[string]any{"text_config.full_attention_interval": nil,
			"text_config.layer_types": append([]string{"full_attention"}, strings.Split(strings.Repeat("linear_attention,", 31), ",")[:31]...)},
			func(t *testing.T, c *TextConfig) {
				assert.Equal(t, ports.LayerAttention, c.LayerTypes[0])
				assert.Equal(t, ports.LayerRecurrent, c.LayerTypes[3])
			}},
		{"eos list", "qwen3-4b.json", map[string]any{"eos_token_id": []int{151645, 151643}},
			func(t *testing.T, c *TextConfig) { assert.Equal(t, []int32{151645, 151643}, c.EOSTokenIDs) }},
		{"eos absent", "qwen3-4b.json", map[string]any{"eos_token_id": nil},
			func(t *testing.T, c *TextConfig) { assert.Empty(t, c.EOSTokenIDs) }},
		{"head_dim derived when absent", "qwen3-4b.json", map[string]any{"head_dim": nil},
			func(t *testing.T, c *TextConfig) { assert.Equal(t, 80, c.HeadDim) }},
		{"kv heads default to heads", "qwen3-4b.json", map[string]any{"num_key_value_heads": nil},
			func(t *testing.T, c *TextConfig) { assert.Equal(t, 32, c.NumKeyValueHeads) }},
		{"rope_scaling default type", "qwen3-4b.json", map[string]any{"rope_scaling": map[string]any{"rope_type": "default", "rope_theta": 1e6}},
			func(t *testing.T, c *TextConfig) { assert.Equal(t, 1e6, c.RopeTheta) }},
		{"qwen3 layer_types all full", "qwen3-4b.json", map[string]any{"layer_types": strings.Split(strings.TrimSuffix(strings.Repeat("full_attention,", 36), ","), ",")},
			func(t *testing.T, c *TextConfig) { assert.Equal(t, kinds(36, 1), c.LayerTypes) }},
		{"next with mlp_only_layers and sparse step", "qwen3-next-80b-a3b.json", map[string]any{"mlp_only_layers": []int{0, 5}, "decoder_sparse_step": 2},
			func(t *testing.T, c *TextConfig) {
				assert.False(t, c.IsMoELayer(0))
				assert.True(t, c.IsMoELayer(1))
				assert.False(t, c.IsMoELayer(2))
				assert.True(t, c.IsMoELayer(3))
				assert.False(t, c.IsMoELayer(5), "mlp_only even though (5+1)%2==0")
				assert.True(t, c.HasDenseMLP())
			}},
		{"integral float ints", "qwen3-4b.json", map[string]any{"hidden_size": 2560.0, "vocab_size": json.Number("1.51936e5")},
			func(t *testing.T, c *TextConfig) { assert.Equal(t, 151936, c.VocabSize) }},
		{"quantization_config only", "qwen3-4b.json", map[string]any{"quantization_config": map[string]any{"group_size": 32, "bits": 3}},
			func(t *testing.T, c *TextConfig) {
				require.NotNil(t, c.Quantization)
				assert.Equal(t, quant.Spec{Bits: 3, GroupSize: 32}, c.Quantization.Default)
			}},
		{"output_gate_type sigmoid", "qwen3.5-4b.json", map[string]any{"text_config.output_gate_type": "sigmoid"}, nil},
		{"tie agrees", "qwen3.5-4b.json", map[string]any{"tie_word_embeddings": true}, nil},
		{"tie only top-level", "qwen3.5-4b.json", map[string]any{"text_config.tie_word_embeddings": nil, "tie_word_embeddings": true},
			func(t *testing.T, c *TextConfig) { assert.True(t, c.TieWordEmbeddings) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(patch(t, tc.file, tc.edits))
			require.NoError(t, err)
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestParseConfigRejects(t *testing.T) {
	tests := []struct {
		name        string
		file        string
		edits       map[string]any
		unsupported bool
		want        []string
	}{
		{"unknown model_type", "qwen3-4b.json", map[string]any{"model_type": "llama"}, true, []string{`"llama"`}},
		{"qwen3_moe", "qwen3-4b.json", map[string]any{"model_type": "qwen3_moe"}, true, []string{"qwen3_moe"}},
		{"missing model_type", "qwen3-4b.json", map[string]any{"model_type": nil}, false, []string{"model_type is missing"}},
		{"unknown text model_type", "qwen3.5-4b.json", map[string]any{"text_config.model_type": "qwen4_text"}, true, []string{"qwen4_text"}},
		{"text model_type disagrees", "qwen3.5-4b.json", map[string]any{"text_config.model_type": "qwen3_5_moe_text"}, false, []string{"disagree"}},
		{"drafter given as target", "dflash-qwen3-4b-b16.json", nil, false, []string{"DFlash drafter"}},
		{"dynamic rope", "qwen3-4b.json", map[string]any{"rope_scaling": map[string]any{"rope_type": "dynamic", "factor": 4.0}}, true, []string{"dynamic"}},
		{"old-style rope_scaling type", "qwen3-4b.json", map[string]any{"rope_scaling": map[string]any{"type": "longrope", "factor": 2.0}}, true, []string{"longrope"}},
		{"rope_parameters yarn without factor", "qwen3.5-4b.json", map[string]any{"text_config.rope_parameters": map[string]any{"rope_type": "yarn", "rope_theta": 1e7, "partial_rotary_factor": 0.25}}, false, []string{"factor"}},
		{"sliding window", "qwen3-4b.json", map[string]any{"use_sliding_window": true}, true, []string{"use_sliding_window"}},
		{"qwen3 sliding layer", "qwen3-4b.json", map[string]any{"layer_types": []string{"sliding_attention"}}, true, []string{"sliding_attention"}},
		{"hidden_act", "qwen3-4b.json", map[string]any{"hidden_act": "gelu"}, true, []string{"gelu"}},
		{"attention_bias", "qwen3-4b.json", map[string]any{"attention_bias": true}, true, []string{"attention_bias"}},
		{"output_gate_type swish", "qwen3.5-4b.json", map[string]any{"text_config.output_gate_type": "swish"}, true, []string{"output_gate_type", "swish"}},
		{"next without gate", "qwen3-next-80b-a3b.json", map[string]any{"attn_output_gate": false}, true, []string{"attn_output_gate"}},
		{"mxfp4", "qwen3-4b.json", map[string]any{"quantization": map[string]any{"group_size": 32, "bits": 4, "mode": "mxfp4"}}, true, []string{"mxfp4"}},
		{"hf fp8", "qwen3-4b.json", map[string]any{"quantization_config": map[string]any{"quant_method": "fp8"}}, true, []string{"quant_method", "fp8"}},
		{"quant bits 7", "qwen3-4b.json", map[string]any{"quantization": map[string]any{"group_size": 64, "bits": 7}}, true, []string{"bits 7"}},
		{"quant missing bits", "qwen3-4b.json", map[string]any{"quantization": map[string]any{"group_size": 64}}, false, []string{"bits and group_size"}},
		{"quant bad override", "qwen3-4b.json", map[string]any{"quantization": map[string]any{"group_size": 64, "bits": 4, "model.layers.0.mlp.gate_proj": true}}, true, []string{"model.layers.0.mlp.gate_proj"}},
		{"quant override bad group", "qwen3-4b.json", map[string]any{"quantization": map[string]any{"group_size": 64, "bits": 4, "model.layers.0.mlp.gate_proj": map[string]any{"group_size": 48, "bits": 4}}}, true, []string{"group_size 48"}},
		{"quant override extra key", "qwen3-4b.json", map[string]any{"quantization": map[string]any{"group_size": 64, "bits": 4, "lm_head": map[string]any{"group_size": 64, "bits": 4, "x": 1}}}, false, []string{`"x"`}},
		{"heads not divisible", "qwen3-4b.json", map[string]any{"num_key_value_heads": 5}, false, []string{"not a multiple of num_key_value_heads"}},
		{"Hv not divisible by Hk", "qwen3-next-80b-a3b.json", map[string]any{"linear_num_value_heads": 24, "linear_num_key_heads": 16}, false, []string{"linear_num_value_heads 24"}},
		{"layer_types length", "qwen3.5-4b.json", map[string]any{"text_config.layer_types": []string{"linear_attention", "full_attention"}}, false, []string{"2 entries for 32 layers"}},
		{"layer_types vs interval", "qwen3.5-4b.json", map[string]any{"text_config.full_attention_interval": 2}, false, []string{"disagrees with full_attention_interval", "[1 5"}},
		{"unknown layer type", "qwen3.5-4b.json", map[string]any{"text_config.layer_types": append([]string{"mamba"}, kindsStrings(31)...)}, true, []string{"mamba"}},
		{"tie mismatch", "qwen3.5-4b.json", map[string]any{"tie_word_embeddings": false}, false, []string{"tie_word_embeddings"}},
		{"missing linear dims", "qwen3-next-80b-a3b.json", map[string]any{"linear_key_head_dim": nil, "linear_conv_kernel_dim": 0}, false, []string{"linear_key_head_dim", "linear_conv_kernel_dim"}},
		{"odd rotary dims", "qwen3-next-80b-a3b.json", map[string]any{"partial_rotary_factor": 0.3008}, false, []string{"rotary dims"}},
		{"rotary factor > 1", "qwen3-4b.json", map[string]any{"partial_rotary_factor": 1.5}, false, []string{"partial_rotary_factor"}},
		{"mrope section sum", "qwen3.5-4b.json", map[string]any{"text_config.rope_parameters": map[string]any{"rope_theta": 1e7, "partial_rotary_factor": 0.25, "mrope_section": []int{16, 16, 16}}}, false, []string{"mrope_section"}},
		{"rope_theta disagree", "qwen3.5-4b.json", map[string]any{"text_config.rope_theta": 1e6}, false, []string{"rope_theta"}},
		{"experts per tok", "qwen3-next-80b-a3b.json", map[string]any{"num_experts_per_tok": 600}, false, []string{"num_experts_per_tok 600"}},
		{"mlp_only out of range", "qwen3-next-80b-a3b.json", map[string]any{"mlp_only_layers": []int{48}}, false, []string{"mlp_only_layers entry 48"}},
		{"moe mlp_only", "qwen3.5-35b-a3b.json", map[string]any{"text_config.mlp_only_layers": []int{0}}, true, []string{"mlp_only_layers"}},
		{"moe sparse step", "qwen3.5-35b-a3b.json", map[string]any{"text_config.decoder_sparse_step": 2}, true, []string{"decoder_sparse_step"}},
		{"dense qwen3_5 with experts", "qwen3.5-4b.json", map[string]any{"text_config.num_experts": 8}, false, []string{"num_experts 8"}},
		{"qwen3 with experts", "qwen3-4b.json", map[string]any{"num_experts": 8}, true, []string{"num_experts 8"}},
		{"eos out of vocab", "qwen3-4b.json", map[string]any{"eos_token_id": 200000}, false, []string{"eos_token_id 200000"}},
		{"eos bad type", "qwen3-4b.json", map[string]any{"eos_token_id": "x"}, false, []string{"eos_token_id"}},
		{"string where int", "qwen3-4b.json", map[string]any{"hidden_size": "2560"}, false, []string{"hidden_size"}},
		{"fractional int", "qwen3-4b.json", map[string]any{"num_hidden_layers": 3.5}, false, []string{"num_hidden_layers"}},
		{"negative vocab", "qwen3-4b.json", map[string]any{"vocab_size": -1}, false, []string{"vocab_size"}},
		{"missing intermediate for dense", "qwen3.5-4b.json", map[string]any{"text_config.intermediate_size": nil}, false, []string{"intermediate_size"}},
		{"absurd layer count", "qwen3-4b.json", map[string]any{"num_hidden_layers": 2147483647}, false, []string{"sanity limit"}},
		{"text_config not object", "qwen3.5-4b.json", map[string]any{"text_config": 3}, false, []string{"text_config"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(patch(t, tc.file, tc.edits))
			require.Error(t, err)
			if tc.unsupported {
				assert.ErrorIs(t, err, ErrUnsupported)
				assert.ErrorIs(t, err, errors.ErrUnsupported)
			} else {
				assert.ErrorIs(t, err, ErrInvalidConfig)
			}
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func kindsStrings(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "linear_attention"
		if (i+2)%4 == 0 { // shifted by the one element prepended in the test
			out[i] = "full_attention"
		}
	}
	return out
}

func TestParseConfigReportsAllProblems(t *testing.T) {
	_, err := ParseConfig(patch(t, "qwen3-4b.json", map[string]any{
		"hidden_act": "relu", "num_key_value_heads": 5, "vocab_size": 0, "rope_scaling": map[string]any{"rope_type": "yarn"},
	}))
	require.Error(t, err)
	for _, w := range []string{"relu", "num_key_value_heads 5", "vocab_size", "rope_scaling.factor"} {
		assert.Contains(t, err.Error(), w)
	}
}

func TestParseConfigBadJSON(t *testing.T) {
	for _, in := range []string{"", "[]", "{", `"x"`, "null", `{"model_type":"qwen3"} trailing`} {
		_, err := ParseConfig([]byte(in))
		require.Error(t, err, "%q", in)
		assert.ErrorIs(t, err, ErrInvalidConfig, "%q", in)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), readTestdata(t, "qwen3-4b.json"), 0o644))
	c, err := LoadConfig(dir)
	require.NoError(t, err)
	assert.Equal(t, 2560, c.HiddenSize)

	_, err = LoadConfig(t.TempDir())
	require.ErrorIs(t, err, os.ErrNotExist)

	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, ConfigFile), []byte(`{"model_type":"llama"}`), 0o644))
	_, err = LoadConfig(bad)
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), filepath.Join(bad, ConfigFile))
}

func TestNormaliseName(t *testing.T) {
	tests := []struct {
		in, want string
		keep     bool
	}{
		{"model.embed_tokens.weight", "embed_tokens.weight", true},
		{"model.layers.0.self_attn.q_proj.weight", "layers.0.self_attn.q_proj.weight", true},
		{"lm_head.weight", "lm_head.weight", true},
		{"model.norm.weight", "norm.weight", true},
		{"model.language_model.layers.3.linear_attn.A_log", "layers.3.linear_attn.A_log", true},
		{"model.language_model.embed_tokens.weight", "embed_tokens.weight", true},
		{"language_model.model.layers.1.mlp.switch_mlp.gate_proj.scales", "layers.1.mlp.switch_mlp.gate_proj.scales", true},
		{"language_model.lm_head.weight", "lm_head.weight", true},
		{"fc.weight", "fc.weight", true},
		{"hidden_norm.weight", "hidden_norm.weight", true},
		{"layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight", true},
		{"model.visual.blocks.0.attn.qkv.weight", "model.visual.blocks.0.attn.qkv.weight", false},
		{"visual.merger.mlp.0.weight", "visual.merger.mlp.0.weight", false},
		{"vision_tower.blocks.0.norm1.weight", "vision_tower.blocks.0.norm1.weight", false},
		{"mtp.layers.0.mlp.gate_proj.weight", "mtp.layers.0.mlp.gate_proj.weight", false},
		{"model.mtp.fc.weight", "model.mtp.fc.weight", false},
		{"language_model.model.mtp.fc.weight", "mtp.fc.weight", false},
		{"model.", "model.", true},
	}
	for _, tc := range tests {
		got, keep := NormaliseName(tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.Equal(t, tc.keep, keep, tc.in)
	}
}

// TestParseConfigRopeScaling: YaRN and linear scaling are read from either place and reach the resolved Arch
// with the config's max_position_embeddings (which YaRN needs even when the context is capped lower).
func TestParseConfigRopeScaling(t *testing.T) {
	c, err := ParseConfig(patch(t, "qwen3-4b.json", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn",
		"factor": 4.0, "original_max_position_embeddings": 32768}}))
	require.NoError(t, err)
	want := RopeScaling{Type: RopeYaRN, Factor: 4, OriginalMaxPositions: 32768, Truncate: true}
	assert.Equal(t, want, c.RopeScaling)
	a, err := ResolveArch(c, 1024)
	require.NoError(t, err)
	assert.Equal(t, want, a.Rope)
	assert.Equal(t, 40960, a.RopeMaxPositions)
	assert.Equal(t, 1024, a.ContextLength)

	c, err = ParseConfig(patch(t, "qwen3.5-4b.json", map[string]any{"text_config.rope_parameters": map[string]any{
		"rope_type": "linear", "factor": 2.0, "rope_theta": 1e7, "partial_rotary_factor": 0.25}}))
	require.NoError(t, err)
	assert.Equal(t, RopeScaling{Type: RopeLinear, Factor: 2, Truncate: true}, c.RopeScaling)
}
