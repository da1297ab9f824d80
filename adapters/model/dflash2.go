package model

import (
	"fmt"
	"math"

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

// convPrepare is the reference's prepare: dyn = Proj(h) viewed [T, 2, taps, G]; side 0 convolves h, side 1
// (returned) is what finish applies to the sublayer's output. h holds parts of sizes[i] rows (one per
// sequence of a batched draft), each convolved on its own.
func convPrepare[X any, W comparable](be DraftBackend[X, W], c *DynConv[W], h X, sizes []int) (X, X) {
	kg := c.Taps * c.Groups
	d := be.Split(be.Linear(c.Proj, h), 1, kg, kg)
	return groupConv(be, h, d[0], c.Pre, c.Taps, sizes), d[1]
}

// groupConv is GroupConv on each part of x and dyn (sizes[i] rows each), stacked.
func groupConv[X any, W comparable](be DraftBackend[X, W], x, dyn X, base W, taps int, sizes []int) X {
	if len(sizes) == 1 {
		return be.GroupConv(x, dyn, base, taps)
	}
	return segments(be, sizes, func(_, lo, hi int) X { return be.GroupConv(be.Rows(x, lo, hi), be.Rows(dyn, lo, hi), base, taps) })
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

// selectPath is the selector's walk over rows positions with k candidates each: cand and unary (rows·k) are
// each position's candidates and their logits, largest first; hp (rows·rank) is hidden_projection of the
// positions' hidden states; pred holds the predecessor codebook rows of the anchor (row 0) and of every
// candidate of positions 0..rows−2 (row 1 + t·k + j for candidate j of position t); succ (rows·k·rank) the
// successor codebook rows of every candidate. Position t scores candidate j as unary + Σ_r
// (pred[prev][r]·hp[t][r])·succ[t, j][r], summed over r in order in float32; pick chooses among the scores
// (greedyPick at T = 0), and the choice is position t+1's predecessor.
func selectPath(cand []ports.Token, unary, hp, pred, succ []float32, rows, k, rank int, pick func(t int, scores []float32) int) []ports.Token {
	out := make([]ports.Token, rows)
	scores := make([]float32, k)
	prev := pred[:rank]
	for t := range rows {
		h := hp[t*rank : (t+1)*rank]
		for j := range k {
			s := succ[(t*k+j)*rank : (t*k+j+1)*rank]
			var dot float32
			for r := range rank {
				dot += prev[r] * h[r] * s[r]
			}
			scores[j] = unary[t*k+j] + dot
		}
		best := pick(t, scores)
		out[t] = cand[t*k+best]
		if t+1 < rows {
			row := 1 + t*k + best
			prev = pred[row*rank : (row+1)*rank]
		}
	}
	return out
}

// greedyPick is the walk at T = 0: the best score, ties to the earlier candidate (the larger logit, then the
// lower id).
func greedyPick(_ int, scores []float32) int {
	best := 0
	for j, s := range scores {
		if s > scores[best] {
			best = j
		}
	}
	return best
}

// Propose runs the noise block (Block) and picks the drafted tokens of slots 1..rows: the greedy argmax of
// each row's logits (DFlash), or the candidate selector's greedy path from the anchor (DFlash2). It returns
// the logits (compute_logits' transforms applied) with the tokens. narrow is DraftSeq.Narrow.
func Propose[X any, W comparable](d *Drafter[W], be DraftBackend[X, W], st State[X, W], block []ports.Token, pos, rows int, narrow bool) (X, []ports.Token) {
	logits, toks, _ := ProposeBatch(d, be, []DraftSeq[X, W]{{State: st, Pos: pos, Block: block, Rows: rows, Narrow: narrow}})
	return logits[0], toks[0]
}

// ProposeSampled is Propose at temperature T > 0 (docs/model-math.md#dflash2): DFlash2's walk draws each slot's
// token from q_t = softmax(score/T) over that slot's candidates, with one uniform from rnd per slot, and
// returns the q_t it drew from (the proposal verification divides by). A DFlash drafter has no distribution
// of its own: it proposes its greedy tokens, dists nil (point masses).
func ProposeSampled[X any, W comparable](d *Drafter[W], be DraftBackend[X, W], st State[X, W], block []ports.Token, pos, rows int, temperature float64, rnd ports.Rand) (X, []ports.Token, []ports.Distribution) {
	logits, toks, dists := ProposeBatch(d, be, []DraftSeq[X, W]{{State: st, Pos: pos, Block: block, Rows: rows, Temperature: temperature, Rand: rnd}})
	return logits[0], toks[0], dists[0]
}

// ProposeBatch is Propose (ProposeSampled for a sequence with a Rand) for several sequences' noise blocks in
// one pass: every row-wise product and the host reads run once over all of them, the attention, the
// convolutions and the selector's walk per sequence. It returns each sequence's logits, tokens and
// distributions; a batch of one runs exactly the solo call's ops. A backend whose graph failed reads back
// nothing: then no tokens are proposed (nil), and the backend reports its error.
func ProposeBatch[X any, W comparable](d *Drafter[W], be DraftBackend[X, W], seqs []DraftSeq[X, W]) ([]X, [][]ports.Token, [][]ports.Distribution) {
	all, hidden := blocks(d, be, seqs)
	n := len(seqs)
	logits, toks, dists := make([]X, n), make([][]ports.Token, n), make([][]ports.Distribution, n)
	total := 0
	for i, s := range seqs {
		logits[i] = all
		if n > 1 {
			logits[i] = be.Rows(all, total, total+s.Rows)
		}
		total += s.Rows
	}
	s := d.Selector
	if s == nil {
		ids, _ := be.TopK(all, 1)
		if len(ids) != total {
			return logits, toks, dists
		}
		off := 0
		for i, q := range seqs {
			toks[i] = ids[off : off+q.Rows : off+q.Rows]
			off += q.Rows
		}
		return logits, toks, dists
	}
	k := s.TopK
	cand, unary := be.TopK(all, k)
	if len(cand) != total*k || len(unary) != total*k {
		return logits, toks, dists
	}
	hp := be.Host(be.Linear(s.Proj, hidden))
	// Each sequence's predecessors: its anchor, then every candidate of its slots but the last.
	prevs := make([]ports.Token, 0, total*k)
	off := 0
	for _, q := range seqs {
		prevs = append(prevs, q.Block[0])
		prevs = append(prevs, cand[off*k:(off+q.Rows-1)*k]...)
		off += q.Rows
	}
	pred := be.Host(be.Embed(s.Pred, prevs))
	succ := be.Host(be.Embed(s.Succ, cand))
	if len(hp) != total*s.Rank || len(pred) != len(prevs)*s.Rank || len(succ) != total*k*s.Rank {
		return logits, toks, dists
	}
	off, poff := 0, 0
	for i, q := range seqs {
		r, np := q.Rows, 1+(q.Rows-1)*k
		c := cand[off*k : (off+r)*k]
		pickFn := greedyPick
		if q.Rand != nil {
			ds := make([]ports.Distribution, r)
			rnd, temp := q.Rand, q.Temperature
			pickFn = func(t int, scores []float32) int {
				cd := &CandidateDist{Tokens: c[t*len(scores) : (t+1)*len(scores)], Probs: softmaxT(scores, temp)}
				ds[t] = cd
				return cd.index(rnd.Float64())
			}
			dists[i] = ds
		}
		toks[i] = selectPath(c, unary[off*k:(off+r)*k], hp[off*s.Rank:(off+r)*s.Rank], pred[poff*s.Rank:(poff+np)*s.Rank], succ[off*k*s.Rank:(off+r)*k*s.Rank], r, k, s.Rank, pickFn)
		off += r
		poff += np
	}
	return logits, toks, dists
}

// softmaxT is softmax(scores/T) in float64.
func softmaxT(scores []float32, temperature float64) []float64 {
	m := math.Inf(-1)
	for _, s := range scores {
		if v := float64(s); v > m {
			m = v
		}
	}
	q := make([]float64, len(scores))
	var z float64
	for j, s := range scores {
		q[j] = math.Exp((float64(s) - m) / temperature)
		if q[j] != q[j] { // a NaN score (broken weights) gets no mass
			q[j] = 0
		}
		z += q[j]
	}
	for j := range q {
		q[j] /= z
	}
	return q
}

// CandidateDist is a DFlash2 slot's proposal distribution: Probs[j] for Tokens[j] (distinct ids), 0 elsewhere.
type CandidateDist struct {
	Tokens []ports.Token
	Probs  []float64
}

var _ ports.Distribution = (*CandidateDist)(nil)

// Prob returns q(tok).
func (c *CandidateDist) Prob(tok ports.Token) float64 {
	for j, t := range c.Tokens {
		if t == tok {
			return c.Probs[j]
		}
	}
	return 0
}

// Sample draws by inverse CDF over the candidates in order, exclude removed and the rest renormalised.
func (c *CandidateDist) Sample(u float64, exclude ports.Token) ports.Token {
	var z float64
	for j, p := range c.Probs {
		if c.Tokens[j] != exclude {
			z += p
		}
	}
	if !(z > 0) {
		return ports.NoToken
	}
	target, acc, last := u*z, 0.0, -1
	for j, p := range c.Probs {
		if c.Tokens[j] == exclude || !(p > 0) {
			continue
		}
		acc += p
		last = j
		if target < acc {
			return c.Tokens[j]
		}
	}
	return c.Tokens[last]
}

// index is Sample without exclusion, as a candidate index.
func (c *CandidateDist) index(u float64) int {
	tok := c.Sample(u, ports.NoToken)
	for j, t := range c.Tokens {
		if t == tok {
			return j
		}
	}
	return 0
}
