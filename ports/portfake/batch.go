package portfake

import (
	"context"
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.BatchForwarder = (*Model)(nil)
	_ ports.BatchDrafter   = (*Drafter)(nil)
)

// ForwardBatch runs every item as its session's Forward would (ports.BatchForwarder), recording each call
// with its batch size (ForwardCall.Batch). Sessions must be distinct sessions of this model. An item its
// session refuses — including a failure injected with FailForward — gets its error in BatchResult.Err and
// leaves the session's state as it was. The simulated clock advances once, by ForwardCost of the tokens of
// every item that ran: a batch costs one forward over all its rows.
func (m *Model) ForwardBatch(ctx context.Context, items []ports.BatchItem) ([]ports.BatchResult, error) {
	seen := make(map[*Session]int, len(items))
	for i, it := range items {
		s := SessionOf(it.Session)
		if s == nil || s.m != m {
			return nil, fmt.Errorf("portfake forward batch: item %d: session %T was not opened by this model", i, it.Session)
		}
		if j, dup := seen[s]; dup {
			return nil, fmt.Errorf("portfake forward batch: items %d and %d share one session", j, i)
		}
		seen[s] = i
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("portfake forward batch: %w", err)
	}
	out := make([]ports.BatchResult, len(items))
	rows := 0
	for i, it := range items {
		out[i].Result, out[i].Err = SessionOf(it.Session).forward(ctx, it.Tokens, it.Opts, len(items))
		if out[i].Err == nil {
			rows += len(it.Tokens)
		}
	}
	if m.cfg.ForwardCost != nil && rows > 0 {
		m.advance(m.cfg.ForwardCost(rows))
	}
	return out, nil
}

// DraftBatch runs every item as its session's Draft would (ports.BatchDrafter). The scripted sessions have
// no sampling ability of their own (no ports.SamplingDrafter), so an item at Temperature > 0 drafts as Draft
// does — what the decoder calls on such a session — after checking that it has a Rand. Sessions must be
// distinct sessions of this drafter; an item's refusal or injected failure (FailOn) is its own
// DraftResult.Err. The simulated clock advances once, by DraftCost of the block sizes of the items that ran
// summed.
func (d *Drafter) DraftBatch(ctx context.Context, items []ports.DraftItem) ([]ports.DraftResult, error) {
	seen := make(map[*DraftSession]int, len(items))
	for i, it := range items {
		s, ok := it.Session.(*DraftSession)
		if !ok || s == nil || s.d != d {
			return nil, fmt.Errorf("portfake draft batch: item %d: session %T was not opened by this drafter", i, it.Session)
		}
		if j, dup := seen[s]; dup {
			return nil, fmt.Errorf("portfake draft batch: items %d and %d share one session", j, i)
		}
		seen[s] = i
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("portfake draft batch: %w", err)
	}
	out := make([]ports.DraftResult, len(items))
	rows := 0
	for i, it := range items {
		if it.Temperature < 0 || (it.Temperature > 0 && it.Rand == nil) {
			out[i].Err = errors.New("portfake draft: a sampled draft needs a temperature > 0 and a random source")
			continue
		}
		s := it.Session.(*DraftSession)
		call := DraftCall{Anchor: it.Anchor, BS: it.BlockSize, LenBefore: s.Len()}
		prop, err := s.draft(ctx, it.Anchor, it.NewCtx, it.BlockSize, &call, false)
		call.LenAfter, call.Err, call.Batch = s.Len(), err, len(items)
		call.Proposal = append([]ports.Token(nil), prop.Tokens...)
		s.calls = append(s.calls, call)
		out[i] = ports.DraftResult{Proposal: prop, Err: err}
		if err == nil {
			rows += it.BlockSize
		}
	}
	if d.cfg.DraftCost != nil && d.cfg.Clock != nil && rows > 0 {
		d.cfg.Clock.Advance(d.cfg.DraftCost(rows))
	}
	return out, nil
}
