package model

import (
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/ports"
)

// DrafterOptions tune how a backend loads a drafter and drafts with it.
type DrafterOptions struct {
	// TapLayers, when non-nil, overrides the config's target_layer_ids (for drafters published without them).
	TapLayers []int
	// AllowDerivedTapLayers lets a drafter without target_layer_ids use the reference formula of
	// docs/model-math.md#tap-layers (round-half-to-even); by default such a drafter is refused, because the formula is
	// wrong for most published checkpoints.
	AllowDerivedTapLayers bool
}

// CheckDraft validates a Draft call before any work: bs ≥ 1 (1 only appends context) and the anchor inside a
// vocabulary of vocab tokens. A block may be longer or shorter than the drafter's configured block_size: that
// is only the default the authors' loop runs, and every call drafts exactly bs slots (CheckRoom bounds bs).
func CheckDraft(anchor ports.Token, bs, vocab int) error {
	if bs < 1 {
		return fmt.Errorf("block size %d must be ≥ 1", bs)
	}
	if anchor < 0 || int(anchor) >= vocab {
		return fmt.Errorf("anchor token %d outside the vocabulary of %d", anchor, vocab)
	}
	return nil
}

// CheckRoom bounds a Draft call's block by the context room: its bs slots sit at positions pos..pos+bs−1
// (pos: the anchor's position, after the call's context rows), which the target must be able to verify, so
// pos+bs may not pass contextLength (0: the target states no context length, no bound).
func CheckRoom(pos, bs, contextLength int) error {
	if contextLength > 0 && pos+bs > contextLength {
		return fmt.Errorf("block size %d at position %d passes the context length %d (at most %d fit)", bs, pos, contextLength, max(contextLength-pos, 0))
	}
	return nil
}

// CheckSampledDraft validates a DraftSampled call's sampling settings.
func CheckSampledDraft(temperature float64, rnd ports.Rand) error {
	if !(temperature > 0) || rnd == nil {
		return fmt.Errorf("sampled draft needs a temperature > 0 and a random source (got %v)", temperature)
	}
	return nil
}

// Drafter is a DFlash drafter's weights on one backend (docs/model-math.md#dflash-drafter): a Qwen3 attention stack
// fed with the target's tapped hidden states as context and a noise block [anchor, mask…] as queries. It has no
// embedding or LM head of its own: Embed and Head are its target's.
type Drafter[W comparable] struct {
	Arch           hfmodel.DrafterArch
	FC, HiddenNorm W
	Norm           W
	Rope           W
	Layers         []DraftLayer[W]
	Embed, Head    W
	// Selector is DFlash2's candidate selector (nil for DFlash).
	Selector *Selector[W]
}

// DraftLayer is one drafter layer.
type DraftLayer[W comparable] struct {
	InNorm, PostNorm W
	Attn             *Attention[W]
	MLP              *FFN[W]
	Window           int
	Causal           bool
	// AttnConv and MLPConv are DFlash2's convolutions around attention and the MLP (nil for DFlash).
	AttnConv, MLPConv *DynConv[W]
}

// LoadDrafter loads a DFlash drafter of architecture a from ck through be, bound to target (whose
// embedding and LM head it uses). The caller checks afterwards that nothing in the checkpoint was left
// unread (ck.Unused).
func LoadDrafter[W comparable](be Loader[W], ck *hfmodel.Checkpoint, a hfmodel.DrafterArch, target *Target[W]) (*Drafter[W], error) {
	l := &loader[W]{be: be, ck: ck}
	H, d := a.HiddenSize, a.HeadDim
	qw, kvw := a.NumHeads*d, a.NumKVHeads*d
	dr := &Drafter[W]{Arch: a.Clone(), Embed: target.Embed, Head: target.LMHead}
	var err error
	if dr.Rope, err = be.Rope(Rope{Dims: d, Width: d, Base: a.RopeTheta, Scaling: a.Rope, MaxPositions: a.MaxPositions}); err != nil {
		return nil, err
	}
	if dr.FC, err = l.linear("fc", H, len(a.TapLayers)*H); err != nil {
		return nil, err
	}
	if dr.HiddenNorm, err = l.norm("hidden_norm.weight", H); err != nil {
		return nil, err
	}
	if dr.Norm, err = l.norm("norm.weight", H); err != nil {
		return nil, err
	}
	for i := range a.NumLayers {
		p := fmt.Sprintf("layers.%d.", i)
		var ly DraftLayer[W]
		var errs []error
		ly.InNorm, err = l.norm(p+"input_layernorm.weight", H)
		errs = append(errs, err)
		ly.PostNorm, err = l.norm(p+"post_attention_layernorm.weight", H)
		errs = append(errs, err)
		ly.Attn, err = l.attention(p+"self_attn.", qw, qw, kvw, d, H)
		errs = append(errs, err)
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if ly.MLP, err = l.ffn(p+"mlp", a.IntermediateSize, H); err != nil {
			return nil, err
		}
		if a.V2() {
			g := H / a.ConvGroup
			if ly.AttnConv, err = l.dynConv(p+"attention_conv", a.ConvKernel, g, H); err != nil {
				return nil, err
			}
			if ly.MLPConv, err = l.dynConv(p+"mlp_conv", a.ConvKernel, g, H); err != nil {
				return nil, err
			}
		}
		if len(a.SlidingWindows) > 0 {
			ly.Window = a.SlidingWindows[i]
		}
		if len(a.Causal) > 0 {
			ly.Causal = a.Causal[i]
		}
		dr.Layers = append(dr.Layers, ly)
	}
	if a.V2() {
		if a.ConvGroup <= 0 || H%a.ConvGroup != 0 || a.ConvKernel <= 0 || a.SelectorRank <= 0 {
			return nil, fmt.Errorf("DFlash2 drafter: conv group %d, taps %d, selector rank %d do not fit hidden size %d", a.ConvGroup, a.ConvKernel, a.SelectorRank, H)
		}
		if a.SelectorTopK <= 0 || a.SelectorTopK > target.Arch.Vocab {
			return nil, fmt.Errorf("DFlash2 drafter: selector_top_k %d outside 1..%d (the target's vocabulary)", a.SelectorTopK, target.Arch.Vocab)
		}
		if dr.Selector, err = l.selector(a.SelectorRank, a.SelectorTopK, target.Arch.Vocab, H); err != nil {
			return nil, err
		}
	}
	return dr, nil
}

// Context projects context rows f [m, taps·H] (the target's tapped hidden states of committed positions
// pos..pos+m−1) into every layer's cache: c = hidden_norm(fc(f)), then each layer's k-normed K (rotated at
// its position) and V. Context rows skip input_layernorm (docs/model-math.md#drafter-layer).
func Context[X any, W comparable](d *Drafter[W], be Backend[X, W], st State[X, W], f X, pos int) {
	eps := float32(d.Arch.RMSNormEps)
	c := be.Norm(be.Linear(d.FC, f), d.HiddenNorm, eps)
	for i := range d.Layers {
		w := d.Layers[i].Attn
		k := be.Norm(be.Linear(w.K, c), w.KNorm, eps)
		st.Remember(i, k, be.Linear(w.V, c), Attend[W]{Pos: pos, HeadDim: d.Arch.HeadDim, Rope: d.Rope})
	}
}

// Block runs the noise block [anchor, mask…] (len(block) slots at positions pos.., after every cached
// context position) through the layers and returns the logits of slots 1..rows (rows ≤ len(block)−1). Every
// slot's K and V feed every layer's attention, but after the last layer only the anchor and the returned
// rows are read: there, queries, attention output and MLP run on those rows alone (each row's result is the
// same as in the full computation; DFlash2's convolutions are causal over the slots, so they keep this).
func Block[X any, W comparable](d *Drafter[W], be DraftBackend[X, W], st State[X, W], block []ports.Token, pos, rows int) X {
	logits, _ := blocks(d, be, []DraftSeq[X, W]{{State: st, Pos: pos, Block: block, Rows: rows}})
	return logits
}

// DraftSeq is one sequence of a (batched) draft: its state, the position of its block's anchor, the noise
// block [anchor, mask…], how many slots after the anchor to propose (1..len(Block)−1), for DFlash2's walk at
// temperature > 0 the temperature and the uniforms' source (Rand nil: greedy), and whether the layers after
// the first may run on the proposed rows alone (ports.TopRequest.Narrow; a lone DFlash sequence only).
type DraftSeq[X any, W comparable] struct {
	State       State[X, W]
	Pos         int
	Block       []ports.Token
	Rows        int
	Temperature float64
	Rand        ports.Rand
	Narrow      bool
}

// blocks is Block over several sequences' noise blocks in one pass, returning the logits and the
// final-normed hidden states of every sequence's slots 1..Rows, stacked in order. DFlash2 layers wrap
// attention and the MLP in their convolutions: prepare on the normed input, finish on the sublayer's output
// with the post kernels predicted from that same input; the convolutions run per sequence (they are causal
// over a block's slots). A batch of one runs exactly the solo pass's ops. A lone narrow sequence
// (DraftSeq.Narrow, a drafter without convolutions) takes its anchor and proposed rows at the first layer's
// queries instead of the last's: the first layer's keys and values still cover the whole block, every later
// layer sees only those rows.
func blocks[X any, W comparable](d *Drafter[W], be DraftBackend[X, W], seqs []DraftSeq[X, W]) (X, X) {
	a := &d.Arch
	eps := float32(a.RMSNormEps)
	n := len(seqs)
	sizes, queries, zeros, ones, rows := make([]int, n), make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	var tokens []ports.Token
	short := false
	for i, s := range seqs {
		sizes[i], queries[i], ones[i], rows[i] = len(s.Block), s.Rows+1, 1, s.Rows
		short = short || queries[i] < sizes[i]
		tokens = append(tokens, s.Block...)
	}
	var st State[X, W]
	var bst *Batch[X, W]
	pos := 0
	if n == 1 {
		st, pos = seqs[0].State, seqs[0].Pos
	} else {
		bst = &Batch[X, W]{Ops: be, Seqs: make([]Seq[X, W], n)}
		for i, s := range seqs {
			bst.Seqs[i] = Seq[X, W]{State: s.State, Pos: s.Pos, Rows: sizes[i]}
		}
		st = bst
	}
	x := be.Embed(d.Embed, tokens)
	// The parser refuses a scale of 0, so 0 here is an arch built without one: no scaling.
	if a.EmbedScale != 0 && a.EmbedScale != 1 {
		x = be.Scale(x, float32(a.EmbedScale))
	}
	qsizes := sizes
	// The layer whose queries take the proposed rows alone: the last, or for a narrow draft the first.
	pickAt := len(d.Layers) - 1
	if n == 1 && seqs[0].Narrow && !d.convolved() {
		pickAt = 0
	}
	for i := range d.Layers {
		ly := &d.Layers[i]
		w := ly.Attn
		h := be.Norm(x, ly.InNorm, eps)
		var post X
		if ly.AttnConv != nil {
			h, post = convPrepare(be, ly.AttnConv, h, sizes)
		}
		hq := h
		if i == pickAt && short {
			hq, x = pick(be, h, sizes, zeros, queries), pick(be, x, sizes, zeros, queries)
			if ly.AttnConv != nil {
				post = pick(be, post, sizes, zeros, queries)
			}
			qsizes = queries
			if bst != nil {
				bst.Queries = queries
			}
		}
		q := be.Norm(be.Linear(w.Q, hq), w.QNorm, eps)
		k := be.Norm(be.Linear(w.K, h), w.KNorm, eps)
		v := be.Linear(w.V, h)
		o := be.Linear(w.O, st.Attention(i, q, k, v, Attend[W]{Pos: pos, HeadDim: a.HeadDim, Rope: d.Rope, Causal: ly.Causal, Window: ly.Window}))
		if ly.AttnConv != nil {
			o = groupConv(be, o, post, ly.AttnConv.Post, ly.AttnConv.Taps, qsizes)
		}
		x = be.Add(x, o)
		m := be.Norm(x, ly.PostNorm, eps)
		if ly.MLPConv != nil {
			m, post = convPrepare(be, ly.MLPConv, m, qsizes)
		}
		f := FeedForward(be, ly.MLP, m)
		if ly.MLPConv != nil {
			f = groupConv(be, f, post, ly.MLPConv.Post, ly.MLPConv.Taps, qsizes)
		}
		x = be.Add(x, f)
	}
	hidden := be.Norm(pick(be, x, qsizes, ones, rows), d.Norm, eps)
	return DraftLogits(be, d.Arch, be.Linear(d.Head, hidden)), hidden
}

// convolved reports whether any layer wraps its sublayers in DFlash2's convolutions (which mix a block's
// slots, so every slot runs every layer).
func (d *Drafter[W]) convolved() bool {
	for i := range d.Layers {
		if d.Layers[i].AttnConv != nil || d.Layers[i].MLPConv != nil {
			return true
		}
	}
	return false
}

// DraftLogits applies compute_logits' transforms to a drafter's raw logits: × output_multiplier, then the soft
// cap c·tanh(logits/c) when final_logit_softcapping c > 0. Both are monotonic (a positive multiplier), so
// they never change a greedy DFlash draft, but they set the unary scores DFlash2's selector adds to its
// pairwise terms.
func DraftLogits[X any, W comparable](be DraftBackend[X, W], a hfmodel.DrafterArch, x X) X {
	if m := a.OutputMultiplier; m != 0 && m != 1 {
		x = be.Scale(x, float32(m))
	}
	if c := a.LogitSoftcap; c > 0 {
		x = be.Softcap(x, float32(c))
	}
	return x
}

// NoiseBlock is the drafter's input for one round: the anchor, then n−1 mask tokens.
func NoiseBlock(anchor, mask ports.Token, n int) []ports.Token {
	b := make([]ports.Token, n)
	b[0] = anchor
	for i := 1; i < n; i++ {
		b[i] = mask
	}
	return b
}
