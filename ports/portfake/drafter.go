package portfake

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.Drafter      = (*Drafter)(nil)
	_ ports.DraftSession = (*DraftSession)(nil)
)

// ErrInjected is the error a scripted failure returns.
var ErrInjected = errors.New("portfake: injected failure")

// Proposer scripts a drafter: given the committed history (every committed token up to and including the
// anchor, reconstructed from the context taps the drafter was fed) and the block size, it returns the
// bs-1 proposed tokens and optionally the distributions they were drawn from.
type Proposer func(history []ports.Token, bs int) (ports.Proposal, error)

// DrafterConfig configures a scripted drafter.
type DrafterConfig struct {
	// BlockSize is the configured (default) block (default 16); Draft accepts any bs ≥ 1 up to ContextLength.
	BlockSize int
	// ContextLength is the context length a block may not pass (anchor position + bs); default 4096, the
	// fake target's default.
	ContextLength int
	// TapLayers are the target layers the drafter asks for (default {0}).
	TapLayers []int
	// Propose scripts the proposals; required.
	Propose Proposer
	// FailOn makes the FailOn-th Draft call of each session (1-based) return ErrInjected; 0 never.
	FailOn int
	// LeaveNoise makes Draft leave bs extra positions in the cache (as the Hugging Face reference does
	// before its crop), so the caller has to Crop back to the anchor position.
	LeaveNoise bool
	// Clock and DraftCost simulate drafting time.
	Clock     *Clock
	DraftCost func(bs int) time.Duration
	// Memory is what SessionBytes charges a speculating sequence's draft session (ports.MemoryPricer);
	// zero: nothing.
	Memory Price
}

// Drafter is the scripted drafter. Safe for concurrent use.
type Drafter struct {
	cfg DrafterConfig
}

// NewDrafter validates cfg and returns the drafter.
func NewDrafter(cfg DrafterConfig) (*Drafter, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	if cfg.TapLayers == nil {
		cfg.TapLayers = []int{0}
	}
	if cfg.ContextLength == 0 {
		cfg.ContextLength = 4096
	}
	var errs []error
	if cfg.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("block size %d must be ≥ 1", cfg.BlockSize))
	}
	if cfg.ContextLength < 1 {
		errs = append(errs, fmt.Errorf("context length %d must be ≥ 1", cfg.ContextLength))
	}
	if cfg.Propose == nil {
		errs = append(errs, errors.New("nil Propose"))
	}
	if cfg.FailOn < 0 {
		errs = append(errs, fmt.Errorf("FailOn %d must be ≥ 0", cfg.FailOn))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("portfake drafter: %w", err)
	}
	cfg.TapLayers = slices.Clone(cfg.TapLayers)
	return &Drafter{cfg: cfg}, nil
}

// BlockSize returns the configured block size.
func (d *Drafter) BlockSize() int { return d.cfg.BlockSize }

// TapLayers returns the configured tap layers.
func (d *Drafter) TapLayers() []int { return slices.Clone(d.cfg.TapLayers) }

// NewSession opens an empty draft session.
func (d *Drafter) NewSession(ctx context.Context) (ports.DraftSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &DraftSession{d: d}, nil
}

// DraftCall records one Draft call.
type DraftCall struct {
	Anchor    ports.Token
	CtxRows   int
	BS        int
	LenBefore int
	LenAfter  int
	Proposal  []ports.Token
	Err       error
	// Batch is the number of items of the DraftBatch the call ran in (0: a Draft of its own).
	Batch int
	// Top is a DraftTop call's request (K 0: a Draft).
	Top ports.TopRequest
}

// DraftSession keeps the context rows it was fed (its "KV cache") and checks that they arrive in position
// order. Not safe for concurrent use.
type DraftSession struct {
	d      *Drafter
	ctx    []TapRow
	noise  int // extra positions left by LeaveNoise
	calls  []DraftCall
	closed bool
}

// Len returns the number of cached positions.
func (s *DraftSession) Len() int { return len(s.ctx) + s.noise }

// Calls returns the Draft calls so far.
func (s *DraftSession) Calls() []DraftCall { return slices.Clone(s.calls) }

// Context returns the cached context tokens in position order.
func (s *DraftSession) Context() []ports.Token {
	out := make([]ports.Token, len(s.ctx))
	for i, r := range s.ctx {
		out[i] = r.Token
	}
	return out
}

// Draft appends newCtx, then asks the Proposer for bs-1 tokens after anchor.
func (s *DraftSession) Draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int) (ports.Proposal, error) {
	call := DraftCall{Anchor: anchor, BS: bs, LenBefore: s.Len()}
	prop, err := s.draft(ctx, anchor, newCtx, bs, &call, true)
	call.LenAfter, call.Err = s.Len(), err
	call.Proposal = slices.Clone(prop.Tokens)
	s.calls = append(s.calls, call)
	return prop, err
}

// draft is Draft; cost advances the simulated clock (a batch advances it once for all its items).
func (s *DraftSession) draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, call *DraftCall, cost bool) (ports.Proposal, error) {
	if s.closed {
		return ports.Proposal{}, errors.New("portfake: draft session is closed")
	}
	if err := ctx.Err(); err != nil {
		return ports.Proposal{}, fmt.Errorf("portfake draft: %w", err)
	}
	if bs < 1 {
		return ports.Proposal{}, fmt.Errorf("portfake draft: block size %d must be ≥ 1", bs)
	}
	rows := 0
	if newCtx != nil {
		rows = newCtx.Rows()
	}
	if n := s.d.cfg.ContextLength; s.Len()+rows+bs > n {
		return ports.Proposal{}, fmt.Errorf("portfake draft: block size %d at position %d passes the context length %d", bs, s.Len()+rows, n)
	}
	if s.noise > 0 {
		return ports.Proposal{}, fmt.Errorf("portfake draft: %d noise positions left in the cache: Crop to the anchor position first", s.noise)
	}
	if s.d.cfg.FailOn > 0 && len(s.calls)+1 == s.d.cfg.FailOn {
		// Fail after appending the context, the worst case for the caller's bookkeeping.
		if err := s.appendCtx(newCtx, call); err != nil {
			return ports.Proposal{}, err
		}
		return ports.Proposal{}, fmt.Errorf("portfake draft call %d: %w", len(s.calls)+1, ErrInjected)
	}
	if err := s.appendCtx(newCtx, call); err != nil {
		return ports.Proposal{}, err
	}
	if cost && s.d.cfg.DraftCost != nil && s.d.cfg.Clock != nil {
		s.d.cfg.Clock.Advance(s.d.cfg.DraftCost(bs))
	}
	if bs == 1 {
		return ports.Proposal{Tokens: []ports.Token{}}, nil
	}
	prop, err := s.d.cfg.Propose(append(s.Context(), anchor), bs)
	if err != nil {
		return ports.Proposal{}, fmt.Errorf("portfake propose: %w", err)
	}
	if len(prop.Tokens) != bs-1 {
		return ports.Proposal{}, fmt.Errorf("portfake propose: %d tokens for block %d", len(prop.Tokens), bs)
	}
	if s.d.cfg.LeaveNoise {
		s.noise = bs
	}
	return prop, nil
}

func (s *DraftSession) appendCtx(newCtx ports.Taps, call *DraftCall) error {
	if newCtx == nil {
		return nil
	}
	t, ok := newCtx.(*Taps)
	if !ok {
		return fmt.Errorf("portfake draft: context taps %T are not portfake taps", newCtx)
	}
	rows, err := t.Values()
	if err != nil {
		return fmt.Errorf("portfake draft: %w", err)
	}
	for i, r := range rows {
		if r.Pos != len(s.ctx)+i {
			return fmt.Errorf("portfake draft: context row %d is for position %d, want %d", i, r.Pos, len(s.ctx)+i)
		}
	}
	s.ctx = append(s.ctx, rows...)
	call.CtxRows = len(rows)
	return nil
}

// Crop truncates the cache to n positions.
func (s *DraftSession) Crop(n int) error {
	if s.closed {
		return errors.New("portfake: draft session is closed")
	}
	if n < 0 || n > s.Len() {
		return fmt.Errorf("portfake crop to %d outside [0, %d]", n, s.Len())
	}
	s.noise = 0
	if n < len(s.ctx) {
		s.ctx = s.ctx[:n]
	}
	s.noise = n - len(s.ctx)
	return nil
}

// Close releases the session.
func (s *DraftSession) Close() error {
	s.closed = true
	return nil
}

// Perfect proposes the target's greedy continuation.
func Perfect(m *Model) Proposer { return MatchThenDiverge(m, -1) }

// MatchThenDiverge proposes the target's greedy continuation for the first k slots and a different token
// (the greedy token + 1 mod vocab) at slot k+1 and after; k < 0 never diverges.
func MatchThenDiverge(m *Model, k int) Proposer {
	return func(history []ports.Token, bs int) (ports.Proposal, error) {
		h := slices.Clone(history)
		out := make([]ports.Token, 0, bs-1)
		for i := range bs - 1 {
			g, err := m.Greedy(h)
			if err != nil {
				return ports.Proposal{}, err
			}
			if k >= 0 && i >= k {
				g = (g + 1) % ports.Token(m.cfg.Vocab)
			}
			out = append(out, g)
			h = append(h, g)
		}
		return ports.Proposal{Tokens: out}, nil
	}
}

// RandomTokens proposes uniformly random tokens from a seeded source.
func RandomTokens(vocab int, seed uint64) Proposer {
	r := rand.New(rand.NewPCG(seed, 1))
	return func(_ []ports.Token, bs int) (ports.Proposal, error) {
		out := make([]ports.Token, bs-1)
		for i := range out {
			out[i] = ports.Token(r.IntN(vocab))
		}
		return ports.Proposal{Tokens: out}, nil
	}
}

// Fixed always proposes the first bs-1 of tokens (padded with token 0).
func Fixed(tokens ...ports.Token) Proposer {
	return func(_ []ports.Token, bs int) (ports.Proposal, error) {
		out := make([]ports.Token, bs-1)
		copy(out, tokens)
		return ports.Proposal{Tokens: out}, nil
	}
}

// Sampled draws each token from the model's distribution under params q (a different temperature, say)
// with a seeded source, and reports those distributions, exercising general speculative sampling.
func Sampled(m *Model, q ports.SamplingParams, seed uint64) Proposer {
	r := rand.New(rand.NewPCG(seed, 2))
	return func(history []ports.Token, bs int) (ports.Proposal, error) {
		h := slices.Clone(history)
		var p ports.Proposal
		for range bs - 1 {
			d, err := m.Dist(h, q)
			if err != nil {
				return ports.Proposal{}, err
			}
			t := d.Sample(r.Float64(), ports.NoToken)
			p.Tokens = append(p.Tokens, t)
			p.Dists = append(p.Dists, d)
			h = append(h, t)
		}
		return p, nil
	}
}
