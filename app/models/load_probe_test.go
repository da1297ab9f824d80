package models

import (
	"math"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// Weights full of NaN are refused at load with a clear error, instead of loading and failing every request.
func TestLoadRefusesNonFiniteWeights(t *testing.T) {
	for name, poison := range map[string]func(t *testing.T, x *safetensors.Tensor){
		"NaN norm": func(t *testing.T, x *safetensors.Tensor) {
			v, err := x.Float32()
			require.NoError(t, err)
			for i := range v {
				v[i] = float32(math.NaN())
			}
			nt, err := safetensors.FromFloat32(x.Name, x.DType, x.Shape, v)
			require.NoError(t, err)
			*x = nt
		},
		"one Inf weight": func(t *testing.T, x *safetensors.Tensor) {
			v, err := x.Float32()
			require.NoError(t, err)
			v[0] = float32(math.Inf(1))
			nt, err := safetensors.FromFloat32(x.Name, x.DType, x.Shape, v)
			require.NoError(t, err)
			*x = nt
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3})
			target := "model.norm.weight"
			if name != "NaN norm" {
				target = "model.layers.0.mlp.down_proj.weight"
			}
			found := false
			testmodel.RewriteWeights(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i := range ts {
					if ts[i].Name == target {
						poison(t, &ts[i])
						found = true
					}
				}
				return ts
			})
			require.True(t, found, "no tensor %s", target)
			_, err := LoadModels(t.Context(), ModelConfig{Model: dir, NoDraft: true}, zerolog.Nop(), nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "the checkpoint is corrupt")
		})
	}
	// The same checkpoint unpoisoned loads.
	m, err := LoadModels(t.Context(), ModelConfig{Model: testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3}), NoDraft: true}, zerolog.Nop(), nil)
	require.NoError(t, err)
	require.NoError(t, m.Close())
}

// The served model id: the bundled layout's NAME/target is served as NAME, any other directory under its
// base name.
func TestServedName(t *testing.T) {
	for dir, want := range map[string]string{
		DefaultTargetDir:       "gocoder",
		DemoTargetDir:          "demo",
		"models/demo/target/":  "demo",
		"/srv/Qwen3-4B":        "Qwen3-4B",
		"target":               "target",
		"/target":              "target",
		"./checkpoints/target": "checkpoints",
	} {
		assert.Equal(t, want, servedName(dir), dir)
	}
}
