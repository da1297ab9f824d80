package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitStages(t *testing.T) {
	tests := []struct {
		name        string
		layer       []int64
		first, last int64
		n           int
		want        []Stage
	}{
		{"one stage", []int64{1, 1, 1}, 0, 0, 1, []Stage{{0, 3, false}}},
		{"even halves", []int64{10, 10, 10, 10}, 0, 0, 2, []Stage{{0, 2, false}, {2, 4, false}}},
		{"a heavy embedding moves layers to the others", []int64{10, 10, 10, 10}, 20, 0, 2, []Stage{{0, 1, false}, {1, 4, false}}},
		{"a heavy head too", []int64{10, 10, 10, 10, 10, 10}, 0, 40, 2, []Stage{{0, 5, false}, {5, 6, false}}},
		{"every stage keeps a layer", []int64{100, 1, 1}, 0, 0, 3, []Stage{{0, 1, false}, {1, 2, false}, {2, 3, false}}},
		{"three ways", []int64{5, 5, 5, 5, 5, 5}, 0, 0, 3, []Stage{{0, 2, false}, {2, 4, false}, {4, 6, false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SplitStages(tc.layer, tc.first, tc.last, tc.n)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := SplitStages([]int64{1, 1}, 0, 0, 3)
	assert.ErrorContains(t, err, "cannot split 2 layers into 3 stages")
	_, err = SplitStages([]int64{1}, 0, 0, 0)
	assert.Error(t, err)
}

func TestTensorStage(t *testing.T) {
	for name, want := range map[string]int{
		"layers.0.mlp.down_proj.weight": 0, "layers.17.self_attn.q_proj.scales": 17,
		"embed_tokens.weight": -1, "norm.weight": -2, "lm_head.weight": -2, "lm_head.biases": -2,
	} {
		assert.Equal(t, want, TensorStage(name), name)
	}
}
