package hfmodel

import (
	"github.com/higgs-go/higgs/ports"

	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDrafterLayouts(t *testing.T) {
	t.Run("old layout", func(t *testing.T) {
		d, err := ParseDrafterConfig(readTestdata(t, "dflash-qwen3-4b-b16.json"))
		require.NoError(t, err)
		assert.Equal(t, 16, d.BlockSize, "top-level block_size")
		assert.Equal(t, 1e6, d.RopeTheta)
		assert.Equal(t, []int{1, 9, 17, 25, 33}, d.TargetLayerIDs)
		assert.Equal(t, int32(151669), d.MaskTokenID)
		assert.Equal(t, 36, d.NumTargetLayers)
		assert.Equal(t, 5, d.NumHiddenLayers)
		assert.Equal(t, 128, d.HeadDim)
		assert.Equal(t, "default", d.RopeType)
		assert.Equal(t, 0, d.SlidingWindow)
		assert.Len(t, d.LayerTypes, 5)
		assert.Nil(t, d.Quantization)
		checkGolden(t, "dflash-qwen3-4b-b16.json", d)

		target, err := ParseConfig(readTestdata(t, "qwen3-4b.json"))
		require.NoError(t, err)
		_, err = DrafterArchFrom(d, infoOf(target))
		require.NoError(t, err)
		ids, derived, err := d.ResolveTapLayers(target.NumHiddenLayers)
		require.NoError(t, err)
		assert.False(t, derived)
		assert.Equal(t, []int{1, 9, 17, 25, 33}, ids)
	})
	t.Run("new layout", func(t *testing.T) {
		d, err := ParseDrafterConfig(readTestdata(t, "dflash-qwen3.6-35b-a3b.json"))
		require.NoError(t, err)
		assert.Equal(t, 16, d.BlockSize, "dflash_config.block_size")
		assert.Equal(t, 1e7, d.RopeTheta, "rope_parameters.rope_theta")
		assert.Equal(t, []int{1, 6, 11, 16, 22, 27, 32, 37}, d.TargetLayerIDs)
		assert.Equal(t, int32(248070), d.MaskTokenID)
		assert.Equal(t, 41, d.NumTargetLayers)
		assert.Equal(t, 4096, d.SlidingWindow)
		assert.Equal(t, DrafterSlidingAttention, d.LayerTypes[0])
		assert.Equal(t, DrafterFullAttention, d.LayerTypes[3])
		checkGolden(t, "dflash-qwen3.6-35b-a3b.json", d)

		// Qwen3.5-35B-A3B-shaped target: 40 layers, hidden 2048; num_target_layers 41 is tolerated.
		target, err := ParseConfig(readTestdata(t, "qwen3.5-35b-a3b.json"))
		require.NoError(t, err)
		_, err = DrafterArchFrom(d, infoOf(target))
		require.NoError(t, err)

		// The wrong target: every mismatch is reported at once.
		small, err := ParseConfig(readTestdata(t, "qwen3-4b.json"))
		require.NoError(t, err)
		_, err = DrafterArchFrom(d, infoOf(small))
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), "hidden_size 2048 differs from the target's 2560")
		assert.Contains(t, err.Error(), "tap layer 37 is outside the target's 36 layers")
		assert.Contains(t, err.Error(), "mask_token_id 248070 is outside the target's vocabulary of 151936")
	})
}

func TestParseDrafterVariants(t *testing.T) {
	tests := []struct {
		name  string
		edits map[string]any
		check func(t *testing.T, d *DrafterConfig)
	}{
		{"top-level ids and mask", map[string]any{"dflash_config": nil, "target_layer_ids": []int{2, 4}, "mask_token_id": 7},
			func(t *testing.T, d *DrafterConfig) {
				assert.Equal(t, []int{2, 4}, d.TargetLayerIDs)
				assert.Equal(t, int32(7), d.MaskTokenID)
			}},
		{"both places agree", map[string]any{"dflash_config.block_size": 16, "mask_token_id": 151669}, nil},
		{"no ids", map[string]any{"dflash_config.target_layer_ids": nil},
			func(t *testing.T, d *DrafterConfig) {
				assert.Empty(t, d.TargetLayerIDs)
				_, _, err := d.ResolveTapLayers(36)
				require.ErrorIs(t, err, ErrNoTapLayers)
				d.AllowDerivedTapLayers = true
				ids, derived, err := d.ResolveTapLayers(36)
				require.NoError(t, err)
				assert.True(t, derived)
				assert.Equal(t, []int{1, 9, 17, 25, 33}, ids)
			}},
		{"no layer_types", map[string]any{"layer_types": nil},
			func(t *testing.T, d *DrafterConfig) {
				assert.Equal(t, []string{"full_attention", "full_attention", "full_attention", "full_attention", "full_attention"}, d.LayerTypes)
			}},
		{"rope_scaling default", map[string]any{"rope_scaling": map[string]any{"rope_type": "default"}}, nil},
		{"yarn", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}},
			func(t *testing.T, d *DrafterConfig) {
				assert.Equal(t, RopeYaRN, d.RopeType)
				assert.Equal(t, RopeScaling{Type: RopeYaRN, Factor: 4, OriginalMaxPositions: 32768, Truncate: true}, d.RopeScaling)
			}},
		{"quantized drafter", map[string]any{"quantization": map[string]any{"group_size": 64, "bits": 4}},
			func(t *testing.T, d *DrafterConfig) {
				require.NotNil(t, d.Quantization)
				assert.Equal(t, 4, d.Quantization.Default.Bits)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDrafterConfig(patch(t, "dflash-qwen3-4b-b16.json", tc.edits))
			require.NoError(t, err)
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

func TestParseDrafterRejects(t *testing.T) {
	tests := []struct {
		name        string
		file        string
		edits       map[string]any
		unsupported bool
		want        []string
	}{
		{"not a drafter", "qwen3-4b.json", nil, false, []string{"DFlashDraftModel"}},
		{"no architectures", "dflash-qwen3-4b-b16.json", map[string]any{"architectures": nil}, false, []string{"DFlashDraftModel"}},
		{"dynamic rope", "dflash-qwen3-4b-b16.json", map[string]any{"rope_scaling": map[string]any{"rope_type": "dynamic", "factor": 4}}, true, []string{"dynamic"}},
		{"yarn without factor", "dflash-qwen3.6-35b-a3b.json", map[string]any{"rope_parameters": map[string]any{"rope_type": "yarn", "rope_theta": 1e7}}, false, []string{"factor"}},
		{"block size disagree", "dflash-qwen3-4b-b16.json", map[string]any{"dflash_config.block_size": 8}, false, []string{"block_size"}},
		{"block size missing", "dflash-qwen3-4b-b16.json", map[string]any{"block_size": nil}, false, []string{"block_size"}},
		{"block size 1", "dflash-qwen3-4b-b16.json", map[string]any{"block_size": 1}, false, []string{"block_size 1"}},
		{"ids disagree", "dflash-qwen3-4b-b16.json", map[string]any{"target_layer_ids": []int{1, 2}}, false, []string{"target_layer_ids"}},
		{"duplicate ids", "dflash-qwen3-4b-b16.json", map[string]any{"dflash_config.target_layer_ids": []int{1, 1}}, false, []string{"twice"}},
		{"negative id", "dflash-qwen3-4b-b16.json", map[string]any{"dflash_config.target_layer_ids": []int{-1}}, false, []string{"negative"}},
		{"mask missing", "dflash-qwen3-4b-b16.json", map[string]any{"dflash_config.mask_token_id": nil}, false, []string{"mask_token_id"}},
		{"mask disagree", "dflash-qwen3-4b-b16.json", map[string]any{"mask_token_id": 5}, false, []string{"mask_token_id"}},
		{"sliding without window", "dflash-qwen3.6-35b-a3b.json", map[string]any{"sliding_window": nil}, false, []string{"sliding_window"}},
		{"unknown layer type", "dflash-qwen3-4b-b16.json", map[string]any{"layer_types": []string{"full_attention", "chunked_attention", "full_attention", "full_attention", "full_attention"}}, true, []string{"chunked_attention"}},
		{"layer types length", "dflash-qwen3-4b-b16.json", map[string]any{"layer_types": []string{"full_attention"}}, false, []string{"1 entries for 5 layers"}},
		{"use_sliding_window without layer_types", "dflash-qwen3-4b-b16.json", map[string]any{"layer_types": nil, "use_sliding_window": true}, true, []string{"use_sliding_window"}},
		{"model_type", "dflash-qwen3-4b-b16.json", map[string]any{"model_type": "llama"}, true, []string{"llama"}},
		{"attention bias", "dflash-qwen3-4b-b16.json", map[string]any{"attention_bias": true}, true, []string{"attention_bias"}},
		{"partial rotary", "dflash-qwen3.6-35b-a3b.json", map[string]any{"rope_parameters": map[string]any{"rope_theta": 1e7, "partial_rotary_factor": 0.5}}, true, []string{"partial_rotary_factor"}},
		{"heads", "dflash-qwen3-4b-b16.json", map[string]any{"num_key_value_heads": 3}, false, []string{"num_key_value_heads 3"}},
		{"rope theta disagree", "dflash-qwen3.6-35b-a3b.json", map[string]any{"rope_theta": 1e6}, false, []string{"rope_theta"}},
		{"dflash_config not object", "dflash-qwen3-4b-b16.json", map[string]any{"dflash_config": []int{1}}, false, []string{"dflash_config"}},
		{"absurd layer count", "dflash-qwen3-4b-b16.json", map[string]any{"num_hidden_layers": 1 << 30}, false, []string{"sanity limit"}},
		{"many at once", "dflash-qwen3-4b-b16.json", map[string]any{"hidden_size": 0, "vocab_size": nil, "block_size": nil}, false, []string{"hidden_size", "vocab_size", "block_size"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDrafterConfig(patch(t, tc.file, tc.edits))
			require.Error(t, err)
			if tc.unsupported {
				assert.ErrorIs(t, err, ErrUnsupported)
			} else {
				assert.ErrorIs(t, err, ErrInvalidConfig)
			}
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestResolveTapLayers(t *testing.T) {
	d := &DrafterConfig{NumHiddenLayers: 5, TargetLayerIDs: []int{1, 9, 17, 25, 33}, NumTargetLayers: 99}
	ids, derived, err := d.ResolveTapLayers(34)
	require.NoError(t, err, "num_target_layers disagreeing is tolerated")
	assert.False(t, derived)
	assert.Equal(t, []int{1, 9, 17, 25, 33}, ids)
	ids[0] = 100
	assert.Equal(t, 1, d.TargetLayerIDs[0], "returned slice is a copy")

	_, _, err = d.ResolveTapLayers(33)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "tap layer 33")
	_, _, err = d.ResolveTapLayers(0)
	require.Error(t, err)

	dup := &DrafterConfig{TargetLayerIDs: []int{3, 3}}
	_, _, err = dup.ResolveTapLayers(10)
	require.ErrorIs(t, err, ErrInvalidConfig)

	none := &DrafterConfig{NumHiddenLayers: 8, NumTargetLayers: 40, AllowDerivedTapLayers: true}
	ids, derived, err = none.ResolveTapLayers(40)
	require.NoError(t, err)
	assert.True(t, derived)
	assert.Equal(t, []int{1, 6, 11, 16, 22, 27, 32, 37}, ids, "matches the published 8-tap list")

	// Derivation uses num_target_layers but the ids must still fit the real target.
	mismatch := &DrafterConfig{NumHiddenLayers: 5, NumTargetLayers: 48, AllowDerivedTapLayers: true}
	_, _, err = mismatch.ResolveTapLayers(36)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestDeriveTapLayers(t *testing.T) {
	tests := []struct {
		n, N int
		want []int
	}{
		{5, 36, []int{1, 9, 17, 25, 33}},  // Qwen3-4B-DFlash-b16
		{5, 40, []int{1, 10, 19, 28, 37}}, // Qwen3.6-35B-A3B old drafter
		{1, 36, []int{18}},
		{2, 36, []int{1, 33}},
		// 1 + i·(28−4)/(7−1) = 1,5,9,...: integral; 1 + i·(30−4)/4 = 1, 7.5→8, 14, 20.5→20, 27: half-to-even.
		{5, 30, []int{1, 8, 14, 20, 27}},
	}
	for _, tc := range tests {
		got, err := DeriveTapLayers(tc.n, tc.N)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "n=%d N=%d", tc.n, tc.N)
	}
	for _, bad := range [][2]int{{0, 36}, {5, 0}, {3, 4}, {1 << 30, 36}} {
		_, err := DeriveTapLayers(bad[0], bad[1])
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
}

func TestLoadDrafterConfig(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), readTestdata(t, "dflash-qwen3-4b-b16.json"), 0o644))
	d, err := LoadDrafterConfig(dir)
	require.NoError(t, err)
	assert.Equal(t, 16, d.BlockSize)
	_, err = LoadDrafterConfig(t.TempDir())
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = ParseDrafterConfig([]byte("{"))
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestGenerationConfig(t *testing.T) {
	g, err := LoadGenerationConfig(t.TempDir())
	require.NoError(t, err, "missing file is not an error")
	assert.Equal(t, &GenerationConfig{}, g)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, GenerationConfigFile), []byte(`{
  "bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
  "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}`), 0o644))
	g, err = LoadGenerationConfig(dir)
	require.NoError(t, err)
	assert.Equal(t, []int32{151645, 151643}, g.EOSTokenIDs)
	require.NotNil(t, g.BOSTokenID)
	assert.Equal(t, int32(151643), *g.BOSTokenID)
	require.NotNil(t, g.DoSample)
	assert.True(t, *g.DoSample)
	require.NotNil(t, g.Temperature)
	assert.Equal(t, 0.6, *g.Temperature)
	require.NotNil(t, g.TopK)
	assert.Equal(t, 20, *g.TopK)
	assert.Nil(t, g.MinP)
	assert.Nil(t, g.RepetitionPenalty)

	g, err = ParseGenerationConfig([]byte(`{"eos_token_id": 2}`))
	require.NoError(t, err)
	assert.Equal(t, []int32{2}, g.EOSTokenIDs)

	for _, bad := range []string{`{"eos_token_id": "x"}`, `{"temperature": "hot"}`, `{"bos_token_id": [1, 2]}`, `[]`, `{"eos_token_id": -3}`} {
		_, err := ParseGenerationConfig([]byte(bad))
		require.ErrorIs(t, err, ErrInvalidConfig, bad)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, GenerationConfigFile), []byte(`{`), 0o644))
	_, err = LoadGenerationConfig(dir)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), GenerationConfigFile)
}

// infoOf is the target description a backend would report for config t.
func infoOf(t *TextConfig) ports.ModelInfo {
	return ports.ModelInfo{HiddenSize: t.HiddenSize, VocabSize: t.VocabSize, LayerKinds: t.LayerTypes}
}

// dflash2-qwen3.8-27b.json is written for this test (the authors' tests/fixtures/dflash2-config.json was not
// in the stored snapshot of z-lab/dflash): the published Qwen3.8-27B-DFlash2 drafter's settings, DFlash2 keys
// inside dflash_config, every layer sliding with is_causal false.
func TestParseDrafter2(t *testing.T) {
	d, err := ParseDrafterConfig(readTestdata(t, "dflash2-qwen3.8-27b.json"))
	require.NoError(t, err)
	assert.Equal(t, 2, d.Generation)
	assert.Equal(t, 2, d.ConvKernelSize)
	assert.Equal(t, 16, d.ConvGroupSize)
	assert.Equal(t, 256, d.SelectorRank)
	assert.Equal(t, 16, d.SelectorTopK)
	assert.Equal(t, 8, d.BlockSize)
	assert.Equal(t, 1.0, d.OutputMultiplier)
	assert.Equal(t, 0.0, d.FinalLogitSoftcap)
	require.NotNil(t, d.IsCausal)
	assert.False(t, *d.IsCausal)
	checkGolden(t, "dflash2-qwen3.8-27b.json", d)

	kinds := make([]ports.LayerKind, 64)
	a, err := DrafterArchFrom(d, ports.ModelInfo{HiddenSize: 5120, VocabSize: 248320, LayerKinds: kinds})
	require.NoError(t, err)
	assert.True(t, a.V2())
	assert.Equal(t, []int{2048, 2048, 2048, 2048, 2048}, a.SlidingWindows)
	assert.Equal(t, []bool{false, false, false, false, false}, a.Causal, "is_causal false wins over sliding layers")
	assert.Equal(t, [4]int{2, 16, 256, 16}, [4]int{a.ConvKernel, a.ConvGroup, a.SelectorRank, a.SelectorTopK})

	t.Run("top-level keys and logit transforms", func(t *testing.T) {
		d, err := ParseDrafterConfig(patch(t, "dflash2-qwen3.8-27b.json", map[string]any{
			"dflash_config.selector_top_k": nil, "selector_top_k": 8,
			"dflash_config.output_multiplier": 0.5, "final_logit_softcapping": 30.0}))
		require.NoError(t, err)
		assert.Equal(t, 8, d.SelectorTopK)
		assert.Equal(t, 0.5, d.OutputMultiplier)
		assert.Equal(t, 30.0, d.FinalLogitSoftcap)
	})
}

func TestParseDrafter2Rejects(t *testing.T) {
	const v2, v1 = "dflash2-qwen3.8-27b.json", "dflash-qwen3-4b-b16.json"
	tests := []struct {
		name        string
		file        string
		edits       map[string]any
		unsupported bool
		want        []string
	}{
		{"missing conv_kernel_size", v2, map[string]any{"dflash_config.conv_kernel_size": nil}, false, []string{"conv_kernel_size is missing"}},
		{"missing every DFlash2 key", v2, map[string]any{"dflash_config.conv_group_size": nil, "dflash_config.selector_rank": nil, "dflash_config.selector_top_k": nil},
			false, []string{"conv_group_size is missing", "selector_rank is missing", "selector_top_k is missing"}},
		{"group does not divide hidden", v2, map[string]any{"dflash_config.conv_group_size": 3}, false, []string{"conv_group_size 3 must divide hidden_size 5120"}},
		{"zero rank", v2, map[string]any{"dflash_config.selector_rank": 0}, false, []string{"selector_rank 0"}},
		{"kernel longer than block", v2, map[string]any{"dflash_config.conv_kernel_size": 9}, false, []string{"conv_kernel_size 9 exceeds block_size 8"}},
		{"top-k over vocab", v2, map[string]any{"dflash_config.selector_top_k": 300000}, false, []string{"selector_top_k 300000"}},
		{"top-k not a number", v2, map[string]any{"dflash_config.selector_top_k": "16"}, false, []string{"selector_top_k"}},
		{"negative softcap", v2, map[string]any{"final_logit_softcapping": -1.0}, false, []string{"final_logit_softcapping"}},
		{"zero multiplier", v1, map[string]any{"output_multiplier": 0.0}, false, []string{"output_multiplier 0"}},
		{"DFlash2 key on a v1 drafter", v1, map[string]any{"dflash_config.selector_rank": 256}, false, []string{"selector_rank is a DFlash2 setting", "DFlash2DraftModel"}},
		{"both architectures", v2, map[string]any{"architectures": []string{"DFlashDraftModel", "DFlash2DraftModel"}}, false, []string{"names both"}},
		{"speculators dialect", v2, map[string]any{"speculators_config": map[string]any{"algorithm": "dflash"}}, true, []string{"speculators_config"}},
		{"reduced draft vocabulary", v1, map[string]any{"dflash_config.draft_vocab_size": 32000}, true, []string{"dflash_config.draft_vocab_size"}},
		{"aux layer ids", v1, map[string]any{"aux_hidden_state_layer_ids": []int{1, 2}}, true, []string{"aux_hidden_state_layer_ids"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDrafterConfig(patch(t, tc.file, tc.edits))
			require.Error(t, err)
			if tc.unsupported {
				assert.ErrorIs(t, err, ErrUnsupported)
			} else {
				assert.ErrorIs(t, err, ErrInvalidConfig)
			}
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestDrafterInfo(t *testing.T) {
	d, err := ParseDrafterConfig(readTestdata(t, "dflash2-qwen3.8-27b.json"))
	require.NoError(t, err)
	in := d.Info(nil)
	assert.Equal(t, "DFlash2", in.Generation)
	assert.Equal(t, Drafter2Architecture, in.Architecture)
	assert.Equal(t, []string{"dflash_config.block_size", "dflash_config.target_layer_ids", "dflash_config.mask_token_id",
		"dflash_config.conv_kernel_size", "dflash_config.conv_group_size", "dflash_config.selector_rank",
		"dflash_config.selector_top_k", "rope_parameters", "layer_types + sliding_window", "is_causal"}, in.Dialect)
	assert.Equal(t, []string{"grouped dynamic convolution: conv_kernel_size 2, conv_group_size 16",
		"candidate selector: selector_rank 256, selector_top_k 16", "sliding_window 2048 on 5 of 5 layers", "is_causal false"}, in.Features)
	assert.Equal(t, []int{5, 19, 33, 47, 61}, in.TapLayers)

	old, err := ParseDrafterConfig(patch(t, "dflash-qwen3-4b-b16.json", map[string]any{"output_multiplier": 0.5, "final_logit_softcapping": 30.0}))
	require.NoError(t, err)
	in = old.Info([]int{1, 2})
	assert.Equal(t, "DFlash", in.Generation)
	assert.Contains(t, in.Dialect, "block_size")
	assert.Contains(t, in.Dialect, "dflash_config.target_layer_ids")
	assert.Equal(t, []string{"output_multiplier 0.5", "final_logit_softcapping 30"}, in.Features)
	assert.Equal(t, []int{1, 2}, in.TapLayers)
}
