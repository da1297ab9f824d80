package hfmodel

import (
	"fmt"
	"strconv"
)

// DrafterInfo describes a drafter config for people: its generation, the dialect it is written in and the
// optional features it uses (higgs-verify generate --json reports it).
type DrafterInfo struct {
	// Generation is "DFlash" or "DFlash2"; Architecture the architectures entry that said so.
	Generation   string `json:"generation"`
	Architecture string `json:"architecture"`
	// Dialect lists where the config spelled its settings (DrafterConfig.Dialect).
	Dialect []string `json:"dialect"`
	// Features lists the optional settings in use, each with its value.
	Features  []string `json:"features"`
	BlockSize int      `json:"block_size"`
	TapLayers []int    `json:"tap_layers"`
}

// drafterDialect records where a drafter config spelled its settings: r reads the top level, dr
// dflash_config (at dwhere); rope says whether it has a rope_parameters object.
func drafterDialect(r, dr *reader, dwhere string, rope bool) []string {
	var out []string
	for _, k := range []string{"block_size", "target_layer_ids", "mask_token_id", "conv_kernel_size", "conv_group_size",
		"selector_rank", "selector_top_k", "input_embedding_scale", "output_multiplier", "final_logit_softcapping"} {
		switch {
		case dr.has(k):
			out = append(out, qualify(dwhere, k))
		case r.has(k):
			out = append(out, k)
		}
	}
	switch {
	case rope:
		out = append(out, "rope_parameters")
	case r.has("rope_scaling"):
		out = append(out, "rope_theta + rope_scaling")
	case r.has("rope_theta"):
		out = append(out, "rope_theta")
	}
	if r.has("layer_types") {
		out = append(out, "layer_types + sliding_window")
	}
	if r.has("is_causal") {
		out = append(out, "is_causal")
	}
	return out
}

// Info describes d; taps are the resolved tap layers (nil: the config's).
func (d *DrafterConfig) Info(taps []int) DrafterInfo {
	in := DrafterInfo{Generation: "DFlash", Architecture: DrafterArchitecture, Dialect: append([]string{}, d.Dialect...),
		Features: []string{}, BlockSize: d.BlockSize, TapLayers: taps}
	if in.TapLayers == nil {
		in.TapLayers = append([]int{}, d.TargetLayerIDs...)
	}
	f := func(format string, args ...any) { in.Features = append(in.Features, fmt.Sprintf(format, args...)) }
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	if d.Generation == 2 {
		in.Generation, in.Architecture = "DFlash2", Drafter2Architecture
		f("grouped dynamic convolution: conv_kernel_size %d, conv_group_size %d", d.ConvKernelSize, d.ConvGroupSize)
		f("candidate selector: selector_rank %d, selector_top_k %d", d.SelectorRank, d.SelectorTopK)
	}
	if d.SlidingWindow > 0 {
		n := 0
		for _, t := range d.LayerTypes {
			if t == DrafterSlidingAttention {
				n++
			}
		}
		f("sliding_window %d on %d of %d layers", d.SlidingWindow, n, len(d.LayerTypes))
	}
	if d.IsCausal != nil {
		f("is_causal %v", *d.IsCausal)
	}
	if d.EmbedScale != 1 {
		f("input_embedding_scale %s", num(d.EmbedScale))
	}
	if d.OutputMultiplier != 1 {
		f("output_multiplier %s", num(d.OutputMultiplier))
	}
	if d.FinalLogitSoftcap > 0 {
		f("final_logit_softcapping %s", num(d.FinalLogitSoftcap))
	}
	if d.RopeType != "default" {
		f("rope %s (factor %s)", d.RopeType, num(d.RopeScaling.Factor))
	}
	if d.Quantization != nil {
		f("quantized %d-bit, group %d", d.Quantization.Default.Bits, d.Quantization.Default.GroupSize)
	}
	return in
}
