package ports

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSamplingDefaultsApply(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	k := func(x int) *int { return &x }
	api := SamplingParams{Temperature: 1, TopP: 1}
	for _, c := range []struct {
		name string
		d    SamplingDefaults
		p    SamplingParams
		set  SamplingKnobs
		want SamplingParams
	}{
		{"no defaults: the API's", SamplingDefaults{}, api, SamplingKnobs{}, api},
		{"every knob unset takes the model's", SamplingDefaults{Temperature: f(0.6), TopP: f(0.95), TopK: k(20), MinP: f(0.05)},
			api, SamplingKnobs{}, SamplingParams{Temperature: 0.6, TopP: 0.95, TopK: 20, MinP: 0.05}},
		{"a knob the client gave stays", SamplingDefaults{Temperature: f(0.6), TopK: k(20)},
			SamplingParams{Temperature: 1, TopP: 1, TopK: 5}, SamplingKnobs{Temperature: true, TopK: true},
			SamplingParams{Temperature: 1, TopP: 1, TopK: 5}},
		{"a default of 0 is a default (greedy)", SamplingDefaults{Temperature: f(0)}, api, SamplingKnobs{TopP: true},
			SamplingParams{Temperature: 0, TopP: 1}},
	} {
		assert.Equal(t, c.want, c.d.Apply(c.p, c.set), c.name)
	}
}

func TestSamplingDefaultsValidate(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	k := func(x int) *int { return &x }
	assert.NoError(t, SamplingDefaults{}.Validate())
	assert.NoError(t, SamplingDefaults{Temperature: f(0.7), TopP: f(1), TopK: k(0), MinP: f(0)}.Validate())
	err := SamplingDefaults{Temperature: f(-1), TopP: f(0), TopK: k(-2), MinP: f(2)}.Validate()
	assert.ErrorContains(t, err, "top_p 0 must be greater than 0")
	assert.ErrorContains(t, err, "temperature -1 out of range")
	assert.ErrorContains(t, err, "top_k -2 must be ≥ 0")
	assert.ErrorContains(t, err, "min_p 2 out of range")
}
