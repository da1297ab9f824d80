package model

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// Forward runs the target's decoder layers over x (the embedded block, T rows at positions pos..) and
// returns the last layer's residual stream. After layer i, tap(i, x) is called with the layer's output when
// tap is non-nil (the drafter's taps are those outputs). ctx is checked before every layer; a cancelled
// pass may have changed the state of the layers before it.
func Forward[X any, W comparable](ctx context.Context, m *Target[W], be Backend[X, W], st State[X, W], x X, pos int, tap func(layer int, x X)) (X, error) {
	return ForwardStage(ctx, m, be, st, x, pos, Stage{Lo: 0, Hi: len(m.Layers)}, tap)
}

// ForwardStage is Forward over the decoder layers of one pipeline stage only (x is the residual stream
// entering layer st.Lo, the result the one leaving layer st.Hi−1): a model split across processes runs its
// stages one after the other, passing the stream between them.
func ForwardStage[X any, W comparable](ctx context.Context, m *Target[W], be Backend[X, W], st State[X, W], x X, pos int, stage Stage, tap func(layer int, x X)) (X, error) {
	eps := m.Arch.Eps
	scope, _ := be.(LayerScope[X])
	for i := stage.Lo; i < stage.Hi; i++ {
		if err := ctx.Err(); err != nil {
			var zero X
			return zero, fmt.Errorf("layer %d: %w", i, err)
		}
		if scope != nil {
			scope.BeginLayer(i)
		}
		ly := &m.Layers[i]
		h := be.Norm(x, ly.InNorm, eps)
		var out X
		if ly.Kind == ports.LayerAttention {
			out = attention(m, be, st, i, ly.Attn, h, pos)
		} else {
			out = gatedDeltaNet(m, be, st, i, ly.GDN, h)
		}
		x = be.Add(x, out)
		h = be.Norm(x, ly.PostNorm, eps)
		if ly.MoE != nil {
			out = moe(m, be, ly.MoE, h)
		} else {
			out = FeedForward(be, ly.MLP, h)
		}
		x = be.Add(x, out)
		if tap != nil {
			tap(i, x)
		}
		if scope != nil {
			scope.EndLayer(i, x)
		}
	}
	return x, nil
}

// LayerScope is a backend whose buffers can be taken back layer by layer: ForwardStage calls BeginLayer
// before each decoder layer and EndLayer with its output after it (and after the tap has seen it), and
// nothing else the layer's ops returned is read after that, nor the layer's input unless the tap kept it (the
// backend knows which layers its taps keep). A backend that allocates each op's result afresh needs none;
// one that recycles buffers from pass to pass holds a long prefill chunk's every intermediate value at once
// without it.
type LayerScope[X any] interface {
	BeginLayer(layer int)
	EndLayer(layer int, out X)
}

// Logits applies the final norm and the LM head to x's rows lo..hi−1.
func Logits[X any, W comparable](m *Target[W], be Backend[X, W], x X, lo, hi int) X {
	return be.Linear(m.LMHead, Hidden(m, be, x, lo, hi))
}

// Hidden applies the final norm to x's rows lo..hi−1: the rows the LM head reads.
func Hidden[X any, W comparable](m *Target[W], be Backend[X, W], x X, lo, hi int) X {
	return be.Norm(be.Rows(x, lo, hi), m.FinalNorm, m.Arch.Eps)
}

// LastHidden runs tokens (already checked against the vocabulary and the context) from position 0 through
// st, which must be empty, and returns the last position's hidden state after the final norm, one row:
// what last-token pooling embeds (Qwen3-Embedding's pooling, before its L2 normalisation). The LM head is
// not run.
func LastHidden[X any, W comparable](ctx context.Context, m *Target[W], be Backend[X, W], st State[X, W], tokens []ports.Token) (X, error) {
	x, err := Forward(ctx, m, be, st, be.Embed(m.Embed, tokens), 0, nil)
	if err != nil {
		var zero X
		return zero, err
	}
	return Hidden(m, be, x, len(tokens)-1, len(tokens)), nil
}

// attention is a (gated) GQA attention layer on h [T, H] at positions pos.., appending to the layer's cache.
func attention[X any, W comparable](m *Target[W], be Backend[X, W], st State[X, W], i int, w *Attention[W], h X, pos int) X {
	a := &m.Arch
	q := be.Linear(w.Q, h)
	var gate X
	if a.OutputGate {
		// Per head the projection holds [query | gate].
		parts := be.Split(q, a.Heads, a.HeadDim, a.HeadDim)
		q, gate = parts[0], parts[1]
	}
	k := be.Linear(w.K, h)
	v := be.Linear(w.V, h)
	q = be.Norm(q, w.QNorm, a.Eps)
	k = be.Norm(k, w.KNorm, a.Eps)
	o := st.Attention(i, q, k, v, Attend[W]{Pos: pos, HeadDim: a.HeadDim, Rope: m.Rope, Causal: true, Keep: true})
	if a.OutputGate {
		o = be.Gate(o, gate, Sigmoid)
	}
	return be.Linear(w.O, o)
}

// gatedDeltaNet is a Gated DeltaNet layer on h [T, H]: the projections split into the convolution's
// channels p = [q | k | v], the output gate z and the per-head b and a, then the recurrence and the gated
// output norm.
func gatedDeltaNet[X any, W comparable](m *Target[W], be Backend[X, W], st State[X, W], i int, w *DeltaNet[W], h X) X {
	var p, z, b, a X
	if w.QKVZ != *new(W) {
		// Qwen3-Next: rows grouped by key head, [q_g | k_g | v (ρ heads) | z (ρ heads)] and [b (ρ) | a (ρ)].
		rho := w.ValueHeads / w.KeyHeads
		dk, vw := w.KeyDim, rho*w.ValueDim
		u := be.Split(be.Linear(w.QKVZ, h), w.KeyHeads, dk, dk, vw, vw)
		p, z = be.Concat(u[0], u[1], u[2]), u[3]
		ba := be.Split(be.Linear(w.BA, h), w.KeyHeads, rho, rho)
		b, a = ba[0], ba[1]
	} else {
		p, z = be.Linear(w.QKV, h), be.Linear(w.Z, h)
		b, a = be.Linear(w.B, h), be.Linear(w.A, h)
	}
	o := st.DeltaNet(i, w, p, b, a)
	return be.Linear(w.Out, be.GatedNorm(o, z, w.Norm, m.Arch.Eps))
}

// PairLinear is an optional ability of a backend: for a weight w = Loader.Fuse(a, b), LinearPair(w, x)
// returns x·aᵀ and x·bᵀ as two values, what Split(Linear(w, x), 1, a's rows, b's rows) returns, without
// the fused value between them (the CPU runs both products in one call and writes each half where it goes).
// ok is false, and nothing is computed, for a w the backend's Fuse did not make (a checkpoint's own fused
// matrix). FeedForward uses it where the backend has it.
type PairLinear[X any, W comparable] interface {
	LinearPair(w W, x X) (a, b X, ok bool)
}

// FeedForward is the SwiGLU MLP: down(SiLU(gate(x)) ⊙ up(x)).
func FeedForward[X any, W comparable](be Backend[X, W], f *FFN[W], x X) X {
	var gate, up X
	if f.GateUp != *new(W) {
		if pl, ok := be.(PairLinear[X, W]); ok {
			if gate, up, ok := pl.LinearPair(f.GateUp, x); ok {
				return be.Linear(f.Down, be.Gate(up, gate, SiLU))
			}
		}
		gu := be.Split(be.Linear(f.GateUp, x), 1, f.Inter, f.Inter)
		gate, up = gu[0], gu[1]
	} else {
		gate, up = be.Linear(f.Gate, x), be.Linear(f.Up, x)
	}
	return be.Linear(f.Down, be.Gate(up, gate, SiLU))
}

// moe is the sparse MoE block: the routed experts, plus the shared expert (scaled by its sigmoid gate when
// the checkpoint has one), added in that order.
func moe[X any, W comparable](m *Target[W], be Backend[X, W], w *MoE[W], h X) X {
	y := be.Experts(w, h, m.Arch.TopK, m.Arch.NormTopK)
	if w.Shared == nil {
		return y
	}
	s := FeedForward(be, w.Shared, h)
	if w.SharedGate != *new(W) {
		s = be.Gate(s, be.Linear(w.SharedGate, h), Sigmoid)
	}
	return be.Add(y, s)
}
