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

// TargetValues counts m's sequence (see Values). Where m has its layers loaded the projections' layouts
// count as loaded (fused projections are split into copies); without them (an arch alone) every layer counts
// as fused, the wider.
func TargetValues[W comparable](m *Target[W]) Values {
	a := &m.Arch
	var zero W
	H := int64(a.Hidden)
	v := Values{Vocab: int64(a.Vocab), Hidden: H, Row: H}
	qd, kvd := int64(a.Heads*a.HeadDim), int64(a.KVHeads*a.HeadDim)
	C, Dv, Hv := int64(a.ConvDim()), int64(a.ValueHeads*a.ValueDim), int64(a.ValueHeads)
	for i, k := range a.Kinds {
		var ly *Layer[W]
		if len(m.Layers) == len(a.Kinds) {
			ly = &m.Layers[i]
		}
		// Both norms and both residual additions.
		row := 4 * H
		switch k {
		case ports.LayerAttention:
			v.KVPerPosition += 2 * kvd
			v.Heads = max(v.Heads, int64(a.Heads))
			// Q, its norm, its rotated copy and the attention output; with the output gate Q is twice as
			// wide, split in two, and gated. K and V, K's norm and rotated copy. The output projection.
			q := 4 * qd
			if a.OutputGate {
				q = 8 * qd
			}
			row += q + 4*kvd + H
		case ports.LayerRecurrent:
			v.Conv += int64(max(a.ConvKernel-1, 0)) * C
			v.SSM += Hv * int64(a.ValueDim*a.KeyDim)
			v.Channels += C
			v.ValueHeads += Hv
			v.ValueWidth += Dv
			v.KeyValues += Hv * int64(a.KeyDim)
			// The projections (fused: QKVZ and BA, then split and q, k, v concatenated again), the conv
			// output, β and α, δ, the output, its gated norm and the output projection; the conv window's
			// rows are the block's (Conv adds its Kc−1 rows of state).
			proj := 2*(C+Dv) + C + 4*Hv
			if ly != nil && ly.GDN != nil && ly.GDN.QKVZ == zero {
				proj = C + Dv + 2*Hv
			}
			row += proj + C + C + 2*Hv + 3*Dv + H
		}
		switch {
		case i < len(a.MoE) && a.MoE[i]:
			// Each chosen expert's gate and up (fused, then split), its activation and its output, the
			// shared expert alike, its gate, the weighted sum and the router's scores.
			row += int64(a.TopK)*(5*int64(a.MoEIntermediate)+H) + 5*int64(a.SharedIn) + 3*H + int64(a.Experts) + 1
		case ly != nil && ly.MLP != nil && ly.MLP.GateUp == zero:
			// Gate and up, the activation, the down projection.
			row += 3*int64(a.Intermediate) + H
		default:
			// Gate and up fused, then split; the activation, the down projection.
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
