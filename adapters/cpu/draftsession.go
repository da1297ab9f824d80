package cpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// contextChunk bounds how many context rows are projected at once, so a long prompt never needs a
// rows × taps·H scratch matrix.
const contextChunk = 128

// DraftSession is one sequence's drafter state: per layer the K/V of the committed context positions
// (RoPE'd at their absolute positions). It is not safe for concurrent use.
type DraftSession struct {
	d      *Drafter
	n      int // committed context positions projected into the caches
	kv     []*kvCache
	closed bool
	// queued holds context rows (taps, nq rows) given by context-only calls (bs = 1) and not yet projected:
	// they are projected together by the next drafting call, as one multi-row product instead of one
	// matrix–vector product per plain-decoding round.
	queued []float32
	nq     int
	// logits are the last drafted block's logits (rows × V), for tests and reference checks; probs is
	// DraftTop's scratch for their softmax (rowProbs).
	logits []float32
	probs  []float32
	mem    arena // the activations of the latest Draft
}

var errDraftClosed = errors.New("cpu drafter: session is closed")

// Len returns the number of committed context positions cached (queued rows included).
func (s *DraftSession) Len() int { return s.n + s.nq }

// Crop truncates the context cache to n positions.
func (s *DraftSession) Crop(n int) error {
	if s.closed {
		return errDraftClosed
	}
	if n < 0 || n > s.Len() {
		return fmt.Errorf("cpu drafter: crop to %d outside 0..%d", n, s.Len())
	}
	a := &s.d.m.Arch
	if n >= s.n {
		width := len(a.TapLayers) * a.HiddenSize
		s.nq = n - s.n
		s.queued = s.queued[:s.nq*width]
		return nil
	}
	s.queued, s.nq = s.queued[:0], 0
	kvw := a.NumKVHeads * a.HeadDim
	for _, c := range s.kv {
		c.trim(n, kvw)
	}
	s.n = n
	return nil
}

// Close releases the session's caches.
func (s *DraftSession) Close() error {
	s.closed = true
	s.kv, s.queued = nil, nil
	s.mem.release()
	s.mem = arena{}
	return nil
}

// Draft appends newCtx's rows to the context cache, then drafts bs−1 tokens for the block [anchor, mask…]
// at positions Len()..Len()+bs−1. bs = 1 only appends the context. Exactly bs slots are drafted, whatever
// the drafter's configured block size (as the authors' loop does); bs is bounded only by the target's context
// length. newCtx must expose its rows on the host (ports.HostTaps).
func (s *DraftSession) Draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int) (ports.Proposal, error) {
	return s.draft(ctx, anchor, newCtx, bs, 0, nil)
}

// DraftSampled is Draft at temperature > 0 (ports.SamplingDrafter): a DFlash2 drafter's selector draws each
// slot from its candidates' softmax(score/temperature) with uniforms from rnd and reports those
// distributions; a DFlash drafter drafts greedily.
func (s *DraftSession) DraftSampled(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, temperature float64, rnd ports.Rand) (ports.Proposal, error) {
	if err := model.CheckSampledDraft(temperature, rnd); err != nil {
		return ports.Proposal{}, fmt.Errorf("cpu drafter: %w", err)
	}
	return s.draft(ctx, anchor, newCtx, bs, temperature, rnd)
}

var _ ports.TopDrafter = (*DraftSession)(nil)

// DraftTop is Draft that also fills Proposal.Top (ports.TopDrafter): each proposed slot's drafted token, then
// the slot's other most probable tokens under the drafter's logits (compute_logits' transforms applied),
// top.K in all, with their softmax probabilities (model.TopCandidates). Only the first top.Slots slots are
// proposed: the block's last layer runs its queries, attention output and MLP on those rows alone and the LM
// head reads only them (model.Block), so a small tree pays for the slots it can reach, not for the block.
func (s *DraftSession) DraftTop(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, top ports.TopRequest) (ports.Proposal, error) {
	if top.K < 1 {
		// Refused before anything is appended, like Draft's own refusals.
		return ports.Proposal{}, fmt.Errorf("cpu drafter: top-k %d must be ≥ 1", top.K)
	}
	p, err := s.draftRows(ctx, anchor, newCtx, bs, top.SlotsOf(bs), 0, nil, top.Narrow)
	if err != nil {
		return p, err
	}
	if bs == 1 {
		p.Top = [][]ports.Candidate{}
		return p, nil
	}
	if cap(s.probs) < len(s.logits) {
		s.probs = make([]float32, len(s.logits))
	}
	s.probs = s.probs[:len(s.logits)]
	cands, err := model.TopCandidatesWith(s.logits, s.d.t.m.Arch.Vocab, p.Tokens, top.K, s.rowProbs)
	if err != nil {
		return ports.Proposal{}, fmt.Errorf("cpu drafter: top candidates: %w", err)
	}
	p.Top = cands
	return p, nil
}

func (s *DraftSession) draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, temperature float64, rnd ports.Rand) (ports.Proposal, error) {
	return s.draftRows(ctx, anchor, newCtx, bs, bs-1, temperature, rnd, false)
}

// draftRows is draft proposing only the first slots of the bs-slot block (1 ≤ slots ≤ bs−1), narrow as
// ports.TopRequest.Narrow.
func (s *DraftSession) draftRows(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs, slots int, temperature float64, rnd ports.Rand, narrow bool) (ports.Proposal, error) {
	data, rows, err := s.admit(anchor, newCtx, bs, temperature, rnd)
	if err != nil {
		return ports.Proposal{}, err
	}
	if err := ctx.Err(); err != nil {
		return ports.Proposal{}, err
	}
	d := s.d
	a := &d.m.Arch
	width := len(a.TapLayers) * a.HiddenSize
	if bs == 1 {
		// Context only: queue the rows (newCtx is only readable during the call) for the next drafting call.
		s.queued = append(s.queued, data...)
		s.nq += rows
		return ports.Proposal{Tokens: []ports.Token{}}, nil
	}
	s.mem.reset()
	if s.nq > 0 {
		s.project(s.queued, s.nq, width)
		s.queued, s.nq = s.queued[:0], 0
	}
	s.project(data, rows, width)
	be := ops{pool: d.t.pool, mem: &s.mem}
	st := &pass{pool: d.t.pool, mem: &s.mem, kv: s.kv}
	block := model.NoiseBlock(anchor, a.MaskToken, bs)
	var p ports.Proposal
	var logits act
	if rnd != nil {
		logits, p.Tokens, p.Dists = model.ProposeSampled(d.m, be, st, block, s.n, slots, temperature, rnd)
	} else {
		logits, p.Tokens = model.Propose(d.m, be, st, block, s.n, slots, narrow)
	}
	s.logits = append(s.logits[:0], logits.v...) // a reused buffer: logits.v may live in the arena
	return p, nil
}

// admit checks a draft call before any work (closed session, block size and its room, anchor, sampling settings when
// temperature ≠ 0 or rnd is set, the context taps' shape) and returns the context rows on the host.
func (s *DraftSession) admit(anchor ports.Token, newCtx ports.Taps, bs int, temperature float64, rnd ports.Rand) ([]float32, int, error) {
	if s.closed {
		return nil, 0, errDraftClosed
	}
	a := &s.d.m.Arch
	// bs = 1 only appends context (the decoder feeds queued context that way); it drafts nothing.
	if err := model.CheckDraft(anchor, bs, s.d.t.m.Arch.Vocab); err != nil {
		return nil, 0, fmt.Errorf("cpu drafter: %w", err)
	}
	if temperature != 0 || rnd != nil {
		if err := model.CheckSampledDraft(temperature, rnd); err != nil {
			return nil, 0, fmt.Errorf("cpu drafter: %w", err)
		}
	}
	rows := 0
	if newCtx != nil {
		rows = newCtx.Rows()
	}
	if err := model.CheckRoom(s.Len()+rows, bs, s.d.t.m.Arch.ContextLength); err != nil {
		return nil, 0, fmt.Errorf("cpu drafter: %w", err)
	}
	if rows == 0 {
		return nil, 0, nil
	}
	width := len(a.TapLayers) * a.HiddenSize
	ht, ok := newCtx.(ports.HostTaps)
	if !ok {
		return nil, 0, fmt.Errorf("cpu drafter: context taps of type %T cannot be read on the host", newCtx)
	}
	data, rows, w, err := ht.Host()
	if err != nil {
		return nil, 0, fmt.Errorf("cpu drafter: context taps: %w", err)
	}
	if w != width {
		return nil, 0, fmt.Errorf("cpu drafter: context taps are %d wide, want %d (%d taps × hidden %d)", w, width, len(a.TapLayers), a.HiddenSize)
	}
	if len(data) < rows*width {
		return nil, 0, fmt.Errorf("cpu drafter: context taps hold %d values for %d rows of %d", len(data), rows, width)
	}
	return data[:rows*width], rows, nil
}

// project appends rows context rows of data (rows × width) in chunks of at most contextChunk rows.
func (s *DraftSession) project(data []float32, rows, width int) {
	be := ops{pool: s.d.t.pool, mem: &s.mem}
	for lo := 0; lo < rows; lo += contextChunk {
		hi := min(rows, lo+contextChunk)
		model.Context(s.d.m, be, &pass{pool: s.d.t.pool, mem: &s.mem, kv: s.kv}, act{data[lo*width : hi*width], hi - lo}, s.n)
		s.n += hi - lo
	}
}

// rowProbs is model.RowProbs on the vectorized softmax (vecmath.SoftmaxFast, float32): a tree round asks for
// every drafted slot's distribution over the vocabulary, which the float64 reference took most of a millisecond
// a round for on gocoder. The probabilities only order and weigh the tree's candidates; the tokens committed do
// not depend on them.
func (s *DraftSession) rowProbs(r int, row []float32) (func(ports.Token) float64, error) {
	if _, err := model.RowMax(row); err != nil {
		return nil, err
	}
	p := s.probs[r*len(row) : (r+1)*len(row)] // row r's own part of the buffer DraftTop sized
	copy(p, row)
	vecmath.SoftmaxFast(p)
	return func(t ports.Token) float64 { return float64(p[t]) }, nil
}
