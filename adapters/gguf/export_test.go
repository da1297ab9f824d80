package gguf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
)

const qwen2Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// writeTokenizer writes a small byte-level BPE tokenizer (ids 0–4 and a special token at 5) into dir.
func writeTokenizer(t testing.TB, dir string) {
	t.Helper()
	tok := map[string]any{
		"added_tokens": []map[string]any{{"id": 5, "content": "<|im_end|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Regex}, "behavior": "Isolated"},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4},
			"merges": [][]string{{"a", "b"}, {"Ġ", "ab"}}},
	}
	b, err := json.Marshal(tok)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644))
	cfg := `{"eos_token": "<|im_end|>", "bos_token": null, "add_bos_token": false, "chat_template": "{{ x }}"}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644))
}

func writeSynth(t *testing.T, spec synth.TargetSpec) string {
	t.Helper()
	dir := t.TempDir()
	if spec.Family == "" {
		spec.Family = "qwen3"
	}
	require.NoError(t, synth.WriteTarget(dir, spec))
	writeTokenizer(t, dir)
	return dir
}

func export(t *testing.T, dir string, o ExportOptions) (*File, ExportResult, error) {
	t.Helper()
	var buf bytes.Buffer
	res, err := ExportQwen3(dir, &buf, o)
	if err != nil {
		return nil, res, err
	}
	f, err := Parse(buf.Bytes())
	require.NoError(t, err)
	return f, res, nil
}

// reference returns what higgs computes for a matrix: the float weights, or scale·code + bias dequantized.
func reference(t *testing.T, st *safetensors.Store, base string, spec *quant.Spec) []float32 {
	t.Helper()
	w, err := st.Tensor(base + ".weight")
	require.NoError(t, err)
	if spec == nil {
		v, err := w.Float32()
		require.NoError(t, err)
		return v
	}
	s, err := st.Tensor(base + ".scales")
	require.NoError(t, err)
	b, err := st.Tensor(base + ".biases")
	require.NoError(t, err)
	packed, err := w.Uint32()
	require.NoError(t, err)
	sc, err := s.Float32()
	require.NoError(t, err)
	bi, err := b.Float32()
	require.NoError(t, err)
	cols := w.Shape[1] * 32 / spec.Bits
	v := make([]float32, w.Shape[0]*cols)
	require.NoError(t, quant.Dequantize(v, packed, sc, bi, w.Shape[0], cols, *spec))
	return v
}

var matrices = map[string]string{
	"model.embed_tokens":              "token_embd.weight",
	"lm_head":                         "output.weight",
	"model.layers.0.self_attn.q_proj": "blk.0.attn_q.weight",
	"model.layers.1.self_attn.k_proj": "blk.1.attn_k.weight",
	"model.layers.2.self_attn.o_proj": "blk.2.attn_output.weight",
	"model.layers.3.mlp.down_proj":    "blk.3.ffn_down.weight",
	"model.layers.0.mlp.gate_proj":    "blk.0.ffn_gate.weight",
}

func TestExportExact(t *testing.T) {
	for _, c := range []struct {
		name string
		spec synth.TargetSpec
		typ  Type
	}{
		{"q8g32 as q8_0", synth.TargetSpec{Quant: &quant.Spec{Bits: 8, GroupSize: 32}, Symmetric: true}, Q8_0},
		{"q4g32 as q4_0", synth.TargetSpec{Quant: &quant.Spec{Bits: 4, GroupSize: 32}, Symmetric: true}, Q4_0},
		{"q4g64 as q4_0", synth.TargetSpec{Quant: &quant.Spec{Bits: 4, GroupSize: 64}, Symmetric: true}, Q4_0},
		{"q4g32 as q8_0", synth.TargetSpec{Quant: &quant.Spec{Bits: 4, GroupSize: 32}, Symmetric: true}, Q8_0},
		{"q8g32 as f32", synth.TargetSpec{Quant: &quant.Spec{Bits: 8, GroupSize: 32}}, F32},
		{"bf16 as bf16", synth.TargetSpec{BF16: true}, BF16},
		{"symmetric bf16 as f16", synth.TargetSpec{BF16: true, Symmetric: true}, F16},
		{"symmetric f32 as f16", synth.TargetSpec{Symmetric: true}, F16},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSynth(t, c.spec)
			f, res, err := export(t, dir, ExportOptions{Type: c.typ})
			require.NoError(t, err)
			assert.True(t, res.Exact)
			assert.Equal(t, 3+4*11, res.Tensors) // embedding, final norm, head + 11 per layer
			st, err := safetensors.OpenDir(dir)
			require.NoError(t, err)
			defer st.Close()
			for src, dst := range matrices {
				tt, ok := f.Tensor(dst)
				require.True(t, ok, dst)
				assert.Equal(t, c.typ, tt.Type)
				want := reference(t, st, src, c.spec.Quant)
				got, err := Decode(tt.Type, tt.Data, int(tt.Dims[0]*tt.Dims[1]))
				require.NoError(t, err)
				require.Equal(t, len(want), len(got))
				for i := range want {
					if want[i] != got[i] {
						t.Fatalf("%s[%d]: gguf %g, safetensors %g", src, i, got[i], want[i])
					}
				}
			}
			norm, ok := f.Tensor("blk.0.attn_q_norm.weight")
			require.True(t, ok)
			assert.Equal(t, F32, norm.Type)
			arch, _ := f.Get("general.architecture")
			assert.Equal(t, "qwen3", arch)
			heads, _ := f.Get("qwen3.attention.head_count_kv")
			assert.Equal(t, uint32(2), heads)
		})
	}
}

func TestExportRefusesInexact(t *testing.T) {
	for _, c := range []struct {
		name string
		spec synth.TargetSpec
		typ  Type
	}{
		{"affine q8 as q8_0", synth.TargetSpec{Quant: &quant.Spec{Bits: 8, GroupSize: 32}}, Q8_0},
		{"affine q4 as q4_0", synth.TargetSpec{Quant: &quant.Spec{Bits: 4, GroupSize: 32}}, Q4_0},
		{"symmetric q8 as q4_0", synth.TargetSpec{Quant: &quant.Spec{Bits: 8, GroupSize: 32}, Symmetric: true}, Q4_0},
		{"float as q8_0", synth.TargetSpec{BF16: true, Symmetric: true}, Q8_0},
		{"random f32 as f16", synth.TargetSpec{}, F16},
		{"random f32 as bf16", synth.TargetSpec{}, BF16},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSynth(t, c.spec)
			_, _, err := export(t, dir, ExportOptions{Type: c.typ})
			require.ErrorIs(t, err, ErrInexact)
			assert.Contains(t, err.Error(), "--requantize")
			f, res, err := export(t, dir, ExportOptions{Type: c.typ, Requantize: true})
			require.NoError(t, err)
			assert.False(t, res.Exact)
			assert.Positive(t, res.Rounded)
			tt, ok := f.Tensor("blk.0.ffn_up.weight")
			require.True(t, ok)
			assert.Equal(t, c.typ, tt.Type)
		})
	}
}

func TestExportRejects(t *testing.T) {
	hybrid := t.TempDir()
	require.NoError(t, synth.WriteTarget(hybrid, synth.TargetSpec{Family: "qwen3_next"}))
	writeTokenizer(t, hybrid)
	_, _, err := export(t, hybrid, ExportOptions{Type: F32})
	assert.ErrorContains(t, err, "only dense Qwen3")

	noTok := t.TempDir()
	require.NoError(t, synth.WriteTarget(noTok, synth.TargetSpec{Family: "qwen3"}))
	_, _, err = export(t, noTok, ExportOptions{Type: F32})
	assert.ErrorContains(t, err, "no tokenizer.json")

	badPre := writeSynth(t, synth.TargetSpec{})
	b, err := os.ReadFile(filepath.Join(badPre, "tokenizer.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(badPre, "tokenizer.json"), bytes.ReplaceAll(b, []byte(`(?i:'s`), []byte(`(?x:'s`)), 0o644))
	_, _, err = export(t, badPre, ExportOptions{Type: F32})
	assert.ErrorContains(t, err, "not one llama.cpp knows")

	_, _, err = export(t, writeSynth(t, synth.TargetSpec{}), ExportOptions{Type: Type(99)})
	assert.Error(t, err)
}

func TestExportTokenizer(t *testing.T) {
	f, _, err := export(t, writeSynth(t, synth.TargetSpec{Vocab: 64}), ExportOptions{Type: F32})
	require.NoError(t, err)
	get := func(k string) any {
		v, ok := f.Get(k)
		require.True(t, ok, k)
		return v
	}
	assert.Equal(t, "gpt2", get("tokenizer.ggml.model"))
	assert.Equal(t, "qwen2", get("tokenizer.ggml.pre"))
	toks := get("tokenizer.ggml.tokens").([]string)
	types := get("tokenizer.ggml.token_type").([]int32)
	require.Len(t, toks, 64)
	require.Len(t, types, 64)
	assert.Equal(t, []string{"a", "b", "ab", "Ġ", "Ġab", "<|im_end|>"}, toks[:6])
	assert.Equal(t, []int32{1, 1, 1, 1, 1, 3, 5}, types[:7])
	assert.Equal(t, fmt.Sprintf("[PAD%d]", 63), toks[63])
	assert.Equal(t, []string{"a b", "Ġ ab"}, get("tokenizer.ggml.merges"))
	assert.Equal(t, uint32(5), get("tokenizer.ggml.eos_token_id"))
	assert.Equal(t, false, get("tokenizer.ggml.add_bos_token"))
	assert.Equal(t, "{{ x }}", get("tokenizer.chat_template"))
	_, hasBOS := f.Get("tokenizer.ggml.bos_token_id")
	assert.False(t, hasBOS)
}

// FuzzTokenizerKVs feeds arbitrary tokenizer.json contents to the converter: an error or keys, never a panic,
// and keys only for a vocabulary of exactly the model's rows.
func FuzzTokenizerKVs(f *testing.F) {
	seed := f.TempDir()
	writeTokenizer(f, seed)
	b, err := os.ReadFile(filepath.Join(seed, "tokenizer.json"))
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 70}}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "merges": ["a b", "c"]}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644))
		kvs, err := tokenizerKVs(dir, 64)
		if err != nil {
			return
		}
		for _, kv := range kvs {
			if kv.Key == "tokenizer.ggml.tokens" {
				assert.Len(t, kv.Value, 64)
			}
		}
	})
}
