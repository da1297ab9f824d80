package hfmodel

import "strings"

// namePrefixes are the checkpoint prefixes in front of the canonical names, longest first so that
// "model.language_model." wins over "model." (docs/model-math.md#tensor-names): Qwen3 / Qwen3-Next "model.", Qwen3.5
// HF "model.language_model.", Qwen3.5 mlx-lm "language_model.model." (and "language_model.lm_head").
var namePrefixes = []string{"model.language_model.", "language_model.model.", "language_model.", "model."}

// droppedPrefixes are canonical-name prefixes of tensors a text-only engine never uses: the vision tower
// (HF "model.visual.", mlx "vision_tower.") and the native MTP head ("mtp.").
var droppedPrefixes = []string{"visual.", "vision_tower.", "mtp.", "multi_modal_projector."}

// NormaliseName maps a checkpoint tensor name to its canonical form and says whether a text-only engine keeps
// it. Canonical names have no family prefix: "embed_tokens.weight", "norm.weight", "lm_head.weight",
// "layers.{i}.…", and for drafters "fc.weight", "hidden_norm.weight". Vision-tower, projector and MTP tensors
// return keep == false (a loader should still MarkUsed them so they do not count as unexpected).
//
// Examples: "model.layers.0.mlp.gate.weight" → "layers.0.mlp.gate.weight";
// "model.language_model.embed_tokens.weight" → "embed_tokens.weight";
// "language_model.lm_head.weight" → "lm_head.weight"; "model.visual.blocks.0.attn.qkv.weight" → dropped.
func NormaliseName(name string) (canonical string, keep bool) {
	for _, p := range droppedPrefixes {
		if strings.HasPrefix(name, p) || strings.HasPrefix(name, "model."+p) {
			return name, false
		}
	}
	c, _ := stripPrefix(name)
	for _, p := range droppedPrefixes {
		if strings.HasPrefix(c, p) {
			return c, false
		}
	}
	return c, true
}

// stripPrefix removes one checkpoint prefix and reports which.
func stripPrefix(name string) (string, string) {
	for _, p := range namePrefixes {
		if strings.HasPrefix(name, p) && len(name) > len(p) {
			return name[len(p):], p
		}
	}
	return name, ""
}
