package speculative

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/higgs-go/higgs/ports"
)

// Decoder runs generations with one configuration. It holds no per-generation state, so one Decoder may
// serve sequential generations; it is not safe for concurrent use because the injected Rand is not.
type Decoder struct {
	cfg   Config
	clock ports.Clock
	rnd   ports.Rand
	// noise is rnd's position-keyed ability; set when sampling under VerifyMatch.
	noise ports.PositionRand
}

// New validates cfg and returns a Decoder. rnd may be nil when cfg.Sampling is greedy; under VerifyMatch it
// must implement ports.PositionRand.
func New(cfg Config, clock ports.Clock, rnd ports.Rand) (*Decoder, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if clock == nil {
		errs = append(errs, errors.New("nil clock"))
	}
	var noise ports.PositionRand
	switch {
	case cfg.Sampling.Greedy():
	case rnd == nil:
		errs = append(errs, fmt.Errorf("temperature %v needs a random source", cfg.Sampling.Temperature))
	case cfg.Verify == VerifyMatch:
		var ok bool
		if noise, ok = rnd.(ports.PositionRand); !ok {
			errs = append(errs, fmt.Errorf("verification %s needs a position-keyed random source (ports.PositionRand), got %T", cfg.Verify, rnd))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("speculative config: %w", err)
	}
	cfg.StopTokens = slices.Clone(cfg.StopTokens)
	cfg.LayerKinds = slices.Clone(cfg.LayerKinds)
	return &Decoder{cfg: cfg, clock: clock, rnd: rnd, noise: noise}, nil
}

// Generate prefills prompt into sess (opened with the drafter's tap layers when draft != nil), then decodes.
// sess is empty, or holds a prefix of the prompt restored from a cache (fewer positions than the prompt,
// holding exactly prompt[:sess.Len()]); draft, when used, holds as many positions as sess. draft == nil or BlockSize == 1 means autoregressive decoding. emit receives each
// round's committed tokens (already committed to the session) in order, in a slice it must not modify
// (it may keep it: the tokens stay as they are); an emit error stops generation and
// is returned wrapped. ctx is checked once per round; on cancellation Generate returns ctx.Err() (wrapped)
// plus the partial Result with FinishCancelled. The caller keeps ownership of
// sess and draft and closes them. On any other error the partial Result is returned too, and the session
// state is unspecified (close it).
func (d *Decoder) Generate(ctx context.Context, sess ports.Session, draft ports.DraftSession,
	prompt []ports.Token, emit func([]ports.Token) error) (Result, error) {
	g, err := d.start(sess, draft, prompt, emit)
	if err != nil {
		return Result{}, err
	}
	err = g.run(ctx)
	switch {
	case err == nil && (g.res.Finish == FinishStop || g.res.Finish == FinishLength):
		err = g.syncDraft(ctx)
	case errors.Is(err, ErrStop):
		// The caller ended it (a stop string): every committed token is in the session, so the drafter can be
		// brought level as after a stop token, for the prefix cache to keep its context.
		if serr := g.syncDraft(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	if g.policy != nil && g.cfg.Policy.Memory != nil {
		g.cfg.Policy.Memory.store(g.policy)
	}
	g.res.Tokens = g.seq[len(prompt):]
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		g.res.Finish = FinishCancelled
	}
	return g.res, err
}

// generation is the state of one Generate call. Invariants between rounds: sess.Len() == len(seq)-1 (every
// token but the newest, the anchor, is in the target caches); draft.Len() == dlen ≤ sess.Len(); pending
// holds the taps of positions dlen..sess.Len()-1 not yet given to the drafter.
type generation struct {
	d       *Decoder
	cfg     Config
	sess    ports.Session
	draft   ports.DraftSession
	emit    func([]ports.Token) error
	seq     []ports.Token // prompt + generated
	prompt  int
	held    int // prompt positions the session held at the start (a prefix cache hit)
	budget  int // maximum number of generated tokens
	maxBS   int
	dlen    int
	pending []pendingTaps
	// maxPending bounds len(pending) after a plain round under the policy (PolicyConfig.MaxPendingRounds).
	maxPending int
	rb         *rollbacker
	policy     *depthPolicy
	tree       *treeAbility          // nil: chains only
	samp       *ports.SamplingParams // ForwardOptions.Sampling: nil when greedy; built once, not per round
	stop       map[ports.Token]bool
	res        Result
}

type pendingTaps struct {
	taps     ports.Taps
	detached bool
}

func (d *Decoder) start(sess ports.Session, draft ports.DraftSession, prompt []ports.Token,
	emit func([]ports.Token) error) (*generation, error) {
	cfg := d.cfg
	var errs []error
	if sess == nil {
		return nil, errors.New("generate: nil session")
	}
	if len(prompt) == 0 {
		errs = append(errs, errors.New("empty prompt"))
	}
	// A session may start with a prefix of the prompt already in it (restored from the prefix cache): the
	// caller guarantees those positions hold exactly prompt[:held].
	held := sess.Len()
	if held != 0 && held >= len(prompt) {
		errs = append(errs, fmt.Errorf("session holds %d positions, want an empty session or fewer than the prompt's %d", held, len(prompt)))
	}
	if draft != nil && cfg.BlockSize > 1 && draft.Len() != held {
		errs = append(errs, fmt.Errorf("draft session holds %d positions, want the target session's %d", draft.Len(), held))
	}
	for _, n := range cfg.PrefillStops {
		if n <= held || n >= len(prompt) {
			errs = append(errs, fmt.Errorf("prefill stop %d outside (%d, %d)", n, held, len(prompt)))
			break
		}
	}
	if emit == nil {
		errs = append(errs, errors.New("nil emit function"))
	}
	budget, err := TokenBudget(len(prompt), cfg.MaxTokens, cfg.ContextLength)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	g := &generation{
		d: d, cfg: cfg, sess: sess, draft: draft, emit: emit,
		seq: slices.Clone(prompt), prompt: len(prompt), budget: budget, maxBS: 1,
		stop: make(map[ports.Token]bool, len(cfg.StopTokens)),
	}
	for _, s := range cfg.StopTokens {
		g.stop[s] = true
	}
	if draft != nil && cfg.BlockSize > 1 {
		g.maxBS = cfg.BlockSize
	} else {
		// Without speculation the drafter is never called, so do not tap or keep context for it.
		g.draft = nil
	}
	g.maxPending = cfg.Policy.MaxPendingRounds
	if g.maxPending == 0 {
		g.maxPending = defaultMaxPendingRounds
	}
	g.held, g.dlen = held, held
	if cfg.Adaptive {
		if cfg.Policy.Memory != nil {
			g.policy = cfg.Policy.Memory.load(g.maxBS, cfg.Policy)
		} else {
			g.policy = newDepthPolicy(g.maxBS, cfg.Policy)
		}
	}
	rb, err := newRollbacker(cfg, sess)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	g.rb = rb
	if g.tree = g.treeAbility(); g.policy != nil {
		if g.tree != nil {
			g.policy.enableTrees(cfg.Tree.budgets())
		} else {
			g.policy.disableTrees()
		}
	}
	if !cfg.Sampling.Greedy() {
		g.samp = &g.cfg.Sampling
	}
	g.res.Stats.PromptTokens = len(prompt)
	g.res.Stats.MaxBlockSize = g.maxBS
	return g, nil
}

// run prefills, then decodes round by round until a finish reason or an error.
func (g *generation) run(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	clock := g.d.clock
	t0 := clock.Now()
	fr, err := g.prefill(ctx)
	if err != nil {
		return err
	}
	first, err := sampleFirst(fr, g.cfg.Sampling.Greedy(), g.uniform(len(g.seq)))
	if err != nil {
		return fmt.Errorf("first token: %w", err)
	}
	g.seq = append(g.seq, first)
	g.res.Stats.PrefillTime = clock.Now().Sub(t0)
	if err := g.emit([]ports.Token{first}); err != nil {
		g.res.Finish = emitFinish(err)
		return fmt.Errorf("emit: %w", err)
	}
	if g.stop[first] {
		g.res.Finish = FinishStop
		return nil
	}
	if g.generated() >= g.budget {
		g.res.Finish = FinishLength
		return nil
	}
	decodeStart := clock.Now()
	defer func() { g.res.Stats.DecodeTime = clock.Now().Sub(decodeStart) }()
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		done, err := g.round(ctx)
		if err != nil || done {
			return err
		}
	}
}

// prefill feeds the prompt positions the session does not hold, pausing at the prefill stops, in chunks of
// at most Config.PrefillChunk tokens, and returns the last forward's result (its one row is the first
// token's).
func (g *generation) prefill(ctx context.Context) (ports.ForwardResult, error) {
	var fr ports.ForwardResult
	from := g.held
	for _, stop := range append(slices.Clone(g.cfg.PrefillStops), g.prompt) {
		for from < stop {
			to := stop
			if c := g.cfg.PrefillChunk; c > 0 && to-from > c {
				to = from + c
			}
			if err := ctx.Err(); err != nil {
				return fr, fmt.Errorf("prefill: %w", err)
			}
			g.detachPending()
			var err error
			fr, err = g.sess.Forward(ctx, g.seq[from:to], ports.ForwardOptions{Rows: 1, Taps: g.draft != nil, Sampling: g.samp})
			if err != nil {
				return fr, fmt.Errorf("prefill %d tokens at %d: %w", to-from, from, err)
			}
			if n := g.sess.Len(); n != to {
				return fr, fmt.Errorf("prefill: session holds %d positions, want %d", n, to)
			}
			if g.draft != nil {
				if rowsOf(fr.Taps) != to-from {
					return fr, fmt.Errorf("prefill returned taps for %d positions, want %d", rowsOf(fr.Taps), to-from)
				}
				g.pending = append(g.pending, pendingTaps{taps: fr.Taps})
			}
			from = to
		}
		if g.cfg.Checkpoint != nil {
			if err := g.cfg.Checkpoint(stop); err != nil {
				return fr, fmt.Errorf("prefill checkpoint at %d: %w", stop, err)
			}
		}
	}
	return fr, nil
}

// syncDraft gives the drafter every pending tap (context only), so that it holds what the target holds.
func (g *generation) syncDraft(ctx context.Context) error {
	if g.draft == nil || !g.cfg.SyncDrafter {
		return nil
	}
	if err := g.cropDraft(); err != nil {
		return err
	}
	for len(g.pending) > 0 {
		p := g.pending[0]
		at := g.dlen + p.taps.Rows()
		if _, err := g.draftCall(ctx, g.seq[at], p.taps, 1, ports.TopRequest{}); err != nil {
			return fmt.Errorf("sync drafter: %w", err)
		}
		g.pending[0] = pendingTaps{}
		g.pending = g.pending[1:]
	}
	return nil
}

func (g *generation) generated() int { return len(g.seq) - g.prompt }

// ErrStop, wrapped in an emit callback's error, ends generation as the caller's clean stop (a stop string):
// Generate still returns the error, with FinishStop, and leaves the session and the drafter as after a stop
// token (the drafter brought level when Config.SyncDrafter). Any other emit error is a cancellation.
var ErrStop = errors.New("generation stopped by the caller")

func emitFinish(err error) FinishReason {
	if errors.Is(err, ErrStop) {
		return FinishStop
	}
	return FinishCancelled
}

// uniform returns the draw for the token at sequence position pos: the position's own number under
// VerifyMatch, the stream's next one otherwise. Greedy decoding draws nothing.
func (g *generation) uniform(pos int) func() float64 {
	switch {
	case g.cfg.Sampling.Greedy():
		return nil
	case g.d.noise != nil:
		return func() float64 { return g.d.noise.Uniform(pos) }
	}
	return g.d.rnd.Float64
}

// round runs one draft → verify → accept → roll back → commit → emit cycle. It reports whether generation
// finished.
// It is one function because a round is one ordered sequence whose invariants (the session, the drafter and
// the committed tokens in step) hold only at its ends; its steps call helpers of their own.
func (g *generation) round(ctx context.Context) (bool, error) {
	clock := g.d.clock
	remaining := g.budget - g.generated()
	limit := min(g.maxBS, remaining+1)
	dec := Decision{Code: reasonFixed, BlockSize: limit, MaxBlockSize: g.maxBS}
	switch {
	case g.policy != nil:
		dec = g.policy.choose(limit)
	case limit < g.maxBS:
		dec.Code, dec.Left = reasonLength, limit
	}
	if g.policy == nil && g.tree != nil && dec.BlockSize > 1 {
		dec.Tree = g.tree.budget
	}
	bs := dec.BlockSize
	preLen := g.sess.Len()
	anchor := g.seq[len(g.seq)-1]
	rs := RoundStats{BlockSize: bs, Policy: dec.Code, Decision: dec}
	if dec.Code != reasonProbe && dec.Code != reasonLength || g.res.Stats.Decision.Code == "" {
		g.res.Stats.Decision = dec
	}

	if dec.Tree > 0 && bs > 1 && g.tree != nil {
		return g.treeRound(ctx, dec, rs, remaining)
	}

	// Draft.
	var prop ports.Proposal
	var policyDraft time.Duration
	if bs > 1 {
		t0 := clock.Now()
		var err error
		var lastCall time.Duration
		prop, lastCall, err = g.draftBlock(ctx, anchor, bs, ports.TopRequest{})
		if err != nil {
			return false, err
		}
		rs.DraftTime = clock.Now().Sub(t0)
		policyDraft = lastCall
	}
	block := slices.Concat([]ports.Token{anchor}, prop.Tokens) // one allocation: rs.Block keeps it
	rs.Block = block

	// Verify (after a snapshot when the rollback plan needs one).
	t0 := clock.Now()
	plan, err := g.rb.prepare(g.sess, bs, clock)
	if err != nil {
		return false, err
	}
	g.detachPending()
	fr, err := g.sess.Forward(ctx, block, ports.ForwardOptions{
		Taps: g.draft != nil, RecordTape: plan.recordTape, Sampling: g.samp})
	if err != nil {
		return false, fmt.Errorf("verify block of %d: %w", bs, err)
	}
	rs.VerifyTime = clock.Now().Sub(t0)

	// Accept.
	var a int
	var next ports.Token
	switch {
	case g.cfg.Sampling.Greedy():
		a, next, err = acceptGreedy(prop.Tokens, fr.Greedy)
	case g.d.noise != nil:
		// fr.Dists[i] is the distribution of the token at sequence position len(seq)+i.
		a, next, err = acceptMatch(prop.Tokens, fr.Dists, g.d.noise, len(g.seq))
	default:
		a, next, err = acceptSampled(prop.Tokens, prop.Dists, fr.Dists, g.d.rnd)
	}
	if err != nil {
		return false, fmt.Errorf("verify block of %d: %w", bs, err)
	}
	rs.Accepted = a
	cand, chunk, finish := g.clip(prop.Tokens[:a], next, remaining)
	n := len(chunk)
	rs.Committed = n

	// Roll back to the committed positions: anchor + the first n-1 chunk tokens.
	t0 = clock.Now()
	kind, taps, err := g.rb.apply(ctx, g.sess, plan, fr, block, preLen, n, g.draft != nil)
	if err != nil {
		return false, err
	}
	rs.RollbackTime = clock.Now().Sub(t0)
	rs.Rollback = kind
	g.rb.observe(kind, rs.RollbackTime)
	if got := g.sess.Len(); got != preLen+n {
		return false, fmt.Errorf("after rollback the session holds %d positions, want %d", got, preLen+n)
	}
	if taps != nil {
		g.pending = append(g.pending, pendingTaps{taps: taps})
	}
	if g.policy != nil {
		// The cost model sees only the final Draft call: catching up context after plain rounds is a cost of
		// having fallen back, not of this block size; the probe budget counts it.
		g.policy.observe(bs, a, policyDraft, rs.DraftTime-policyDraft, rs.VerifyTime, rs.RollbackTime)
	}
	return g.commit(ctx, rs, cand, chunk, finish)
}

// clip puts a round's accepted drafts and its bonus token after the committed sequence, in seq's spare
// capacity (seq itself grows only at commit, so an error before it leaves the partial Result without them,
// and emitted chunks are never overwritten), and cuts the chunk at the first stop token and at the tokens left
// (remaining): it returns the candidate sequence, the chunk to commit and the finish reason it brings.
func (g *generation) clip(accepted []ports.Token, next ports.Token, remaining int) ([]ports.Token, []ports.Token, FinishReason) {
	cand := append(append(g.seq, accepted...), next)
	chunk := cand[len(g.seq):]
	finish := FinishReason("")
	if i := slices.IndexFunc(chunk, func(t ports.Token) bool { return g.stop[t] }); i >= 0 {
		chunk, finish = chunk[:i+1], FinishStop
	}
	if len(chunk) >= remaining {
		chunk = chunk[:remaining]
		if finish == "" {
			finish = FinishLength
		}
	}
	return cand, chunk, finish
}

// commit ends a round whose session already holds the committed positions: it commits chunk (the end of
// cand), records rs, emits, and, after plain rounds past the pending bound, feeds the drafter.
func (g *generation) commit(ctx context.Context, rs RoundStats, cand, chunk []ports.Token, finish FinishReason) (bool, error) {
	clock := g.d.clock
	g.seq = cand[:len(g.seq)+len(chunk)]
	g.res.Stats.Rounds = append(g.res.Stats.Rounds, rs)
	if err := g.emit(slices.Clip(chunk)); err != nil {
		g.res.Finish = emitFinish(err)
		return false, fmt.Errorf("emit: %w", err)
	}
	if g.cfg.Observe != nil {
		g.cfg.Observe(rs)
	}
	if finish != "" {
		g.res.Finish = finish
		return true, nil
	}
	if rs.BlockSize == 1 && g.policy != nil && len(g.pending) > g.maxPending {
		// After the emit, so a drafter failure here loses no verified token. The call is drafting work of
		// this round in the statistics; the policy does not see it (it would have been paid at the next
		// probe anyway).
		t0 := clock.Now()
		if err := g.feedOldest(ctx, len(g.pending)-g.maxPending); err != nil {
			return false, err
		}
		g.res.Stats.Rounds[len(g.res.Stats.Rounds)-1].DraftTime += clock.Now().Sub(t0)
	}
	return false, nil
}

// draftBlock feeds the pending taps to the drafter and drafts bs-1 tokens after anchor. Pending taps of
// earlier rounds (plain-decoding rounds of the adaptive policy) are fed first by context-only Draft calls
// with bs = 1. It returns the proposal and the duration of the final Draft call.
// For top.K > 0 it also asks for the top candidates of top.Slots slots (Proposal.Top, ports.TopDrafter).
func (g *generation) draftBlock(ctx context.Context, anchor ports.Token, bs int, top ports.TopRequest) (ports.Proposal, time.Duration, error) {
	if g.draft.Len() != g.dlen {
		if err := g.cropDraft(); err != nil {
			return ports.Proposal{}, 0, err
		}
	}
	if g.policy != nil {
		fed := 0
		for _, p := range g.pending {
			fed += p.taps.Rows()
		}
		g.policy.caughtUp(fed)
	}
	if err := g.feedOldest(ctx, len(g.pending)-1); err != nil {
		return ports.Proposal{}, 0, err
	}
	var newCtx ports.Taps
	if len(g.pending) == 1 {
		newCtx = g.pending[0].taps
	}
	t0 := g.d.clock.Now()
	prop, err := g.draftCall(ctx, anchor, newCtx, bs, top)
	if err != nil {
		return ports.Proposal{}, 0, err
	}
	g.pending = g.pending[:0]
	dt := g.d.clock.Now().Sub(t0)
	want := top.SlotsOf(bs) // bs−1 for a plain draft (Slots 0)
	if len(prop.Tokens) != want {
		return ports.Proposal{}, 0, fmt.Errorf("drafter proposed %d tokens for a block of %d, want %d", len(prop.Tokens), bs, want)
	}
	if prop.Dists != nil && len(prop.Dists) != want {
		return ports.Proposal{}, 0, fmt.Errorf("drafter returned %d distributions for %d tokens", len(prop.Dists), want)
	}
	if top.K > 0 {
		if len(prop.Top) != want {
			return ports.Proposal{}, 0, fmt.Errorf("drafter returned %d candidate lists for %d slots", len(prop.Top), want)
		}
		for i, c := range prop.Top {
			if len(c) == 0 || c[0].Token != prop.Tokens[i] {
				return ports.Proposal{}, 0, fmt.Errorf("drafter's candidates for slot %d do not start with its token %d", i+1, prop.Tokens[i])
			}
		}
	}
	return prop, dt, nil
}

// feedOldest gives the drafter the k oldest pending taps (context only, no draft), keeping at least the newest
// entry pending for the next drafting call. It bounds the pending taps while the policy decodes plainly.
func (g *generation) feedOldest(ctx context.Context, k int) error {
	k = min(k, len(g.pending)-1)
	if k <= 0 {
		return nil
	}
	if g.draft.Len() != g.dlen {
		if err := g.cropDraft(); err != nil {
			return err
		}
	}
	for range k {
		p := g.pending[0]
		at := g.dlen + p.taps.Rows()
		if _, err := g.draftCall(ctx, g.seq[at], p.taps, 1, ports.TopRequest{}); err != nil {
			return err
		}
		g.pending[0] = pendingTaps{} // release the taps now, not when the slice is next reallocated
		g.pending = g.pending[1:]
	}
	return nil
}

// draftCall runs one Draft (for top.K > 0 DraftTop, the slots' top candidates as well) and restores the
// drafter invariant Len() == anchor position.
func (g *generation) draftCall(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, top ports.TopRequest) (ports.Proposal, error) {
	want := g.dlen + rowsOf(newCtx)
	var prop ports.Proposal
	var err error
	// Under sample-and-match a draft counts only if it equals the target's own draw, which is independent of
	// the drafter's: the greedy walk's token is then at least as likely to be accepted as a sampled one
	// (p(x_greedy) against Σ p·q), and its proposal distribution is never used.
	if top.K > 0 && bs > 1 {
		prop, err = g.tree.draft.DraftTop(ctx, anchor, newCtx, bs, top)
	} else if sd, ok := g.draft.(ports.SamplingDrafter); ok && bs > 1 && !g.cfg.Sampling.Greedy() && g.d.noise == nil {
		prop, err = sd.DraftSampled(ctx, anchor, newCtx, bs, g.cfg.Sampling.Temperature, g.d.rnd)
	} else {
		prop, err = g.draft.Draft(ctx, anchor, newCtx, bs)
	}
	if err != nil {
		// Leave the drafter at a known length for whoever inspects it after the error.
		_ = g.cropDraft()
		return ports.Proposal{}, fmt.Errorf("draft block of %d at position %d: %w", bs, want, err)
	}
	got := g.draft.Len()
	switch {
	case got > want:
		if err := g.draft.Crop(want); err != nil {
			return ports.Proposal{}, fmt.Errorf("crop drafter from %d to %d: %w", got, want, err)
		}
	case got < want:
		return ports.Proposal{}, fmt.Errorf("drafter holds %d positions after drafting, want %d", got, want)
	}
	g.dlen = want
	return prop, nil
}

// cropDraft brings the drafter back to the length the decoder believes it has, when it holds more.
func (g *generation) cropDraft() error {
	got := g.draft.Len()
	if got == g.dlen {
		return nil
	}
	if got < g.dlen {
		return fmt.Errorf("drafter holds %d positions, want %d", got, g.dlen)
	}
	if err := g.draft.Crop(g.dlen); err != nil {
		return fmt.Errorf("crop drafter from %d to %d: %w", got, g.dlen, err)
	}
	return nil
}

// detachPending copies pending taps that would otherwise be invalidated by the next Forward. Each Forward adds
// at most one entry and every earlier one was detached before it, so only the newest entries need looking at
// (the list grows by one per plain-decoding round; scanning it all would be quadratic over a generation).
func (g *generation) detachPending() {
	for i := len(g.pending) - 1; i >= 0 && !g.pending[i].detached; i-- {
		g.pending[i] = pendingTaps{taps: g.pending[i].taps.Detach(), detached: true}
	}
}
