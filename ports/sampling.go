package ports

import (
	"errors"
	"fmt"
	"math"
)

// SamplingParams are the logit transforms applied before sampling, in the order temperature, top-k, top-p,
// min-p (the order used by Hugging Face and vLLM). Temperature 0 means greedy decoding.
type SamplingParams struct {
	Temperature float64
	// TopK keeps the k most likely tokens; 0 disables it.
	TopK int
	// TopP keeps the smallest set whose probability reaches p; 1 (or 0) disables it.
	TopP float64
	// MinP drops tokens whose probability is below MinP times the largest; 0 disables it.
	MinP float64
}

// Greedy reports whether these parameters mean argmax decoding.
func (s SamplingParams) Greedy() bool { return s.Temperature == 0 }

// Validate reports every out-of-range field at once.
func (s SamplingParams) Validate() error {
	var errs []error
	if math.IsNaN(s.Temperature) || s.Temperature < 0 || s.Temperature > 100 {
		errs = append(errs, fmt.Errorf("temperature %v out of range [0, 100]", s.Temperature))
	}
	if s.TopK < 0 {
		errs = append(errs, fmt.Errorf("top_k %d must be ≥ 0", s.TopK))
	}
	if math.IsNaN(s.TopP) || s.TopP < 0 || s.TopP > 1 {
		errs = append(errs, fmt.Errorf("top_p %v out of range [0, 1]", s.TopP))
	}
	if math.IsNaN(s.MinP) || s.MinP < 0 || s.MinP > 1 {
		errs = append(errs, fmt.Errorf("min_p %v out of range [0, 1]", s.MinP))
	}
	return errors.Join(errs...)
}

// SamplingKnobs names SamplingParams' knobs, one flag each.
type SamplingKnobs struct{ Temperature, TopK, TopP, MinP bool }

// SamplingDefaults are a model's default sampling (an operator's setting): each non-nil knob replaces the wire
// API's default of a request that leaves that knob unset.
type SamplingDefaults struct {
	Temperature, TopP, MinP *float64
	TopK                    *int
}

// Apply returns p with the defaults in place of the knobs set does not name.
func (d SamplingDefaults) Apply(p SamplingParams, set SamplingKnobs) SamplingParams {
	if d.Temperature != nil && !set.Temperature {
		p.Temperature = *d.Temperature
	}
	if d.TopK != nil && !set.TopK {
		p.TopK = *d.TopK
	}
	if d.TopP != nil && !set.TopP {
		p.TopP = *d.TopP
	}
	if d.MinP != nil && !set.MinP {
		p.MinP = *d.MinP
	}
	return p
}

// Validate reports every out-of-range default at once (the ranges of SamplingParams.Validate; top_p > 0).
func (d SamplingDefaults) Validate() error {
	var p SamplingParams
	var errs []error
	if d.Temperature != nil {
		p.Temperature = *d.Temperature
	}
	if d.TopK != nil {
		p.TopK = *d.TopK
	}
	if d.TopP != nil {
		if !(*d.TopP > 0) {
			errs = append(errs, fmt.Errorf("top_p %v must be greater than 0", *d.TopP))
		}
		p.TopP = *d.TopP
	}
	if d.MinP != nil {
		p.MinP = *d.MinP
	}
	if err := p.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
