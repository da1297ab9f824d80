package generation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/adapters/constrained"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// RunOptions are what a run shares with the other generations of its server (or bench).
type RunOptions struct {
	// Clock times the decoder and the masking (nil: the system clock).
	Clock ports.Clock
	// PrefixCache, when set, restores the longest prefix of the prompt this partition cached first and
	// caches this generation's boundaries there once it has ended cleanly. The caller picks the partition:
	// the request's tenant (app/serve), or the one user of a bench.
	PrefixCache *prefixcache.Partition
	// CacheBreaks are prompt positions the client marked as cache breakpoints (ascending): with PrefixCache
	// set, the prefill also stops there to export state, so that each becomes an entry a later request
	// sharing the prefix up to it can restore.
	CacheBreaks []int
	// Batch, when set, runs the forwards and drafts in this scheduler's shared rounds, with prefill chunks of
	// PrefillChunk tokens (0: whole prompts).
	Batch        *batch.Scheduler
	PrefillChunk int
	// Observe is called after each committed decoding step (the live view); nil: not observed.
	Observe func(speculative.RoundStats)
	// Emit is called with each round's committed tokens; an error wrapping speculative.ErrStop ends the
	// generation as a stop (a stop string), any other ends it with that error.
	Emit func([]ports.Token) error
	// EmitLogprobs, when set and the plan asks for log-probabilities, is called instead of Emit, with the
	// log-probability of each token (lps[i] is toks[i]'s; Text, Bytes and Offset left for the caller).
	EmitLogprobs func(toks []ports.Token, lps []ports.TokenLogprob) error
}

// Outcome is a run's result with what was measured around the decoder.
type Outcome struct {
	speculative.Result
	// Cached is the prompt tokens restored from the prefix cache.
	Cached int
	// CacheWrite is the prompt tokens this run wrote to the prefix cache up to the last of CacheBreaks it
	// cached: from the restored prefix's end to that breakpoint (Anthropic's cache_creation_input_tokens).
	CacheWrite int
	// FirstToken is the time from opening the sessions to the first token's emit (restore and prefill
	// included).
	FirstToken time.Duration
	// Mask is what constrained decoding cost (zero without a constraint).
	Mask constrained.Stats
	// Warn holds what went wrong without failing the generation: an entry of it that was not cached, a
	// session that did not close cleanly.
	Warn error
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Run runs plan p: it opens the sessions, restores the prefix, joins the batch, applies the constraint,
// decodes and caches. The error is the decoder's (wrapped; a stop string's wraps speculative.ErrStop, in
// which case the outcome is complete) or the sessions'; the partial outcome comes with it.
func (e *Engine) Run(ctx context.Context, p Plan, o RunOptions) (out Outcome, err error) {
	// out is named: the deferred closes add their warnings to what is returned.
	clock := o.Clock
	if clock == nil {
		clock = systemClock{}
	}
	start := clock.Now()
	cfg := p.Config
	cfg.Observe = o.Observe
	var taps []int
	if cfg.BlockSize > 1 {
		if e.Drafter == nil {
			return out, fmt.Errorf("block size %d needs a drafter", cfg.BlockSize)
		}
		taps = e.Drafter.TapLayers()
	}
	sess, err := e.Target.NewSession(ctx, taps)
	if err != nil {
		return out, fmt.Errorf("open target session: %w", err)
	}
	defer closeWarn(&out, "target session", sess.Close)
	var draft ports.DraftSession
	if cfg.BlockSize > 1 {
		ds, err := e.Drafter.NewSession(ctx)
		if err != nil {
			return out, fmt.Errorf("open draft session: %w", err)
		}
		defer closeWarn(&out, "draft session", ds.Close)
		draft = ds
	}
	prefix, err := startPrefix(ctx, o.PrefixCache, p.Prompt, o.CacheBreaks, &cfg, sess, draft)
	if err != nil {
		return out, err
	}
	if prefix != nil {
		out.Cached = prefix.reused
	}
	// The prefix cache restored into the backend's own sessions; the decoder's forwards and drafts go
	// through the batch's rounds.
	gsess, gdraft := ports.Session(sess), draft
	leave := func() {}
	if o.Batch != nil {
		m := o.Batch.Join()
		leave = m.Leave
		gsess, gdraft = batchSessions(m, &cfg, o.PrefillChunk, sess, draft)
	}
	defer leave()
	dec, err := speculative.New(cfg, clock, sampling.NewSource(p.Seed))
	if err != nil {
		return out, invalid("", "%v", err)
	}
	// The constraint wraps the batch member's session: its masked forward must still join the rounds.
	// It closes the document within the token budget (the plan's, already capped by admission).
	end := 0
	if budget, err := speculative.TokenBudget(len(p.Prompt), cfg.MaxTokens, cfg.ContextLength); err == nil && budget > 0 {
		end = len(p.Prompt) + budget
	}
	csess, masked := constrained.Wrap(gsess, p.Constraint, len(p.Prompt), end, e.Target.Info().VocabSize, clock)
	// Log-probabilities are read from the rows the decoder verified against: outside the constraint's mask.
	var lps *logprobSession
	if p.Logprobs && o.EmitLogprobs != nil {
		csess, lps = wrapLogprobs(csess, len(p.Prompt), p.TopLogprobs)
	}
	first := true
	pos := len(p.Prompt) // the sequence position of the next committed token
	out.Result, err = dec.Generate(ctx, csess, gdraft, p.Prompt, func(toks []ports.Token) error {
		if first {
			out.FirstToken, first = clock.Now().Sub(start), false
		}
		if lps != nil {
			entries := make([]ports.TokenLogprob, len(toks))
			for i, t := range toks {
				var err error
				if entries[i], err = lps.take(pos+i, t); err != nil {
					return err
				}
			}
			pos += len(toks)
			return o.EmitLogprobs(toks, entries)
		}
		if o.Emit != nil {
			return o.Emit(toks)
		}
		return nil
	})
	leave() // now, not after the prefix cache's exports below: the rounds stop waiting for this generation
	if masked != nil {
		out.Mask = masked.Stats()
		// A document the budget closed ended at EOS (or at the budget) because of max_tokens: its finish is
		// "length", as the content was cut short.
		if out.Finish == speculative.FinishStop && masked.Forced(len(out.Tokens)) {
			out.Finish = speculative.FinishLength
		}
	}
	// Cache what this generation computed once it ended cleanly (a stop string ends it through emit, with
	// every layer at the committed position); a failed or cancelled one leaves no entry.
	if prefix != nil && (err == nil || errors.Is(err, speculative.ErrStop)) {
		written, cerr := prefix.finish(ctx, sess, draft, out.Tokens)
		if cerr != nil {
			out.Warn = errors.Join(out.Warn, cerr)
		}
		out.CacheWrite = written
	}
	if err != nil {
		return out, fmt.Errorf("generate: %w", err)
	}
	return out, nil
}

// closeWarn closes a session, adding its failure to the outcome's warnings.
func closeWarn(out *Outcome, what string, f func() error) {
	if err := f(); err != nil {
		out.Warn = errors.Join(out.Warn, fmt.Errorf("close %s: %w", what, err))
	}
}

// batchSessions wraps sess and draft (nil: none) so their forwards and drafts join m's rounds, and sets cfg's
// batch settings: the prefill chunk and the policy's batched cost.
func batchSessions(m *batch.Member, cfg *speculative.Config, chunk int, sess ports.Session, draft ports.DraftSession) (ports.Session, ports.DraftSession) {
	cfg.PrefillChunk = chunk
	if cfg.Adaptive {
		cfg.Policy.Batch = m
	}
	if draft != nil {
		draft = m.DraftSession(draft)
	}
	return m.Session(sess), draft
}
