package hfmodel

import (
	"fmt"
	"path/filepath"

	"github.com/higgs-go/higgs/adapters/safetensors"

	"github.com/higgs-go/higgs/ports"
)

// Arch is the resolved shape of a target model: everything a backend's forward pass needs, independent of how
// the checkpoint spelled it. Both backends (adapters/cpu, adapters/mlx) build their layers from it, so the
// config-to-shape rules and their checks live once, here.
type Arch struct {
	Hidden, Vocab, Layers int
	Eps                   float32
	// ContextLength is max_position_embeddings, or the caller's smaller cap.
	ContextLength int
	Kinds         []ports.LayerKind
	// Attention.
	Heads, KVHeads, HeadDim, RotaryDims int
	RopeTheta                           float64
	// Rope is the checkpoint's RoPE scaling (zero: plain RoPE) and RopeMaxPositions the config's
	// max_position_embeddings, which YaRN's frequencies depend on (ContextLength may be capped below it).
	Rope             RopeScaling
	RopeMaxPositions int
	OutputGate       bool
	// Gated DeltaNet.
	KeyHeads, ValueHeads, KeyDim, ValueDim, ConvKernel int
	// MLP / MoE: MoE[i] says whether layer i is sparse.
	Intermediate                             int
	MoE                                      []bool
	Experts, TopK, MoEIntermediate, SharedIn int
	NormTopK                                 bool
}

// ResolveArch resolves the forward-pass shape from a parsed config. contextLength > 0 caps the context below
// max_position_embeddings (a larger value changes nothing: positions past the trained range are not allowed).
// The result is validated (Validate), so a backend can size its buffers from it without further checks.
func ResolveArch(c *TextConfig, contextLength int) (Arch, error) {
	a := Arch{
		Hidden: c.HiddenSize, Vocab: c.VocabSize, Layers: c.NumHiddenLayers, Eps: float32(c.RMSNormEps),
		ContextLength: c.MaxPositionEmbeddings, Kinds: append([]ports.LayerKind(nil), c.LayerTypes...),
		Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim, RotaryDims: c.RotaryDims(),
		RopeTheta: c.RopeTheta, Rope: c.RopeScaling, RopeMaxPositions: c.MaxPositionEmbeddings, OutputGate: c.AttnOutputGate,
		KeyHeads: c.LinearNumKeyHeads, ValueHeads: c.LinearNumValueHeads, KeyDim: c.LinearKeyHeadDim,
		ValueDim: c.LinearValueHeadDim, ConvKernel: c.LinearConvKernelDim,
		Intermediate: c.IntermediateSize, MoE: make([]bool, max(c.NumHiddenLayers, 0)),
		Experts: c.NumExperts, TopK: c.NumExpertsPerTok, MoEIntermediate: c.MoeIntermediateSize,
		SharedIn: c.SharedExpertIntermediateSize, NormTopK: c.NormTopKProb,
	}
	if contextLength > 0 && (a.ContextLength <= 0 || contextLength < a.ContextLength) {
		a.ContextLength = contextLength
	}
	for i := range a.MoE {
		a.MoE[i] = c.IsMoELayer(i)
	}
	if len(a.Kinds) != a.Layers {
		return a, fmt.Errorf("config has %d layer types for %d layers", len(a.Kinds), a.Layers)
	}
	return a, a.Validate()
}

// LoadTarget reads a target directory's config.json and generation_config.json and resolves what a backend
// needs before it reads any weight: the config, its Arch (contextLength as in ResolveArch) and the stop tokens
// (StopTokens). Errors do not name dir; the caller says what it was loading.
func LoadTarget(dir string, contextLength int) (cfg *TextConfig, a Arch, stop []int32, err error) {
	if cfg, err = LoadConfig(dir); err != nil {
		return nil, Arch{}, nil, err
	}
	gen, err := LoadGenerationConfig(dir)
	if err != nil {
		return nil, Arch{}, nil, err
	}
	if a, err = ResolveArch(cfg, contextLength); err != nil {
		return nil, Arch{}, nil, err
	}
	return cfg, a, StopTokens(gen, cfg), nil
}

// ConvDim is the width of the Gated DeltaNet short convolution: the q, k and v channels together.
func (a *Arch) ConvDim() int { return 2*a.KeyHeads*a.KeyDim + a.ValueHeads*a.ValueDim }

// QProjOut is the number of rows of a full-attention q_proj: Heads·HeadDim, twice that when the attention
// carries a per-head output gate (q_proj then also produces the gate).
func (a *Arch) QProjOut() int {
	if a.OutputGate {
		return 2 * a.Heads * a.HeadDim
	}
	return a.Heads * a.HeadDim
}

// Validate checks the shape is one the backends can run: positive sizes, known layer kinds, and the head and
// expert settings of the layer kinds present (a model without attention layers never uses RoPE, so its rotary
// settings are not checked).
func (a *Arch) Validate() error {
	switch {
	case a.Hidden <= 0 || a.Vocab <= 0 || a.Layers <= 0:
		return fmt.Errorf("hidden %d, vocab %d, layers %d must be positive", a.Hidden, a.Vocab, a.Layers)
	case len(a.Kinds) != a.Layers || len(a.MoE) != a.Layers:
		return fmt.Errorf("%d layer kinds and %d MoE flags for %d layers", len(a.Kinds), len(a.MoE), a.Layers)
	case a.ContextLength <= 0:
		return fmt.Errorf("context length %d must be positive", a.ContextLength)
	}
	var attn, rec, moe bool
	for i, k := range a.Kinds {
		switch k {
		case ports.LayerAttention:
			attn = true
		case ports.LayerRecurrent:
			rec = true
		default:
			return fmt.Errorf("layer %d: unknown kind %v", i, k)
		}
		moe = moe || a.MoE[i]
	}
	if attn {
		if a.Heads <= 0 || a.KVHeads <= 0 || a.HeadDim <= 0 || a.Heads%a.KVHeads != 0 {
			return fmt.Errorf("attention heads %d / kv heads %d / head dim %d invalid", a.Heads, a.KVHeads, a.HeadDim)
		}
		if a.RotaryDims <= 0 || a.RotaryDims > a.HeadDim || a.RotaryDims%2 != 0 {
			return fmt.Errorf("rotary dims %d invalid for head dim %d", a.RotaryDims, a.HeadDim)
		}
	}
	if rec {
		if a.KeyHeads <= 0 || a.ValueHeads <= 0 || a.KeyDim <= 0 || a.ValueDim <= 0 || a.ConvKernel < 1 || a.ValueHeads%a.KeyHeads != 0 {
			return fmt.Errorf("linear attention heads %d/%d dims %d/%d conv %d invalid (value heads must be a multiple of key heads)",
				a.KeyHeads, a.ValueHeads, a.KeyDim, a.ValueDim, a.ConvKernel)
		}
	}
	if moe && (a.Experts <= 0 || a.TopK <= 0 || a.TopK > a.Experts || a.MoEIntermediate <= 0) {
		return fmt.Errorf("MoE experts %d top-k %d intermediate %d invalid", a.Experts, a.TopK, a.MoEIntermediate)
	}
	return nil
}

// TargetFiles is a target directory opened for loading: what LoadTarget resolves, and the mapped weights.
type TargetFiles struct {
	Config *TextConfig
	Arch   Arch
	Stop   []int32
	Store  *safetensors.Store
}

// OpenTarget is LoadTarget followed by mapping dir's safetensors; errors name dir. The caller closes Store.
func OpenTarget(dir string, contextLength int) (*TargetFiles, error) {
	cfg, a, stop, err := LoadTarget(dir, contextLength)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return &TargetFiles{Config: cfg, Arch: a, Stop: stop, Store: st}, nil
}

// Info is the description a backend reports for the target loaded from dir (ports.Target.Info).
func (f *TargetFiles) Info(dir string) ports.ModelInfo {
	return ports.ModelInfo{Name: filepath.Clean(dir), Architecture: f.Config.ModelType, VocabSize: f.Arch.Vocab,
		HiddenSize: f.Arch.Hidden, ContextLength: f.Arch.ContextLength,
		LayerKinds: append([]ports.LayerKind(nil), f.Arch.Kinds...), EOSTokens: f.Stop}
}
