package hfmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
)

func TestCheckQuantizedLinear(t *testing.T) {
	q4 := quant.Spec{Bits: 4, GroupSize: 64}
	q8 := quant.Spec{Bits: 8, GroupSize: 64}
	tests := []struct {
		name                   string
		spec                   *quant.Spec
		weight, scales, biases []int
		dims                   []int
		want                   quant.Spec
		wantErr                string
	}{
		// A [16, 256] matrix at 4 bits packs 256·4/32 = 32 words per row, 4 groups of 64.
		{name: "inferred 4-bit", weight: []int{16, 32}, scales: []int{16, 4}, biases: []int{16, 4}, dims: []int{16, 256}, want: q4},
		{name: "inferred 8-bit", weight: []int{16, 64}, scales: []int{16, 4}, biases: []int{16, 4}, dims: []int{16, 256}, want: q8},
		{name: "config spec", spec: &q4, weight: []int{16, 32}, scales: []int{16, 4}, biases: []int{16, 4}, dims: []int{16, 256}, want: q4},
		{name: "stacked experts", weight: []int{3, 16, 32}, scales: []int{3, 16, 4}, biases: []int{3, 16, 4}, dims: []int{3, 16, 256}, want: q4},
		{name: "config spec disagrees with the shapes", spec: &q8, weight: []int{16, 32}, scales: []int{16, 4}, biases: []int{16, 4},
			dims: []int{16, 256}, wantErr: "needs 64 packed words per row, has 32"},
		{name: "wrong rows", weight: []int{8, 32}, scales: []int{8, 4}, biases: []int{8, 4}, dims: []int{16, 256},
			wantErr: "weight [8 32] (4-bit/g64) is logical [.., 8, 256], want [16 256]"},
		{name: "biases differ", weight: []int{16, 32}, scales: []int{16, 4}, biases: []int{16, 2}, dims: []int{16, 256},
			wantErr: "biases shape [16 2] differs from scales shape [16 4]"},
		{name: "bits not supported", weight: []int{16, 56}, scales: []int{16, 4}, biases: []int{16, 4}, dims: []int{16, 256}, wantErr: "bits"},
		{name: "nothing to infer from", weight: []int{16, 32}, scales: []int{16}, biases: []int{16}, dims: []int{16, 256}, wantErr: "bits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckQuantizedLinear(tt.spec, tt.weight, tt.scales, tt.biases, tt.dims)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
