package model

import (
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// Drafting are the operations a drafter's proposal needs beside Backend: DFlash2's grouped dynamic
// convolution, compute_logits' soft cap, and the two reads that bring a pass's results to the host (the top
// candidates of each row, and small activations the candidate selector walks on the host).
type Drafting[X any, W comparable] interface {
	// GroupConv is DFlash2's grouped dynamic causal convolution over the rows (block positions) of x [T, H]:
	// out[t, c] = Σ_{j < taps, t−j ≥ 0} (base[j·H + c] + dyn[t, j·G + c/(H/G)]) · x[t−j, c], with dyn
	// [T, taps·G] (one scalar per tap and channel group, G groups of H/G consecutive channels) and base
	// taps·H values. Per tap the base and dynamic terms are added to the sum one after the other (the
	// reference's addcmul), taps in order.
	GroupConv(x, dyn X, base W, taps int) X
	// Softcap is c·tanh(x/c) elementwise.
	Softcap(x X, c float32) X
	// TopK reads, for every row of x [T, V], the k largest values and their column ids to the host, largest
	// first, ties to the lower id: ids and vals are T·k long, row-major.
	TopK(x X, k int) (ids []ports.Token, vals []float32)
	// Host reads x to the host as float32, row-major.
	Host(x X) []float32
}

// DraftBackend is everything a drafter's pass computes with.
type DraftBackend[X any, W comparable] interface {
	Backend[X, W]
	Drafting[X, W]
}

// DynConv is one DFlash2 GroupedDynamicCausalConv: Proj (kernel_projection, [2·taps·G, H]) predicts per
// position the dynamic kernels of both sides from the sublayer's input; Pre and Post are the base kernels
// (base_kernel[0] and [1], taps·H values each) of the convolution before the sublayer (prepare) and after it
// (finish).
type DynConv[W comparable] struct {
	Proj, Pre, Post W
	Taps, Groups    int
}

// convPrepare is DynConv.prepare for a concrete X: dyn = Proj(h) viewed [T, 2, taps, G]; side 0 convolves h.
func convPrepare[X any, W comparable](be DraftBackend[X, W], c *DynConv[W], h X) (X, X) {
	kg := c.Taps * c.Groups
	d := be.Split(be.Linear(c.Proj, h), 1, kg, kg)
	return be.GroupConv(h, d[0], c.Pre, c.Taps), d[1]
}

// Selector is DFlash2's CandidateSelector: Proj (hidden_projection, [rank, H]) and the predecessor and
// successor codebooks ([V, rank], looked up by row like an embedding).
type Selector[W comparable] struct {
	Proj, Pred, Succ W
	Rank, TopK       int
}

// dynConv loads the convolution at p ("layers.i.attention_conv" or "layers.i.mlp_conv").
func (l *loader[W]) dynConv(p string, taps, groups, h int) (*DynConv[W], error) {
	c := &DynConv[W]{Taps: taps, Groups: groups}
	var err error
	if c.Proj, err = l.linear(p+".kernel_projection", 2*taps*groups, h); err != nil {
		return nil, err
	}
	v, err := l.values(p+".base_kernel", 2*taps*h)
	if err != nil {
		return nil, err
	}
	if c.Pre, err = l.be.Vector(v[:taps*h], false); err != nil {
		return nil, err
	}
	if c.Post, err = l.be.Vector(v[taps*h:], false); err != nil {
		return nil, err
	}
	return c, nil
}

// selector loads the candidate selector. Published checkpoints store the codebooks without a .weight suffix
// (the reference maps them on load); conversions may add it: either is read, both is an error.
func (l *loader[W]) selector(rank, topK, vocab, h int) (*Selector[W], error) {
	s := &Selector[W]{Rank: rank, TopK: topK}
	var err error
	if s.Proj, err = l.linear("candidate_selector.hidden_projection", rank, h); err != nil {
		return nil, err
	}
	book := func(name string) (W, error) {
		n := "candidate_selector." + name
		switch bare, suffixed := l.ck.Has(n), l.ck.Has(n+".weight"); {
		case bare && suffixed:
			var zero W
			return zero, fmt.Errorf("tensors %q and %q are both stored", n, n+".weight")
		case suffixed:
			return l.be.Linear(n+".weight", n, vocab, rank)
		}
		return l.be.Linear(n, n, vocab, rank)
	}
	if s.Pred, err = book("predecessor_codebook"); err != nil {
		return nil, err
	}
	if s.Succ, err = book("successor_codebook"); err != nil {
		return nil, err
	}
	return s, nil
}

// selectPath is the selector's greedy walk (T = 0) over rows positions with k candidates each: cand and
// unary (rows·k) are each position's candidates and their logits, largest first; hp (rows·rank) is
// hidden_projection of the positions' hidden states; pred holds the predecessor codebook rows of the anchor
// (row 0) and of every candidate of positions 0..rows−2 (row 1 + t·k + j for candidate j of position t);
// succ (rows·k·rank) the successor codebook rows of every candidate. Position t scores candidate j as
// unary + Σ_r (pred[prev][r]·hp[t][r])·succ[t, j][r], summed over r in order in float32, and takes the
// best (ties to the earlier candidate: the larger logit, then the lower id); the choice is position t+1's
// predecessor.
func selectPath(cand []ports.Token, unary, hp, pred, succ []float32, rows, k, rank int) []ports.Token {
	out := make([]ports.Token, rows)
	prev := pred[:rank]
	for t := range rows {
		h := hp[t*rank : (t+1)*rank]
		best, bestScore := 0, float32(0)
		for j := range k {
			s := succ[(t*k+j)*rank : (t*k+j+1)*rank]
			var dot float32
			for r := range rank {
				dot += prev[r] * h[r] * s[r]
			}
			score := unary[t*k+j] + dot
			if j == 0 || score > bestScore {
				best, bestScore = j, score
			}
		}
		out[t] = cand[t*k+best]
		if t+1 < rows {
			row := 1 + t*k + best
			prev = pred[row*rank : (row+1)*rank]
		}
	}
	return out
}

// Propose runs the noise block (Block) and picks the drafted tokens of slots 1..rows: the greedy argmax of
// each row's logits (DFlash), or the candidate selector's greedy path from the anchor (DFlash2). It returns
// the logits (compute_logits' transforms applied) with the tokens.
func Propose[X any, W comparable](d *Drafter[W], be DraftBackend[X, W], st State[X, W], block []ports.Token, pos, rows int) (X, []ports.Token) {
	logits, hidden := block2(d, be, st, block, pos, rows)
	s := d.Selector
	if s == nil {
		ids, _ := be.TopK(logits, 1)
		return logits, ids
	}
	k := s.TopK
	cand, unary := be.TopK(logits, k)
	hp := be.Host(be.Linear(s.Proj, hidden))
	prevs := make([]ports.Token, 1, 1+(rows-1)*k)
	prevs[0] = block[0]
	prevs = append(prevs, cand[:(rows-1)*k]...)
	pred := be.Host(be.Embed(s.Pred, prevs))
	succ := be.Host(be.Embed(s.Succ, cand))
	return logits, selectPath(cand, unary, hp, pred, succ, rows, k, s.Rank)
}
