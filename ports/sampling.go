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
