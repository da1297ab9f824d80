package hfmodel

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// tensorSpec is a tensor to write: its stored name and shape (values are zeros).
type tensorSpec struct {
	name  string
	shape []int
}

func openStore(t *testing.T, specs ...tensorSpec) *safetensors.Store {
	t.Helper()
	var ts []safetensors.Tensor
	for _, s := range specs {
		n := 1
		for _, d := range s.shape {
			n *= d
		}
		x, err := safetensors.FromFloat32(s.name, safetensors.F32, s.shape, make([]float32, n))
		require.NoError(t, err)
		ts = append(ts, x)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	require.NoError(t, safetensors.Write(path, ts, nil))
	st, err := safetensors.OpenFile(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func TestCheckpointNames(t *testing.T) {
	st := openStore(t,
		tensorSpec{"model.language_model.embed_tokens.weight", []int{4, 2}},
		tensorSpec{"model.visual.blocks.0.attn.qkv.weight", []int{2, 2}},
		tensorSpec{"mtp.fc.weight", []int{2, 2}},
		tensorSpec{"lm_head.weight", []int{4, 2}},
	)
	ck, err := NewCheckpoint(st)
	require.NoError(t, err)
	// Dropped tensors are consumed at once; kept ones are not until read.
	assert.Equal(t, []string{"lm_head.weight", "model.language_model.embed_tokens.weight"}, st.Unused())

	assert.True(t, ck.Has("embed_tokens.weight"))
	assert.False(t, ck.Has("visual.blocks.0.attn.qkv.weight"))
	n, err := ck.Stored("embed_tokens.weight")
	require.NoError(t, err)
	assert.Equal(t, "model.language_model.embed_tokens.weight", n)
	tn, err := ck.Tensor("embed_tokens.weight")
	require.NoError(t, err)
	assert.Equal(t, []int{4, 2}, tn.Shape)

	_, err = ck.Tensor("norm.weight")
	require.ErrorIs(t, err, safetensors.ErrMissingTensor)
	assert.Contains(t, err.Error(), `"norm.weight" (canonical name)`)

	require.EqualError(t, ck.Unused(), "unexpected tensors in checkpoint (1): [lm_head.weight]")
	ck.MarkUsed("lm_head.weight", "absent.weight")
	assert.Empty(t, st.Unused())
	assert.NoError(t, ck.Unused())
}

func TestCheckpointUnusedListsTwenty(t *testing.T) {
	var specs []tensorSpec
	for i := range 23 {
		specs = append(specs, tensorSpec{fmt.Sprintf("model.layers.%02d.input_layernorm.weight", i), []int{2}})
	}
	ck, err := NewCheckpoint(openStore(t, specs...))
	require.NoError(t, err)
	err = ck.Unused()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unexpected tensors in checkpoint (23): [model.layers.00.input_layernorm.weight ")
	assert.Contains(t, err.Error(), "model.layers.19.input_layernorm.weight … and 3 more]")
	assert.NotContains(t, err.Error(), "layers.20.")
}

func TestCheckpointDuplicateNames(t *testing.T) {
	st := openStore(t,
		tensorSpec{"model.norm.weight", []int{2}},
		tensorSpec{"model.language_model.norm.weight", []int{2}},
	)
	_, err := NewCheckpoint(st)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `both normalise to "norm.weight"`)
}

func TestCheckpointQuantSpec(t *testing.T) {
	st := openStore(t,
		tensorSpec{"model.layers.0.mlp.gate_proj.weight", []int{8, 1}},
		tensorSpec{"model.layers.0.mlp.gate_proj.scales", []int{8, 1}},
		tensorSpec{"model.layers.0.mlp.gate_proj.biases", []int{8, 1}},
		tensorSpec{"model.layers.0.mlp.up_proj.weight", []int{8, 8}},
	)
	ck, err := NewCheckpoint(st)
	require.NoError(t, err)
	q4 := quant.Spec{Bits: 4, GroupSize: 64}
	tests := []struct {
		name    string
		q       *Quantization
		module  string
		want    *quant.Spec
		quant   bool
		wantErr string
	}{
		{name: "float module", q: &Quantization{Default: q4}, module: "layers.0.mlp.up_proj"},
		{name: "inferred from shapes", module: "layers.0.mlp.gate_proj", quant: true},
		{name: "config default", q: &Quantization{Default: q4}, module: "layers.0.mlp.gate_proj", want: &q4, quant: true},
		{name: "config says float", module: "layers.0.mlp.gate_proj", quant: true,
			q:       &Quantization{Default: q4, Overrides: map[string]*quant.Spec{"layers.0.mlp.gate_proj": nil}},
			wantErr: "layers.0.mlp.gate_proj: stored quantized but config.json marks it not quantized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, quantized, err := ck.QuantSpec(tt.q, tt.module)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tt.wantErr, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.quant, quantized)
			assert.Equal(t, tt.want, sp)
		})
	}
}

func TestCheckpointZeroCentredNorms(t *testing.T) {
	hybrid := func(t *testing.T) *TextConfig {
		c, err := ParseConfig(readTestdata(t, "qwen3.5-4b.json"))
		require.NoError(t, err)
		return c
	}
	dense, err := ParseConfig(readTestdata(t, "qwen3-4b.json"))
	require.NoError(t, err)
	quantized := hybrid(t)
	quantized.Quantization = &Quantization{Default: quant.Spec{Bits: 4, GroupSize: 64}}
	hfConv := tensorSpec{"model.layers.0.linear_attn.conv1d.weight", []int{6, 1, 4}}
	mlxConv := tensorSpec{"model.layers.0.linear_attn.conv1d.weight", []int{6, 4, 1}}
	tests := []struct {
		name    string
		cfg     *TextConfig
		tensors []tensorSpec
		want    bool
	}{
		{"HF hybrid", hybrid(t), []tensorSpec{hfConv}, true},
		{"dense qwen3", dense, []tensorSpec{hfConv}, false},
		{"quantization block", quantized, []tensorSpec{hfConv}, false},
		{"MLX conv layout", hybrid(t), []tensorSpec{mlxConv}, false},
		{"switch_mlp experts", hybrid(t), []tensorSpec{hfConv, {"model.layers.0.mlp.switch_mlp.gate_proj.weight", []int{2, 2, 2}}}, false},
		{"no conv tensor", hybrid(t), []tensorSpec{{"model.norm.weight", []int{2}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ck, err := NewCheckpoint(openStore(t, tt.tensors...))
			require.NoError(t, err)
			assert.Equal(t, tt.want, ck.ZeroCentredNorms(tt.cfg))
		})
	}
}
