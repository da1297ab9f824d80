package dflash

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/ports"
)

// contextChunk bounds how many context rows are projected at once, so a long prompt never needs a
// rows × taps·H scratch matrix.
const contextChunk = 128

// Session is one sequence's drafter state: per layer the K/V of the committed context positions (RoPE'd at
// their absolute positions). It is not safe for concurrent use.
type Session struct {
	d      *Drafter
	n      int         // committed context positions projected into the caches
	k, v   [][]float32 // per layer: n·Hkv·d values
	closed bool
	// queued holds context rows (taps, nq rows) given by context-only calls (bs = 1) and not yet projected:
	// they are projected together by the next drafting call, as one multi-row product instead of one
	// matrix–vector product per plain-decoding round.
	queued []float32
	nq     int

	// scratch, grown on demand
	c, h, q, kb, vb, att, x, tmp, g, u, logits, scores []float32
	cos, sin                                           []float32
}

var _ ports.DraftSession = (*Session)(nil)

// Len returns the number of committed context positions cached (queued rows included).
func (s *Session) Len() int { return s.n + s.nq }

// Crop truncates the context cache to n positions.
func (s *Session) Crop(n int) error {
	if s.closed {
		return errors.New("dflash: session is closed")
	}
	if n < 0 || n > s.Len() {
		return fmt.Errorf("dflash: crop to %d outside 0..%d", n, s.Len())
	}
	if n >= s.n {
		width := len(s.d.arch.TapLayers) * s.d.arch.HiddenSize
		s.nq = n - s.n
		s.queued = s.queued[:s.nq*width]
		return nil
	}
	s.queued, s.nq = s.queued[:0], 0
	kvw := s.d.arch.NumKVHeads * s.d.arch.HeadDim
	for i := range s.k {
		s.k[i] = s.k[i][:n*kvw]
		s.v[i] = s.v[i][:n*kvw]
	}
	s.n = n
	return nil
}

// Close releases the session's caches.
func (s *Session) Close() error {
	s.closed = true
	s.k, s.v, s.queued = nil, nil, nil
	return nil
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// Draft appends newCtx's rows to the context cache, then drafts bs−1 tokens for the block [anchor, mask…]
// at positions Len()..Len()+bs−1. bs = 1 only appends the context. A block shorter than the trained one runs
// the trained block and returns its first bs−1 proposals, unless the drafter was loaded with
// Options.ShrinkBlocks.
func (s *Session) Draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int) (ports.Proposal, error) {
	if s.closed {
		return ports.Proposal{}, errors.New("dflash: session is closed")
	}
	a := &s.d.arch
	// bs = 1 only appends context (the decoder feeds queued context that way); it drafts nothing.
	if bs < 1 || bs > a.BlockSize {
		return ports.Proposal{}, fmt.Errorf("dflash: block size %d outside 1..%d", bs, a.BlockSize)
	}
	if anchor < 0 || int(anchor) >= s.d.vocab {
		return ports.Proposal{}, fmt.Errorf("dflash: anchor token %d outside the vocabulary of %d", anchor, s.d.vocab)
	}
	if err := ctx.Err(); err != nil {
		return ports.Proposal{}, err
	}
	width := len(a.TapLayers) * a.HiddenSize
	var data []float32
	var rows int
	if newCtx != nil && newCtx.Rows() > 0 {
		ft, ok := newCtx.(FloatTaps)
		if !ok {
			return ports.Proposal{}, fmt.Errorf("dflash: context taps of type %T are not CPU float32 taps", newCtx)
		}
		var w int
		data, rows, w = ft.Float32()
		if w != width {
			return ports.Proposal{}, fmt.Errorf("dflash: context taps are %d wide, want %d (%d taps × hidden %d)", w, width, len(a.TapLayers), a.HiddenSize)
		}
		if len(data) < rows*width {
			return ports.Proposal{}, fmt.Errorf("dflash: context taps hold %d values for %d rows of %d", len(data), rows, width)
		}
		data = data[:rows*width]
	}
	if bs == 1 {
		// Context only: queue the rows (newCtx is only readable during the call) for the next drafting call.
		s.queued = append(s.queued, data...)
		s.nq += rows
		return ports.Proposal{Tokens: []ports.Token{}}, nil
	}
	if s.nq > 0 {
		s.project(s.queued, s.nq, width)
		s.queued, s.nq = s.queued[:0], 0
	}
	s.project(data, rows, width)
	nb := a.BlockSize
	if s.d.shrink {
		nb = bs
	}
	toks, err := s.draftBlock(anchor, nb, bs-1)
	if err != nil {
		return ports.Proposal{}, err
	}
	return ports.Proposal{Tokens: toks}, nil
}

// project appends rows context rows of data (rows × width) in chunks of at most contextChunk rows.
func (s *Session) project(data []float32, rows, width int) {
	for lo := 0; lo < rows; lo += contextChunk {
		hi := min(rows, lo+contextChunk)
		s.appendContext(data[lo*width:hi*width], hi-lo)
	}
}

// appendContext projects m context rows (c = hidden_norm(fc(f))) and appends every layer's RoPE'd, k-normed
// K and V at positions Len()..Len()+m−1. Context rows skip input_layernorm (MODEL-REFERENCE §5.2).
func (s *Session) appendContext(f []float32, m int) {
	d := s.d
	a := &d.arch
	H, hd := a.HiddenSize, a.HeadDim
	kvw := a.NumKVHeads * hd
	s.c = grow(s.c, m*H)
	d.fc.Forward(s.c, f, m)
	kernel.RMSNorm(s.c, s.c, d.hidNorm, d.eps)
	s.kb = grow(s.kb, m*kvw)
	s.vb = grow(s.vb, m*kvw)
	s.ropeTable(m, s.n)
	for li := range d.layers {
		l := &d.layers[li]
		l.k.Forward(s.kb, s.c, m)
		l.v.Forward(s.vb, s.c, m)
		kernel.RMSNorm(s.kb, s.kb, l.kNorm, d.eps)
		s.ropeRows(s.kb, m, a.NumKVHeads)
		s.k[li] = append(s.k[li], s.kb...)
		s.v[li] = append(s.v[li], s.vb...)
	}
	s.n += m
}

// ropeTable fills s.cos/s.sin with the RoPE tables of rows positions pos0.. (Dims/2 values per row), once
// per call: every layer rotates the same positions, queries and keys alike.
func (s *Session) ropeTable(rows, pos0 int) {
	half := s.d.rope.Dims / 2
	s.cos = grow(s.cos, rows*half)
	s.sin = grow(s.sin, rows*half)
	for r := range rows {
		s.d.rope.Table(s.cos[r*half:(r+1)*half], s.sin[r*half:(r+1)*half], pos0+r)
	}
}

// ropeRows rotates rows×heads head vectors of x, row r with row r of the table ropeTable filled.
func (s *Session) ropeRows(x []float32, rows, heads int) {
	hd, half := s.d.arch.HeadDim, s.d.rope.Dims/2
	for r := range rows {
		cos, sin := s.cos[r*half:(r+1)*half], s.sin[r*half:(r+1)*half]
		for h := range heads {
			off := (r*heads + h) * hd
			s.d.rope.Apply(x[off:off+hd], cos, sin)
		}
	}
}

// draftBlock runs the noise block of bs slots through the layers and returns the argmax tokens of slots
// 1..rows (rows ≤ bs−1; only those rows go through the final norm and the LM head).
func (s *Session) draftBlock(anchor ports.Token, bs, rows int) ([]ports.Token, error) {
	d := s.d
	a := &d.arch
	H, hd := a.HiddenSize, a.HeadDim
	qw, kvw := a.NumHeads*hd, a.NumKVHeads*hd
	I := a.IntermediateSize
	block := make([]ports.Token, bs)
	block[0] = anchor
	for i := 1; i < bs; i++ {
		block[i] = a.MaskToken
	}
	s.x = grow(s.x, bs*H)
	if err := d.target.EmbedTokens(s.x, block); err != nil {
		return nil, fmt.Errorf("dflash: embed block: %w", err)
	}
	if a.EmbedScale != 0 && a.EmbedScale != 1 {
		kernel.Scale(s.x, float32(a.EmbedScale))
	}
	s.h = grow(s.h, bs*H)
	s.q = grow(s.q, bs*qw)
	s.kb = grow(s.kb, bs*kvw)
	s.vb = grow(s.vb, bs*kvw)
	s.att = grow(s.att, bs*qw)
	s.tmp = grow(s.tmp, bs*H)
	s.g = grow(s.g, bs*I)
	s.u = grow(s.u, bs*I)
	s.ropeTable(bs, s.n)
	for li := range d.layers {
		l := &d.layers[li]
		// Every slot's K and V feed every layer's attention, but after the last layer only the anchor and
		// the returned rows are read: there, queries, attention output and MLP run on those rows alone
		// (each row's result is the same as in the full computation).
		nq := bs
		if li == len(d.layers)-1 {
			nq = rows + 1
		}
		kernel.RMSNorm(s.h, s.x, l.inNorm, d.eps)
		l.q.Forward(s.q[:nq*qw], s.h[:nq*H], nq)
		l.k.Forward(s.kb, s.h, bs)
		l.v.Forward(s.vb, s.h, bs)
		kernel.RMSNorm(s.q[:nq*qw], s.q[:nq*qw], l.qNorm, d.eps)
		kernel.RMSNorm(s.kb, s.kb, l.kNorm, d.eps)
		s.ropeRows(s.q, nq, a.NumHeads)
		s.ropeRows(s.kb, bs, a.NumKVHeads)
		s.attend(li, nq, bs)
		l.o.Forward(s.tmp[:nq*H], s.att[:nq*qw], nq)
		kernel.Add(s.x[:nq*H], s.tmp[:nq*H])
		kernel.RMSNorm(s.h[:nq*H], s.x[:nq*H], l.postNorm, d.eps)
		l.gate.Forward(s.g[:nq*I], s.h[:nq*H], nq)
		l.up.Forward(s.u[:nq*I], s.h[:nq*H], nq)
		kernel.SwiGLU(s.g[:nq*I], s.g[:nq*I], s.u[:nq*I])
		l.down.Forward(s.tmp[:nq*H], s.g[:nq*I], nq)
		kernel.Add(s.x[:nq*H], s.tmp[:nq*H])
	}
	kernel.RMSNorm(s.h[:rows*H], s.x[H:(rows+1)*H], d.norm, d.eps)
	s.logits = grow(s.logits, rows*d.vocab)
	if err := d.target.LMHead(s.logits, s.h[:rows*H], rows); err != nil {
		return nil, fmt.Errorf("dflash: lm head: %w", err)
	}
	out := make([]ports.Token, rows)
	for r := range rows {
		out[r] = ports.Token(kernel.Argmax(s.logits[r*d.vocab : (r+1)*d.vocab]))
	}
	return out, nil
}

// attend computes, for the first qrows block queries (of bs slots), softmax attention over [visible cached context keys ; visible block
// keys], writing s.att. Full-attention layers see everything (no causal mask: the block is denoised jointly).
// As in the authors' reference, sliding layers see keys with |query position − key position| < W, and causal
// layers (sliding ones by default) see block keys only up to their own slot. Heads are split across the pool;
// each head's output is computed by one goroutine in index order, so results do not depend on the worker
// count.
func (s *Session) attend(li, qrows, bs int) {
	d := s.d
	a := &d.arch
	hd := a.HeadDim
	nq, nkv := a.NumHeads, a.NumKVHeads
	group := nq / nkv
	kc, vc := s.k[li], s.v[li]
	n := s.n
	window, causal := d.layers[li].window, d.layers[li].causal
	scale := float32(1 / math.Sqrt(float64(hd)))
	// One score row per head, reused across calls: no allocation per round, layer or worker.
	s.scores = grow(s.scores, nq*(n+bs))
	hidden := func(i, j int) bool { // block key j is not visible to block query i
		return (causal && j > i) || (window > 0 && j-i >= window) || (window > 0 && i-j >= window)
	}
	d.pool.For(nq, 1, func(lo, hi int) {
		for h := lo; h < hi; h++ {
			g := h / group
			scores := s.scores[h*(n+bs) : (h+1)*(n+bs)]
			for i := range qrows {
				qv := s.q[(i*nq+h)*hd : (i*nq+h+1)*hd]
				first := 0
				if window > 0 {
					first = max(0, n+i-window+1)
				}
				sc := scores[:0]
				for j := first; j < n; j++ {
					sc = append(sc, kernel.Dot(qv, kc[(j*nkv+g)*hd:(j*nkv+g+1)*hd])*scale)
				}
				for j := range bs {
					if !hidden(i, j) {
						sc = append(sc, kernel.Dot(qv, s.kb[(j*nkv+g)*hd:(j*nkv+g+1)*hd])*scale)
					}
				}
				kernel.Softmax(sc)
				// The weighted sum walks the visible keys in the same order as the scores above.
				out := s.att[(i*nq+h)*hd : (i*nq+h+1)*hd]
				clear(out)
				k := 0
				for j := first; j < n; j++ {
					axpy(out, sc[k], vc[(j*nkv+g)*hd:(j*nkv+g+1)*hd])
					k++
				}
				for j := range bs {
					if !hidden(i, j) {
						axpy(out, sc[k], s.vb[(j*nkv+g)*hd:(j*nkv+g+1)*hd])
						k++
					}
				}
			}
		}
	})
}

// axpy adds p·v to out element by element (the same float32 operations, in the same order, as before).
func axpy(out []float32, p float32, v []float32) {
	for t := range out {
		out[t] += p * v[t]
	}
}
