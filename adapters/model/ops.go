// Package model holds every architecture higgs runs, written once: the load sequence of Qwen3, Qwen3-Next,
// Qwen3.5 (gated attention, Gated DeltaNet, MoE) targets and of DFlash drafters (which tensors, their shapes,
// quantized or not, zero-centred norms, fused or split projections), the layer loop, the projection splits and
// gating, the attention / Gated DeltaNet / MoE block structure, the taps and the drafter's context and block
// passes.
//
// It is written over small block-level interfaces that the backends implement as siblings (adapters/cpu on
// its deterministic kernels, adapters/mlx on one lazy MLX graph per forward): a Loader that turns checkpoint
// tensors into the backend's weight handles, Ops and Blocks that compute on the backend's activations, and a
// State that owns one sequence's caches for the length of a pass. A backend keeps only what is truly its own:
// kernels, device residency, session state, tapes and snapshots.
//
// Every function here is generic over X, a backend's activation (rows × features, row-major: one row per
// position), and W, its weight handle (a matrix, a stacked-experts matrix, a vector or a RoPE table). The
// zero W means "absent" (an optional projection, a tied head).
package model

import (
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/ports"
)

// Loader turns checkpoint tensors into a backend's weight handles. Names are canonical
// (hfmodel.Checkpoint); the backend reads the tensor itself, so a quantized matrix never passes through
// host float32.
type Loader[W comparable] interface {
	// Linear loads the matrix stored as tensor (canonical name) for module (whose .scales/.biases, when the
	// checkpoint stores it quantized, sit beside it), with logical dims [out, in] or, for stacked experts,
	// [E, out, in]. The stored shape must agree (quantized: through hfmodel.CheckQuantizedLinear).
	Linear(tensor, module string, dims ...int) (W, error)
	// Vector uploads host values (norm weights, decay rates, biases) of n = len(v) values, in the backend's
	// compute dtype, or in float32 whatever that is when exact (the Gated DeltaNet recurrence's parameters).
	Vector(v []float32, exact bool) (W, error)
	// Conv uploads a Gated DeltaNet depthwise convolution, v[c·k + j] being tap j of channel c.
	Conv(v []float32, channels, k int) (W, error)
	// Fuse stacks a and b along their output axis into one matrix when the backend gains from one product
	// instead of two (gate and up); ok is false when it does not or cannot (different storage), and the
	// caller keeps a and b.
	Fuse(a, b W) (w W, ok bool)
	// Stack joins per-expert matrices [out, in] into one stacked [E, out, in] weight.
	Stack(parts []W) (W, error)
	// Rope builds the RoPE table of spec.
	Rope(spec Rope) (W, error)
}

// Rope is a RoPE table's definition: NeoX rotation of the first Dims values of heads Width wide, plain from
// Base or scaled as Scaling says (MaxPositions is max_position_embeddings, which YaRN depends on).
type Rope struct {
	Dims, Width  int
	Base         float64
	Scaling      hfmodel.RopeScaling
	MaxPositions int
}

// Act names an elementwise activation.
type Act int

const (
	// Sigmoid is σ(x) = 1/(1+e^−x).
	Sigmoid Act = iota
	// SiLU is x·σ(x).
	SiLU
)

// Ops are the elementwise and row-wise operations of a forward pass. Results are new values: no op writes
// into its arguments, so a value may be read again after it was passed on (taps are).
type Ops[X any, W comparable] interface {
	// Embed looks up the rows of tokens (all inside the vocabulary) in the embedding w ([V, H]).
	Embed(w W, tokens []ports.Token) X
	// Linear is x·wᵀ: [T, in] → [T, out].
	Linear(w W, x X) X
	// Norm is RMSNorm of every group of len(w) consecutive values of each row, scaled by w (a row norm when
	// len(w) is the row width, per-head norms when it is the head width).
	Norm(x X, w W, eps float32) X
	// Add is x + y.
	Add(x, y X) X
	// Gate is x ⊙ act(g); g is as wide as x, or one column that scales each row.
	Gate(x, g X, act Act) X
	// Split cuts every row into groups consecutive groups, each holding widths[0], widths[1], … values, and
	// returns one value per width gathering that part of every group: [T, groups·Σw] → [T, groups·w_i].
	Split(x X, groups int, widths ...int) []X
	// Concat joins values of equal row counts side by side: row t of the result is row t of each, in order.
	Concat(xs ...X) X
	// Rows is rows lo..hi−1 of x.
	Rows(x X, lo, hi int) X
	// Join stacks values of equal widths one under the other: the rows of xs[0], then those of xs[1], …
	// (a batched pass gathers its sequences' rows so).
	Join(xs ...X) X
}

// Blocks are the operations that are one step of the model's math but several of Ops', where a backend has
// a fused form of its own.
type Blocks[X any, W comparable] interface {
	// Scale is s·x.
	Scale(x X, s float32) X
	// GatedNorm is the Gated DeltaNet output norm: RMSNorm(x)·w ⊙ SiLU(z) over groups of len(w) values.
	GatedNorm(x, z X, w W, eps float32) X
	// Experts is the routed part of a sparse MoE block: softmax over m.Router's logits, the topK experts per
	// row (ties to the lower id), their weights renormalised when normTopK, and Σ weight·SwiGLU expert(x)
	// summed in rank order.
	Experts(m *MoE[W], x X, topK int, normTopK bool) X
}

// Backend is everything a forward pass computes with.
type Backend[X any, W comparable] interface {
	Ops[X, W]
	Blocks[X, W]
}

// Attend describes one attention step: queries and keys are rotated with Rope at positions Pos..; they
// attend to the layer's cached keys and to the block's own keys under the mask: Causal hides block keys
// after the query's slot, Window > 0 hides keys |Δposition| ≥ Window. Keep appends the block's keys and
// values to the cache (a target's attention); without it the cache is only read (a drafter's noise block).
type Attend[W comparable] struct {
	Pos, HeadDim int
	Rope         W
	Causal       bool
	Window       int
	Keep         bool
}

// State is one sequence's per-layer state for the length of one pass; the backend's session builds it.
type State[X any, W comparable] interface {
	// Attention runs attention of q [T, Hq·d] over layer's cache and the block's k, v [T, Hkv·d] and
	// returns [T, Hq·d].
	Attention(layer int, q, k, v X, spec Attend[W]) X
	// Remember rotates k [T, Hkv·d] with spec.Rope at positions spec.Pos.. and appends k and v to layer's
	// cache (a drafter's context); the mask fields of spec are unused.
	Remember(layer int, k, v X, spec Attend[W])
	// DeltaNet runs layer's Gated DeltaNet recurrence on the raw projections p [T, conv channels], b and a
	// [T, value heads]: the causal convolution and SiLU, the L2-normalised keys and queries, the gates, the
	// delta rule (docs/model-math.md#gated-deltanet), updating the layer's conv buffer and SSM state (and recording the
	// block's tape when the pass records one). It returns the read-outs [T, value heads·value dim].
	DeltaNet(layer int, w *DeltaNet[W], p, b, a X) X
}
