package mlx

import (
	"fmt"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/ports"
)

// arch is the resolved shape of a target model (the same fields the CPU backend resolves; see doc.go for why
// the structure is duplicated).
type arch struct {
	Hidden, Vocab, Layers int
	Eps                   float32
	ContextLength         int
	Kinds                 []ports.LayerKind
	Heads, KVHeads        int
	HeadDim, RotaryDims   int
	RopeTheta             float64
	OutputGate            bool
	KeyHeads, ValueHeads  int
	KeyDim, ValueDim      int
	ConvKernel            int
	Intermediate          int
	MoE                   []bool
	Experts, TopK         int
	MoEIntermediate       int
	SharedIn              int
	NormTopK              bool
}

func (a *arch) convDim() int { return 2*a.KeyHeads*a.KeyDim + a.ValueHeads*a.ValueDim }

func archFromConfig(c *hfmodel.TextConfig, contextLength int) (arch, error) {
	a := arch{
		Hidden: c.HiddenSize, Vocab: c.VocabSize, Layers: c.NumHiddenLayers, Eps: float32(c.RMSNormEps),
		ContextLength: c.MaxPositionEmbeddings, Kinds: append([]ports.LayerKind(nil), c.LayerTypes...),
		Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim, RotaryDims: c.RotaryDims(),
		RopeTheta: c.RopeTheta, OutputGate: c.AttnOutputGate,
		KeyHeads: c.LinearNumKeyHeads, ValueHeads: c.LinearNumValueHeads, KeyDim: c.LinearKeyHeadDim,
		ValueDim: c.LinearValueHeadDim, ConvKernel: c.LinearConvKernelDim,
		Intermediate: c.IntermediateSize, MoE: make([]bool, c.NumHiddenLayers),
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
	return a, a.validate()
}

func (a *arch) validate() error {
	switch {
	case a.Hidden <= 0 || a.Vocab <= 0 || a.Layers <= 0:
		return fmt.Errorf("hidden %d, vocab %d, layers %d must be positive", a.Hidden, a.Vocab, a.Layers)
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
	if attn && (a.Heads <= 0 || a.KVHeads <= 0 || a.HeadDim <= 0 || a.Heads%a.KVHeads != 0 ||
		a.RotaryDims <= 0 || a.RotaryDims > a.HeadDim || a.RotaryDims%2 != 0) {
		return fmt.Errorf("attention heads %d / kv heads %d / head dim %d / rotary dims %d invalid", a.Heads, a.KVHeads, a.HeadDim, a.RotaryDims)
	}
	if rec && (a.KeyHeads <= 0 || a.ValueHeads <= 0 || a.KeyDim <= 0 || a.ValueDim <= 0 || a.ConvKernel < 1 || a.ValueHeads%a.KeyHeads != 0) {
		return fmt.Errorf("linear attention heads %d/%d dims %d/%d conv %d invalid", a.KeyHeads, a.ValueHeads, a.KeyDim, a.ValueDim, a.ConvKernel)
	}
	if moe && (a.Experts <= 0 || a.TopK <= 0 || a.TopK > a.Experts || a.MoEIntermediate <= 0) {
		return fmt.Errorf("MoE experts %d top-k %d intermediate %d invalid", a.Experts, a.TopK, a.MoEIntermediate)
	}
	return nil
}

// linear is a weight matrix on MLX: float (wt holds the [in, out] transpose view) or MLX affine-quantized
// (w packed [.., out, in·bits/32], scales and biases [.., out, in/group]). Stacked experts add a leading E axis.
type linear struct {
	out, in       int
	wt            arr // float: [in,out] ([E,in,out] stacked)
	w             arr // quantized codes
	scales, biase arr
	bits, group   int
}

func (l *linear) quantized() bool { return l.bits > 0 }

// apply computes x·Wᵀ for x [..., in].
func (l *linear) apply(g *graph, x arr) arr {
	if l.quantized() {
		return g.qmm(x, l.w, l.scales, l.biase, l.group, l.bits)
	}
	return g.matmul(x, l.wt)
}

// gather computes, for x [..., 1, in] and expert ids idx, x·W_idxᵀ → [..., 1, out].
func (l *linear) gather(g *graph, x, idx arr) arr {
	if l.quantized() {
		return g.gatherQmm(x, l.w, l.scales, l.biase, idx, l.group, l.bits, false)
	}
	// MLX's CPU gather_mm takes float32 only: float experts stay float32 (see loader.linear) and run in it.
	if dt := mlxc.ArrayDtype(x); dt != mlxc.Float32 {
		return g.astype(g.gatherMm(g.astype(x, mlxc.Float32), l.wt, idx, false), dt)
	}
	return g.gatherMm(x, l.wt, idx, false)
}

type attnWeights struct {
	q, k, v, o   *linear
	qNorm, kNorm arr
}

type gdnWeights struct {
	qkv, z, b, a *linear // Qwen3.5 form
	qkvz, ba     *linear // Qwen3-Next form (grouped by key head)
	conv         arr     // [Kc, C]: row j is the tap hitting X[t+j]
	negA, dtBias arr     // [Hv]
	norm         arr     // [dv]
	out          *linear
}

// ffnWeights is a SwiGLU block with gate and up fused into one [2I, H] matrix (one matmul) when they are
// stored alike; mixed-bit checkpoints that quantize them differently keep gate and up apart.
type ffnWeights struct {
	gateUp   *linear
	gate, up *linear // when not fused
	down     *linear
	inter    int
}

type moeWeights struct {
	router     *linear
	gateUp     *linear // stacked [E, 2I, H]
	gate, up   *linear // stacked [E, I, H] each, when stored differently
	down       *linear // stacked [E, H, I]
	shared     *ffnWeights
	sharedGate *linear
}

type layer struct {
	kind             ports.LayerKind
	inNorm, postNorm arr
	attn             *attnWeights
	gdn              *gdnWeights
	mlp              *ffnWeights
	moe              *moeWeights
}

type model struct {
	arch      arch
	embed     *linear
	embedF    arr // float embedding [V,H] (nil when quantized)
	lmHead    *linear
	finalNorm arr
	layers    []layer
	// arena owns every weight array; freed on Close.
	arena *graph
	// dt is the compute dtype of activations and float weights (the GDN recurrence and its state are always
	// float32).
	dt mlxc.Dtype
}

// cast converts an activation to the compute dtype (nothing for float32).
func (m *model) cast(g *graph, a arr) arr {
	if m.dt == mlxc.Float32 {
		return a
	}
	return g.astype(a, m.dt)
}

// f32 converts an activation to float32 (nothing when computing in float32).
func (m *model) f32(g *graph, a arr) arr {
	if m.dt == mlxc.Float32 {
		return a
	}
	return g.astype(a, mlxc.Float32)
}
