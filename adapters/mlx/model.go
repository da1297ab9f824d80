package mlx

import (
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/ports"
)

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
	arch      hfmodel.Arch
	embed     *linear
	embedF    arr // float embedding [V,H] (nil when quantized)
	lmHead    *linear
	finalNorm arr
	layers    []layer
	rope      ropeSpec // attention layers' RoPE
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
