package batch

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// Member is one generation's place in the scheduler, from Join to Leave. Its calls are made from the
// generation's goroutine, one at a time (a member has at most one call pending). While it is a member, every
// round waits for its call up to Config.MaxWait.
type Member struct {
	s    *Scheduler
	left bool
	// The cost model's view of this member (under the scheduler's lock): rows per verify or plain step, the
	// share of those that drafted, and committed tokens per round (Committed).
	rows, drafting, committed ema
}

// Join adds a member. Call Leave when the generation ends.
func (s *Scheduler) Join() *Member {
	m := &Member{s: s}
	s.mu.Lock()
	s.members[m] = struct{}{}
	start := !s.dispatching
	s.dispatching = true
	s.mu.Unlock()
	if start {
		go s.dispatch()
	}
	return m
}

// Leave removes the member; the rounds stop waiting for it. It is idempotent.
func (m *Member) Leave() {
	s := m.s
	s.mu.Lock()
	if !m.left {
		m.left = true
		delete(s.members, m)
	}
	s.mu.Unlock()
	// A round may have been waiting only for this member.
	s.poke()
}

// Forward runs sess.Forward(ctx, tokens, opts) in the next forward round (batched with the other members'
// blocks when the target can). sess must be a session of the scheduler's target, used by this member only.
func (m *Member) Forward(ctx context.Context, sess ports.Session, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	if m.left {
		return ports.ForwardResult{}, fmt.Errorf("batch: forward after Leave")
	}
	if opts.Rows == 0 {
		// A verify block or a plain step (prefill chunks and recomputes ask for one row): what the cost
		// model counts as this member's share of a round.
		m.s.mu.Lock()
		m.rows.add(float64(len(tokens)))
		m.drafting.add(b2f(len(tokens) > 1))
		m.s.mu.Unlock()
	}
	c := &call{m: m, ctx: ctx, fwd: ports.BatchItem{Session: sess, Tokens: tokens, Opts: opts}}
	m.s.submit(c)
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.fres.Result, c.fres.Err
}

// Draft runs one draft item (its Session one of the scheduler's drafter's sessions) in the next draft round.
func (m *Member) Draft(ctx context.Context, it ports.DraftItem) (ports.Proposal, error) {
	if m.left {
		return ports.Proposal{}, fmt.Errorf("batch: draft after Leave")
	}
	c := &call{m: m, ctx: ctx, drf: it, isDraft: true}
	m.s.submit(c)
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.dres.Proposal, c.dres.Err
}

// Committed reports the tokens the member's latest decoding round committed (for RoundCost's estimate of
// what the others commit per round).
func (m *Member) Committed(n int) {
	m.s.mu.Lock()
	m.committed.add(float64(n))
	m.s.mu.Unlock()
}

// RoundCost is the batched round's cost for this member verifying rows rows in the next round (a
// speculative.BatchCost): the expected round time in nanoseconds — the drafts, when this member or another
// drafts, plus the target forward of everyone's rows — and the tokens the other members are expected to
// commit in it. ok is false while the member is alone (its own measurements then say everything) or the
// forward cost at that many rows cannot be estimated yet.
func (m *Member) RoundCost(rows int) (ns, others float64, ok bool) {
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	otherRows, n := 0.0, 0
	noDraft := 1.0 // probability that no other member drafts
	for o := range s.members {
		if o == m {
			continue
		}
		n++
		otherRows += value(o.rows, 1)
		others += value(o.committed, 1)
		noDraft *= 1 - value(o.drafting, 0)
	}
	if n == 0 {
		return 0, 0, false
	}
	f, ok := s.forwardCost(int(otherRows + 0.5 + float64(rows)))
	if !ok {
		return 0, 0, false
	}
	pDraft := 1 - noDraft
	if rows > 1 {
		pDraft = 1
	}
	d := 0.0
	if pDraft > 0 {
		if !s.dcost.ok {
			return 0, 0, false
		}
		d = pDraft * s.dcost.v
	}
	return f + d, others, true
}

// forwardCost estimates a forward round of rows rows: measured, or linear between the nearest measured row
// counts, or extrapolated from the two nearest on one side (never below the nearest measured one when
// larger); the caller holds the lock.
func (s *Scheduler) forwardCost(rows int) (float64, bool) {
	if e := s.fcost[rows]; e != nil {
		return e.v, true
	}
	lo, lo2, hi, hi2 := 0, 0, 0, 0
	for r := range s.fcost {
		switch {
		case r < rows && r > lo:
			lo, lo2 = r, lo
		case r < rows && r > lo2:
			lo2 = r
		case r > rows && (hi == 0 || r < hi):
			hi, hi2 = r, hi
		case r > rows && (hi2 == 0 || r < hi2):
			hi2 = r
		}
	}
	at := func(r int) float64 { return s.fcost[r].v }
	line := func(a, b int) float64 {
		return at(a) + (at(b)-at(a))*float64(rows-a)/float64(b-a)
	}
	switch {
	case lo > 0 && hi > 0:
		return line(lo, hi), true
	case lo > 0 && lo2 > 0:
		return max(line(lo2, lo), at(lo)), true
	case hi > 0 && hi2 > 0:
		return min(max(line(hi, hi2), at(hi)*float64(rows)/float64(hi)), at(hi)), true
	}
	return 0, false
}

func value(e ema, def float64) float64 {
	if e.ok {
		return e.v
	}
	return def
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
