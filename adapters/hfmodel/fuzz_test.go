package hfmodel

import (
	"github.com/higgs-go/higgs/ports"

	"os"
	"path/filepath"
	"testing"
)

func addTestdataSeeds(f *testing.F) {
	entries, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, e := range entries {
		if b, err := os.ReadFile(e); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{``, `{}`, `null`, `{"model_type":"qwen3"}`, `{"text_config":{}}`, `{"model_type":"qwen3_5","text_config":null}`,
		`{"model_type":"qwen3","num_hidden_layers":2147483647,"hidden_size":1,"num_attention_heads":1,"vocab_size":1,"max_position_embeddings":1,"intermediate_size":1}`,
		`{"architectures":["DFlashDraftModel"],"dflash_config":{"target_layer_ids":[1e9,-5]},"quantization":{"bits":4,"group_size":64,"x":false}}`} {
		f.Add([]byte(s))
	}
}

// FuzzParseConfig: never panic; whatever is accepted is internally consistent.
func FuzzParseConfig(f *testing.F) {
	addTestdataSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if len(c.LayerTypes) != c.NumHiddenLayers {
			t.Fatalf("accepted %d layer types for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
		}
		if c.NumAttentionHeads%c.NumKeyValueHeads != 0 || c.RotaryDims() <= 0 || c.RotaryDims()%2 != 0 {
			t.Fatalf("accepted inconsistent attention shape %+v", c)
		}
		for i := range c.NumHiddenLayers {
			_ = c.IsMoELayer(i)
			_ = c.SeparateGDNProjections(i)
		}
		if c.Hybrid() && c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
			t.Fatalf("accepted Hv %d not divisible by Hk %d", c.LinearNumValueHeads, c.LinearNumKeyHeads)
		}
		if q := c.Quantization; q != nil {
			if err := q.Default.Validate(); err != nil {
				t.Fatalf("accepted bad default spec: %v", err)
			}
			for k, s := range q.Overrides {
				if s != nil && s.Validate() != nil {
					t.Fatalf("accepted bad override %q", k)
				}
				_, _ = q.For(k)
			}
		}
	})
}

// FuzzParseDrafterConfig: never panic; accepted configs resolve their tap layers without panicking.
func FuzzParseDrafterConfig(f *testing.F) {
	addTestdataSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDrafterConfig(b)
		if err != nil {
			return
		}
		if d.BlockSize < 2 || d.MaskTokenID < 0 || len(d.LayerTypes) != d.NumHiddenLayers {
			t.Fatalf("accepted inconsistent drafter %+v", d)
		}
		if d.Generation == 2 && (d.ConvKernelSize <= 0 || d.ConvGroupSize <= 0 || d.HiddenSize%d.ConvGroupSize != 0 ||
			d.SelectorRank <= 0 || d.SelectorTopK <= 0 || d.SelectorTopK > d.VocabSize) {
			t.Fatalf("accepted inconsistent DFlash2 drafter %+v", d)
		}
		if d.Generation == 1 && (d.ConvKernelSize != 0 || d.SelectorTopK != 0) {
			t.Fatalf("v1 drafter with DFlash2 settings %+v", d)
		}
		for _, n := range []int{1, 5, 36, 64} {
			_, _, _ = d.ResolveTapLayers(n)
		}
		d.AllowDerivedTapLayers = true
		_, _, _ = d.ResolveTapLayers(40)
		_, _ = DrafterArchFrom(d, ports.ModelInfo{HiddenSize: d.HiddenSize, VocabSize: 1000, LayerKinds: make([]ports.LayerKind, 40)})
	})
}

// FuzzGenerationConfig: never panic.
func FuzzGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"eos_token_id":[1,2],"temperature":0.7,"top_k":20}`))
	f.Add([]byte(`{"bos_token_id":[1]}`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = ParseGenerationConfig(b) })
}

// FuzzNormaliseName: never panic; canonical names never keep a known prefix.
func FuzzNormaliseName(f *testing.F) {
	for _, s := range []string{"model.layers.0.x", "language_model.lm_head.weight", "model.visual.a", "model.", "language_model.model."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, keep := NormaliseName(s)
		if keep && c == "" && s != "" {
			t.Fatalf("%q normalised to empty", s)
		}
	})
}
