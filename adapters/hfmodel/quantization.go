package hfmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/higgs-go/higgs/adapters/quant"
)

// Quantization is an MLX affine quantization setting from config.json ("quantization", mirrored as
// "quantization_config").
type Quantization struct {
	// Default applies to every quantized module without an override.
	Default quant.Spec
	// Mode is always "affine" after parsing (others are refused).
	Mode string
	// Overrides maps module paths, exactly as written in config.json (MLX module-tree names without
	// ".weight", e.g. "language_model.model.layers.0.mlp.gate"), to their spec; a nil value means the config
	// marks the module not quantized (`false`).
	Overrides map[string]*quant.Spec
	// ForceSeparateGDNProjections is never set by parsing: a caller sets it to make
	// TextConfig.SeparateGDNProjections true for every GDN layer (a debugging and testing knob).
	ForceSeparateGDNProjections bool
}

// For returns the spec that applies to a module and whether the config allows it to be quantized.
//
// modulePath may be canonical ("layers.3.mlp.gate", "embed_tokens", "lm_head") or carry any of the
// checkpoint prefixes NormaliseName strips ("model.", "model.language_model.", "language_model.model.",
// "language_model."); a trailing ".weight"/".scales"/".biases" is ignored. Overrides match in either form.
//
// quantized == false means the config marks the module `false` (or q is nil). quantized == true only says
// which spec to use IF the checkpoint quantized the module: as in mlx-lm, a module is actually quantized iff
// its "<path>.scales" tensor exists, and never for 1-D tensors, conv1d, A_log or dt_bias — the loader decides
// that from the weights.
func (q *Quantization) For(modulePath string) (spec quant.Spec, quantized bool) {
	if q == nil {
		return quant.Spec{}, false
	}
	canon := canonicalModule(modulePath)
	if len(q.Overrides) > 0 {
		for _, p := range modulePrefixes {
			if s, ok := q.Overrides[p+canon]; ok {
				if s == nil {
					return quant.Spec{}, false
				}
				return *s, true
			}
		}
	}
	return q.Default, true
}

// modulePrefixes are tried in order when matching an override: canonical first, then the forms checkpoints
// use.
var modulePrefixes = []string{"", "model.", "model.language_model.", "language_model.model.", "language_model."}

// canonicalModule strips parameter suffixes and checkpoint prefixes from a module path.
func canonicalModule(path string) string {
	for _, suf := range []string{".weight", ".scales", ".biases"} {
		if len(path) > len(suf) && path[len(path)-len(suf):] == suf {
			path = path[:len(path)-len(suf)]
			break
		}
	}
	c, _ := stripPrefix(path)
	return c
}

// readQuantization reads "quantization" (preferred, MLX's own key) or "quantization_config" from the top
// level, then text_config. Returns nil when neither exists.
func readQuantization(r *reader, top object) *Quantization {
	var raw json.RawMessage
	where := ""
	for _, key := range []string{"quantization", "quantization_config"} {
		for _, s := range append([]scope{{"", top}}, r.scopes...) {
			if v, ok := s.obj[key]; ok && !isNull(v) {
				raw, where = v, qualify(s.name, key)
				break
			}
		}
		if raw != nil {
			break
		}
	}
	if raw == nil {
		return nil
	}
	q, err := parseQuantization(where, raw)
	if err != nil {
		r.errs = append(r.errs, err)
		return nil
	}
	return q
}

func parseQuantization(where string, raw json.RawMessage) (*Quantization, error) {
	o, err := parseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, where, err)
	}
	var errs []error
	if m, ok := o["quant_method"]; ok {
		return nil, fmt.Errorf("%w: %s.quant_method %s (only MLX affine quantization is supported)", ErrUnsupported, where, short(m))
	}
	q := &Quantization{Mode: "affine", Overrides: map[string]*quant.Spec{}}
	spec, mode, err := parseSpec(where, o, true)
	if err != nil {
		errs = append(errs, err)
	}
	q.Default, q.Mode = spec, mode

	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch k {
		case "group_size", "bits", "mode":
			continue
		}
		v := bytes.TrimSpace(o[k])
		kw := where + "." + k
		switch {
		case string(v) == "false":
			q.Overrides[k] = nil
		case len(v) > 0 && v[0] == '{':
			so, err := parseObject(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, kw, err))
				continue
			}
			s, _, err := parseSpec(kw, so, false)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			q.Overrides[k] = &s
		default:
			errs = append(errs, fmt.Errorf("%w: %s: unknown quantization key (want false or {\"group_size\",\"bits\"} for a module override), got %s", ErrUnsupported, kw, short(v)))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return q, nil
}

// parseSpec reads group_size, bits and mode from a quantization object. Top-level objects may carry module
// overrides as extra keys; override objects must hold nothing else.
func parseSpec(where string, o object, top bool) (quant.Spec, string, error) {
	r := &reader{scopes: []scope{{where, o}}}
	mode := r.str("mode", "affine")
	if !r.has("bits") || !r.has("group_size") {
		r.addErr("%s: needs both bits and group_size", where)
	}
	s := quant.Spec{Bits: r.int("bits", 0), GroupSize: r.int("group_size", 0)}
	if mode != "affine" {
		r.unsupported("%s.mode %q (only affine; mxfp4/nvfp4/mxfp8 are not implemented)", where, mode)
	}
	if len(r.errs) == 0 {
		if err := s.Validate(); err != nil {
			r.errs = append(r.errs, fmt.Errorf("%w: %s: %w", ErrUnsupported, where, err))
		}
	}
	if !top {
		for k := range o {
			if k != "bits" && k != "group_size" && k != "mode" {
				r.addErr("%s: unknown key %q in a module override", where, k)
			}
		}
	}
	return s, mode, errors.Join(r.errs...)
}

// CheckQuantizedLinear resolves and checks the format of a Linear stored MLX affine-quantized (weight, scales
// and biases shapes as stored) whose logical shape is dims ([out, in], or [E, out, in] for stacked experts).
// spec is the config's setting for the module, or nil to infer it from the shapes as mlx-lm does: bits =
// packed width·32/in, group size = in/groups. Both backends' loaders use it, so a checkpoint is accepted or
// refused alike on each. Callers prefix errors with the module name.
func CheckQuantizedLinear(spec *quant.Spec, weight, scales, biases, dims []int) (quant.Spec, error) {
	in := dims[len(dims)-1]
	var s quant.Spec
	if spec != nil {
		s = *spec
	} else if n := len(weight); n > 0 && len(scales) == n && weight[n-1] > 0 && scales[n-1] > 0 {
		s = quant.Spec{Bits: weight[n-1] * 32 / in, GroupSize: in / scales[n-1]}
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	qOut, qIn, err := quant.CheckShapes(weight, scales, biases, s)
	if err != nil {
		return s, err
	}
	if qIn != in || !slices.Equal(weight[:len(weight)-1], dims[:len(dims)-1]) {
		return s, fmt.Errorf("weight %v (%s) is logical [.., %d, %d], want %v", weight, s, qOut, qIn, dims)
	}
	return s, nil
}
