package hfmodel

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func TestResolveArch(t *testing.T) {
	tests := []struct {
		file                 string
		contextLength        int
		wantContext          int
		wantQOut, wantConv   int
		wantAttn, wantMoE    int // layers of each sort
		wantRotary           int
		wantHeads, wantVHead int
	}{
		{file: "qwen3-4b.json", wantContext: 40960, wantQOut: 32 * 128, wantAttn: 36, wantRotary: 128, wantHeads: 32},
		{file: "qwen3-4b.json", contextLength: 4096, wantContext: 4096, wantQOut: 32 * 128, wantAttn: 36, wantRotary: 128, wantHeads: 32},
		// A cap above max_position_embeddings changes nothing.
		{file: "qwen3-4b.json", contextLength: 1 << 20, wantContext: 40960, wantQOut: 32 * 128, wantAttn: 36, wantRotary: 128, wantHeads: 32},
		{file: "qwen3-next-80b-a3b.json", wantContext: 262144, wantQOut: 2 * 16 * 256, wantConv: 2*16*128 + 32*128,
			wantAttn: 12, wantMoE: 48, wantRotary: 64, wantHeads: 16, wantVHead: 32},
		{file: "qwen3.5-35b-a3b.json", contextLength: 8192, wantContext: 8192, wantQOut: 2 * 16 * 256, wantConv: 2*16*128 + 32*128,
			wantAttn: 10, wantMoE: 40, wantRotary: 64, wantHeads: 16, wantVHead: 32},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c, err := ParseConfig(readTestdata(t, tt.file))
			require.NoError(t, err)
			a, err := ResolveArch(c, tt.contextLength)
			require.NoError(t, err)
			assert.Equal(t, c.HiddenSize, a.Hidden)
			assert.Equal(t, c.VocabSize, a.Vocab)
			assert.Equal(t, c.NumHiddenLayers, a.Layers)
			assert.Equal(t, tt.wantContext, a.ContextLength)
			assert.Equal(t, tt.wantQOut, a.QProjOut())
			assert.Equal(t, tt.wantRotary, a.RotaryDims)
			assert.Equal(t, tt.wantHeads, a.Heads)
			assert.Equal(t, tt.wantVHead, a.ValueHeads)
			if tt.wantConv > 0 {
				assert.Equal(t, tt.wantConv, a.ConvDim())
			}
			attn, moe := 0, 0
			for i, k := range a.Kinds {
				if k == ports.LayerAttention {
					attn++
				}
				if a.MoE[i] {
					moe++
				}
			}
			assert.Equal(t, tt.wantAttn, attn)
			assert.Equal(t, tt.wantMoE, moe)
			// The arch owns its slices: editing it leaves the config alone.
			a.Kinds[0] = ports.LayerKind(99)
			assert.NotEqual(t, ports.LayerKind(99), c.LayerTypes[0])
		})
	}
}

func TestResolveArchLayerTypeCount(t *testing.T) {
	c, err := ParseConfig(readTestdata(t, "qwen3-4b.json"))
	require.NoError(t, err)
	c.LayerTypes = c.LayerTypes[:3]
	_, err = ResolveArch(c, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config has 3 layer types for 36 layers")
}

func TestArchValidate(t *testing.T) {
	valid := func() Arch {
		return Arch{
			Hidden: 8, Vocab: 16, Layers: 2, Eps: 1e-6, ContextLength: 64,
			Kinds: []ports.LayerKind{ports.LayerRecurrent, ports.LayerAttention},
			Heads: 2, KVHeads: 1, HeadDim: 4, RotaryDims: 2, RopeTheta: 10000,
			KeyHeads: 1, ValueHeads: 2, KeyDim: 4, ValueDim: 4, ConvKernel: 4,
			Intermediate: 16, MoE: []bool{false, true}, Experts: 4, TopK: 2, MoEIntermediate: 8,
		}
	}
	a := valid()
	require.NoError(t, a.Validate())
	tests := []struct {
		name string
		edit func(*Arch)
		want string
	}{
		{"zero hidden", func(a *Arch) { a.Hidden = 0 }, "hidden 0, vocab 16, layers 2 must be positive"},
		{"short kinds", func(a *Arch) { a.Kinds = a.Kinds[:1] }, "1 layer kinds and 2 MoE flags for 2 layers"},
		{"short MoE flags", func(a *Arch) { a.MoE = nil }, "2 layer kinds and 0 MoE flags for 2 layers"},
		{"no context", func(a *Arch) { a.ContextLength = 0 }, "context length 0 must be positive"},
		{"unknown kind", func(a *Arch) { a.Kinds[1] = ports.LayerKind(99) }, "layer 1: unknown kind"},
		{"kv heads do not divide", func(a *Arch) { a.Heads = 3; a.KVHeads = 2 }, "attention heads 3 / kv heads 2 / head dim 4 invalid"},
		{"odd rotary dims", func(a *Arch) { a.RotaryDims = 3 }, "rotary dims 3 invalid for head dim 4"},
		{"rotary wider than head", func(a *Arch) { a.RotaryDims = 6 }, "rotary dims 6 invalid for head dim 4"},
		{"value heads not a multiple", func(a *Arch) { a.KeyHeads = 2; a.ValueHeads = 3 }, "value heads must be a multiple of key heads"},
		{"no conv", func(a *Arch) { a.ConvKernel = 0 }, "conv 0 invalid"},
		{"top-k above experts", func(a *Arch) { a.TopK = 5 }, "MoE experts 4 top-k 5 intermediate 8 invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := valid()
			tt.edit(&a)
			err := a.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	t.Run("attention-only ignores GDN dims", func(t *testing.T) {
		a := valid()
		a.Kinds = []ports.LayerKind{ports.LayerAttention, ports.LayerAttention}
		a.KeyHeads, a.ValueHeads, a.ConvKernel = 0, 0, 0
		assert.NoError(t, a.Validate())
	})
	t.Run("recurrent-only ignores rotary dims", func(t *testing.T) {
		a := valid()
		a.Kinds = []ports.LayerKind{ports.LayerRecurrent, ports.LayerRecurrent}
		a.RotaryDims = 0
		assert.NoError(t, a.Validate())
	})
}

func TestLoadTarget(t *testing.T) {
	write := func(t *testing.T, files map[string]string) string {
		t.Helper()
		dir := t.TempDir()
		for name, body := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
		}
		return dir
	}
	cfg := string(readTestdata(t, "qwen3-4b.json"))
	t.Run("configs, arch and stop tokens", func(t *testing.T) {
		dir := write(t, map[string]string{ConfigFile: cfg, GenerationConfigFile: `{"eos_token_id": [151645, 151643]}`})
		c, a, stop, err := LoadTarget(dir, 2048)
		require.NoError(t, err)
		assert.Equal(t, ModelQwen3, c.ModelType)
		assert.Equal(t, 2048, a.ContextLength)
		assert.Equal(t, c.NumHiddenLayers, a.Layers)
		assert.Equal(t, []int32{151645, 151643}, stop)
	})
	t.Run("no generation config", func(t *testing.T) {
		c, _, stop, err := LoadTarget(write(t, map[string]string{ConfigFile: cfg}), 0)
		require.NoError(t, err)
		assert.Equal(t, c.EOSTokenIDs, stop)
	})
	t.Run("no config", func(t *testing.T) {
		_, _, _, err := LoadTarget(write(t, nil), 0)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("bad generation config", func(t *testing.T) {
		_, _, _, err := LoadTarget(write(t, map[string]string{ConfigFile: cfg, GenerationConfigFile: `{`}), 0)
		require.ErrorIs(t, err, ErrInvalidConfig)
	})
}
