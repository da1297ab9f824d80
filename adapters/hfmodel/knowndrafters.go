package hfmodel

import (
	"path/filepath"
	"regexp"
	"strings"
)

// DrafterPair is a published drafter for a target model.
type DrafterPair struct {
	// Target is the target's hub id as its makers publish it (ORG/NAME).
	Target string
	// Drafter is the drafter's hub id.
	Drafter string
	// Generation is "DFlash" or "DFlash2".
	Generation string
}

// KnownDrafters are the DFlash authors' (z-lab) published drafters for the Qwen3 family targets higgs runs.
// Each drafter id is taken from the authors' README (github.com/z-lab/dflash at commit 44947fb and its later
// model table) or, for DFlash2, from the drafter's model card; the target ids are the ones the authors' serving
// examples and model cards name (Qwen/Qwen3-8B, Qwen/Qwen3-Coder-30B-A3B-Instruct, Qwen/Qwen3.5-27B,
// Qwen/Qwen3.5-35B-A3B, Qwen/Qwen3.8-27B) or, for the other rows, the Qwen organisation's name of the model the
// README's row names. No drafter is published for Qwen3-Next-80B itself, only for Qwen3-Coder-Next. A DFlash2
// row comes before a DFlash row of the same target: it is the newer generation.
var KnownDrafters = []DrafterPair{
	{"Qwen/Qwen3-4B", "z-lab/Qwen3-4B-DFlash-b16", "DFlash"},
	{"Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16", "DFlash"},
	{"Qwen/Qwen3-Coder-30B-A3B-Instruct", "z-lab/Qwen3-Coder-30B-A3B-DFlash", "DFlash"},
	{"Qwen/Qwen3-Coder-Next", "z-lab/Qwen3-Coder-Next-DFlash", "DFlash"},
	{"Qwen/Qwen3.5-4B", "z-lab/Qwen3.5-4B-DFlash", "DFlash"},
	{"Qwen/Qwen3.5-9B", "z-lab/Qwen3.5-9B-DFlash", "DFlash"},
	{"Qwen/Qwen3.5-27B", "z-lab/Qwen3.5-27B-DFlash", "DFlash"},
	{"Qwen/Qwen3.5-35B-A3B", "z-lab/Qwen3.5-35B-A3B-DFlash", "DFlash"},
	{"Qwen/Qwen3.5-122B-A10B", "z-lab/Qwen3.5-122B-A10B-DFlash", "DFlash"},
	{"Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash", "DFlash"},
	{"Qwen/Qwen3.6-35B-A3B", "z-lab/Qwen3.6-35B-A3B-DFlash", "DFlash"},
	{"Qwen/Qwen3.8-27B", "z-lab/Qwen3.8-27B-DFlash2", "DFlash2"},
}

// formatSuffix matches what converters append to a model's name without changing the model: a repacking
// (mlx, gguf), a storage type or a quantization (4bit, 8bit, bf16, fp8, dwq, awq…), possibly several.
var formatSuffix = regexp.MustCompile(`(?i)^(?:[-_](?:mlx|\d+-?bits?|bf16|fp16|f16|fp8|f32|dwq|awq|gptq|int4|int8|mxfp4|mxfp8|nvfp4|q\d(?:_k(?:_[msl])?)?))*$`)

// DraftersFor returns the known drafters of a target, named as a hub id (ORG/NAME[@REV]) or a model directory
// (a hub cache snapshot counts as its repository's name): its name must be a known target's name, case aside,
// followed only by format suffixes (mlx-community/Qwen3.5-4B-4bit is Qwen/Qwen3.5-4B, stored 4-bit; a
// fine-tune such as Qwen3-4B-Instruct-2507 is another model and has no known drafter). Nil when none is known.
func DraftersFor(target string) []DrafterPair {
	name := modelName(target)
	if name == "" {
		return nil
	}
	var out []DrafterPair
	for _, p := range KnownDrafters {
		base := p.Target[strings.IndexByte(p.Target, '/')+1:]
		if len(name) < len(base) || !strings.EqualFold(name[:len(base)], base) {
			continue
		}
		if formatSuffix.MatchString(name[len(base):]) {
			out = append(out, p)
		}
	}
	// The newer generation first, keeping the table's order otherwise.
	var first, rest []DrafterPair
	for _, p := range out {
		if p.Generation == "DFlash2" {
			first = append(first, p)
		} else {
			rest = append(rest, p)
		}
	}
	return append(first, rest...)
}

// modelName is the model's name in a target argument: NAME of a hub id, the repository's name of a hub cache
// snapshot directory (…/models--ORG--NAME/snapshots/COMMIT), else the directory's base name.
func modelName(target string) string {
	if id, err := ParseHubID(target); err == nil {
		return id.Name
	}
	clean := filepath.Clean(target)
	if parent := filepath.Dir(clean); filepath.Base(parent) == "snapshots" {
		repo := filepath.Base(filepath.Dir(parent))
		if rest, ok := strings.CutPrefix(repo, "models--"); ok {
			if i := strings.Index(rest, "--"); i >= 0 {
				return rest[i+2:]
			}
		}
	}
	base := filepath.Base(clean)
	if base == "." || base == string(filepath.Separator) {
		return ""
	}
	return base
}
