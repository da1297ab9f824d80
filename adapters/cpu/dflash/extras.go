package dflash

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// readExtras applies the DFlash settings newer drafter configs carry beside the Qwen3 fields, which the shared
// config parser does not know (each is read from dflash_config first, then the top level, as the authors'
// reference does): input_embedding_scale (scales the noise embeddings), is_causal (overrides every layer's
// causality), output_multiplier and final_logit_softcapping (monotonic logit transforms: they cannot change a
// greedy draft, so a positive multiplier and any cap are accepted and ignored). Settings of DFlash-2 drafters
// (conv_kernel_size, selector_rank, …) are refused.
func readExtras(dir string, a *Arch) error {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return fmt.Errorf("read config.json: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	var dc map[string]json.RawMessage
	if r, ok := top["dflash_config"]; ok && string(r) != "null" {
		if err := json.Unmarshal(r, &dc); err != nil {
			return fmt.Errorf("config.json dflash_config: %w", err)
		}
	}
	value := func(key string) (json.RawMessage, bool) {
		if v, ok := dc[key]; ok && string(v) != "null" {
			return v, true
		}
		if v, ok := top[key]; ok && string(v) != "null" {
			return v, true
		}
		return nil, false
	}
	num := func(key string) (float64, bool, error) {
		v, ok := value(key)
		if !ok {
			return 0, false, nil
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, true, fmt.Errorf("config.json %s: %s is not a finite number", key, v)
		}
		return f, true, nil
	}
	var errs []error
	if f, ok, err := num("input_embedding_scale"); err != nil {
		errs = append(errs, err)
	} else if ok {
		a.EmbedScale = f
	}
	if f, ok, err := num("output_multiplier"); err != nil {
		errs = append(errs, err)
	} else if ok && f <= 0 {
		errs = append(errs, fmt.Errorf("config.json output_multiplier %v: only positive multipliers (which leave greedy drafts unchanged) are supported", f))
	}
	if _, _, err := num("final_logit_softcapping"); err != nil {
		errs = append(errs, err)
	}
	if v, ok := value("is_causal"); ok {
		var c bool
		if err := json.Unmarshal(v, &c); err != nil {
			errs = append(errs, fmt.Errorf("config.json is_causal: %s is not a boolean", v))
		} else {
			a.Causal = make([]bool, a.NumLayers)
			for i := range a.Causal {
				a.Causal[i] = c
			}
		}
	}
	for _, k := range []string{"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"} {
		if _, ok := value(k); ok {
			errs = append(errs, fmt.Errorf("config.json %s: DFlash-2 drafters (dynamic convolutions, candidate selector) are not supported", k))
		}
	}
	return errors.Join(errs...)
}
