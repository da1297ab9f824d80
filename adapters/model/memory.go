package model

import (
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/ports"
)

// Values counts, in values (not bytes), what one sequence of a target passes through and keeps, from the
// graph written once in this package: each backend multiplies these counts by the bytes of the types it
// keeps them in and by the copies it holds (its ports.MemoryPricer).
type Values struct {
	// KVPerPosition is every attention layer's keys and values of one position.
	KVPerPosition int64
	// Conv and SSM are every recurrent layer's conv buffer (the last Kc−1 raw projection rows) and SSM
	// state [Hv, dv, dk].
	Conv, SSM int64
	// Channels is the sum over recurrent layers of their conv channels C = 2·Hk·dk + Hv·dv; ValueHeads and
	// ValueWidth the sums of their Hv and Hv·dv; KeyValues of their Hv·dk (k̂ expanded to the value heads).
	Channels, ValueHeads, ValueWidth, KeyValues int64
	// Row is the activations one row of a forward passes through, every op's output counted once, over every
	// layer and the embedding; LayerRow the largest layer's share of it.
	Row, LayerRow int64
	// Heads is the attention layers' query heads (the widest: a bound on the heads whose scores are live at
	// once when a layer attends).
	Heads int64
	// Vocab is the logits of one returned row; Hidden one row of one tapped layer's taps.
	Vocab, Hidden int64
}

// TargetValues counts a's sequence (see Values).
func TargetValues(a *hfmodel.Arch) Values {
	H := int64(a.Hidden)
	v := Values{Vocab: int64(a.Vocab), Hidden: H, Row: H}
	qd, kvd := int64(a.Heads*a.HeadDim), int64(a.KVHeads*a.HeadDim)
	C, Dv, Hv := int64(a.ConvDim()), int64(a.ValueHeads*a.ValueDim), int64(a.ValueHeads)
	for i, k := range a.Kinds {
		// Both norms and both residual additions.
		row := 4 * H
		switch k {
		case ports.LayerAttention:
			v.KVPerPosition += 2 * kvd
			v.Heads = max(v.Heads, int64(a.Heads))
			// Q (twice as wide with the output gate, then split), K, V, their norms, the rotated copies,
			// the attention output, the gate and the output projection.
			row += 8*qd + 4*kvd + H
		case ports.LayerRecurrent:
			v.Conv += int64(max(a.ConvKernel-1, 0)) * C
			v.SSM += Hv * int64(a.ValueDim*a.KeyDim)
			v.Channels += C
			v.ValueHeads += Hv
			v.ValueWidth += Dv
			v.KeyValues += Hv * int64(a.KeyDim)
			// The fused projection and its split (C + Dv each), the conv input, window and output, β and α and
			// their split, δ, the output, its gated norm and the output projection.
			row += 5*C + 5*Dv + 6*Hv + H
		}
		if i < len(a.MoE) && a.MoE[i] {
			// Each chosen expert's gate and up (fused, then split), its activation and its output, the
			// shared expert alike, its gate, the weighted sum and the router's scores.
			row += int64(a.TopK)*(5*int64(a.MoEIntermediate)+H) + 5*int64(a.SharedIn) + 3*H + int64(a.Experts) + 1
		} else {
			// Gate and up (fused, then split), the activation, the down projection.
			row += 5*int64(a.Intermediate) + H
		}
		v.Row += row
		v.LayerRow = max(v.LayerRow, row)
	}
	return v
}

// DrafterValues counts a DFlash drafter's sequence: KVPerPosition its context caches per position, Row the
// activations one block row passes through (its layers, the final norm and the logits), LayerRow those of
// one context row (its taps projected to the hidden size, then every layer's keys and values), Hidden the
// width of one context row of taps (taps × the target's hidden size), Vocab the logits of one block row.
func DrafterValues(a *hfmodel.DrafterArch) Values {
	H := int64(a.HiddenSize)
	qd, kvd := int64(a.NumHeads*a.HeadDim), int64(a.NumKVHeads*a.HeadDim)
	L := int64(a.NumLayers)
	v := Values{Vocab: int64(a.VocabSize), Hidden: int64(len(a.TapLayers)) * H, Heads: int64(a.NumHeads)}
	v.KVPerPosition = L * 2 * kvd
	// Per layer: norms and residuals, Q/K/V with their norms and rotated copies, the attention output and
	// projection, the MLP (fused gate and up, split, activation, down); DFlash2's convolutions around
	// attention and the MLP at most double that.
	layer := 4*H + 8*qd + 4*kvd + H + 5*int64(a.IntermediateSize) + H
	if a.V2() {
		layer *= 2
	}
	v.Row = 2*H + L*layer + v.Vocab + int64(max(a.SelectorRank, 0)+2*max(a.SelectorTopK, 0))
	// A context row: its taps, their projection and norm, then every layer's keys and values with their
	// norms and rotated copies.
	v.LayerRow = v.Hidden + 2*H + L*4*kvd
	return v
}
