package hfmodel

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The expected values come from a literal Python transcription of transformers' _compute_yarn_parameters
// (as of huggingface/transformers#40320: an explicit factor wins over the context-length ratio; float64 instead of
// torch float32), run once by hand.
func TestRopeScalingFrequencies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       RopeScaling
		dims    int
		base    float64
		maxPos  int
		want    []float64
		wantAtt float64
	}{
		{"plain", RopeScaling{}, 8, 10000, 4096, []float64{1, 0.1, 0.01, 0.001}, 1},
		{"linear", RopeScaling{Type: RopeLinear, Factor: 2}, 8, 10000, 4096, []float64{0.5, 0.05, 0.005, 0.0005}, 1},
		{"yarn", RopeScaling{Type: RopeYaRN, Factor: 4, Truncate: true}, 16, 10000, 4096,
			[]float64{1.0, 0.31622776601683794, 0.1, 0.02569350598886808, 0.00625, 0.0013834964763236657, 0.00025,
				7.905694150420948e-05}, 1.138629436111989},
		{"yarn original context sets the ramp, explicit factor kept", RopeScaling{Type: RopeYaRN, Factor: 2,
			OriginalMaxPositions: 32768, Truncate: true}, 16, 1000000, 131072,
			[]float64{1.0, 0.17782794100389226, 0.03162277660168379, 0.004686177709919576, 0.0006666666666666668,
				8.891397050194613e-05, 1.5811388300841898e-05, 2.8117066259517456e-06}, 1.0693147180559945},
		{"yarn without factor: context-length ratio", RopeScaling{Type: RopeYaRN, OriginalMaxPositions: 32768,
			Truncate: true}, 16, 1000000, 131072,
			[]float64{1.0, 0.17782794100389226, 0.03162277660168379, 0.004217559938927618, 0.0005,
				4.445698525097307e-05, 7.905694150420949e-06, 1.4058533129758728e-06}, 1.138629436111989},
		{"yarn betas, no truncation", RopeScaling{Type: RopeYaRN, Factor: 8, BetaFast: 16, BetaSlow: 2}, 16, 10000, 4096,
			[]float64{1.0, 0.31622776601683794, 0.1, 0.03162277660168379, 0.006221889068862788,
				0.00043557547602531194, 0.000125, 3.952847075210474e-05}, 1.2079441541679836},
		{"yarn mscale", RopeScaling{Type: RopeYaRN, Factor: 4, Mscale: 1, MscaleAllDim: 0.707, Truncate: true}, 16,
			10000, 4096, []float64{1.0, 0.31622776601683794, 0.1, 0.02569350598886808, 0.00625,
				0.0013834964763236657, 0.00025, 7.905694150420948e-05}, 1.036992729910394},
		{"yarn explicit attention factor", RopeScaling{Type: RopeYaRN, Factor: 4, AttentionFactor: 0.9, Truncate: true},
			16, 10000, 4096, []float64{1.0, 0.31622776601683794, 0.1, 0.02569350598886808, 0.00625,
				0.0013834964763236657, 0.00025, 7.905694150420948e-05}, 0.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, att := tc.s.Frequencies(tc.dims, tc.base, tc.maxPos)
			require.Len(t, got, len(tc.want))
			for i := range got {
				assert.InEpsilon(t, tc.want[i], got[i], 1e-12, "θ_%d", i)
			}
			assert.InEpsilon(t, tc.wantAtt, att, 1e-12)
		})
	}
}

func TestReadRopeScaling(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  string // rope_parameters
		scaling string // rope_scaling
		want    RopeScaling
		err     error
	}{
		{"absent", `{}`, `null`, RopeScaling{}, nil},
		{"default type", `{"rope_type": "default", "rope_theta": 10000}`, `null`, RopeScaling{}, nil},
		{"yarn in rope_scaling, legacy type key", `{}`, `{"type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}`,
			RopeScaling{Type: RopeYaRN, Factor: 4, OriginalMaxPositions: 32768, Truncate: true}, nil},
		{"yarn in rope_parameters", `{"rope_type": "yarn", "factor": 2, "beta_fast": 16, "truncate": false}`, `null`,
			RopeScaling{Type: RopeYaRN, Factor: 2, BetaFast: 16}, nil},
		{"same scaling in both", `{"rope_type": "linear", "factor": 2}`, `{"rope_type": "linear", "factor": 2}`,
			RopeScaling{Type: RopeLinear, Factor: 2, Truncate: true}, nil},
		{"different scalings", `{"rope_type": "linear", "factor": 2}`, `{"rope_type": "yarn", "factor": 2}`, RopeScaling{}, ErrInvalidConfig},
		{"dynamic refused", `{}`, `{"rope_type": "dynamic", "factor": 2}`, RopeScaling{}, ErrUnsupported},
		{"llama3 refused", `{"rope_type": "llama3", "factor": 8}`, `null`, RopeScaling{}, ErrUnsupported},
		{"yarn factor below 1", `{}`, `{"rope_type": "yarn", "factor": 0.5}`, RopeScaling{}, ErrInvalidConfig},
		{"factor missing", `{}`, `{"rope_type": "linear"}`, RopeScaling{}, ErrInvalidConfig},
		{"yarn factor missing without original length", `{}`, `{"rope_type": "yarn"}`, RopeScaling{}, ErrInvalidConfig},
		{"yarn factor from the context lengths", `{}`, `{"rope_type": "yarn", "original_max_position_embeddings": 4096}`,
			RopeScaling{Type: RopeYaRN, OriginalMaxPositions: 4096, Truncate: true}, nil},
		{"yarn factor from context lengths that shrink", `{}`, `{"rope_type": "yarn", "original_max_position_embeddings": 65536}`,
			RopeScaling{}, ErrInvalidConfig},
		{"factor wrong type", `{}`, `{"rope_type": "yarn", "factor": "4"}`, RopeScaling{}, ErrInvalidConfig},
		{"negative beta", `{}`, `{"rope_type": "yarn", "factor": 4, "beta_slow": -1}`, RopeScaling{}, ErrInvalidConfig},
		{"bad original length", `{}`, `{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 0}`, RopeScaling{}, ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, err := parseObject([]byte(`{"max_position_embeddings": 32768, "rope_parameters": ` + tc.params +
				`, "rope_scaling": ` + tc.scaling + `}`))
			require.NoError(t, err)
			r := &reader{scopes: []scope{{"", top}}}
			params, pwhere := r.obj("rope_parameters")
			got := readRopeScaling(r, &reader{scopes: []scope{{pwhere, params}}}, pwhere)
			if tc.err != nil {
				require.NotEmpty(t, r.errs)
				assert.True(t, errors.Is(errors.Join(r.errs...), tc.err), "%v", r.errs)
				return
			}
			require.Empty(t, r.errs)
			assert.Equal(t, tc.want, got)
		})
	}
}
