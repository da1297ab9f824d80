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
	c := &call{m: m, ctx: ctx, fwd: ports.BatchItem{Session: sess, Tokens: tokens, Opts: opts}}
	m.s.submit(c)
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.fres.Result, c.fres.Err
}

// ForwardTree runs sess's ForwardTree (a ports.TreeVerifier) in the next forward round, on its own: the
// other members' blocks of that round still run batched beside it.
func (m *Member) ForwardTree(ctx context.Context, sess ports.Session, tokens []ports.Token, parents []int, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	if m.left {
		return ports.ForwardResult{}, fmt.Errorf("batch: forward after Leave")
	}
	c := &call{m: m, ctx: ctx, fwd: ports.BatchItem{Session: sess, Tokens: tokens, Opts: opts}, tree: parents}
	m.s.submit(c)
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.fres.Result, c.fres.Err
}

// DraftTop runs the DraftTop of it.Session (a ports.TopDrafter) with top's candidates per slot in the next
// draft round, on its own.
func (m *Member) DraftTop(ctx context.Context, it ports.DraftItem, top ports.TopRequest) (ports.Proposal, error) {
	if m.left {
		return ports.Proposal{}, fmt.Errorf("batch: draft after Leave")
	}
	top.K = max(top.K, 1)
	c := &call{m: m, ctx: ctx, drf: it, isDraft: true, top: top}
	m.s.submit(c)
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.dres.Proposal, c.dres.Err
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

// RoundCost is the batched round's cost for this member (a speculative.BatchCost): the expected time in
// nanoseconds of a round in which every one of the batch's members verifies rows rows — the draft phase when
// rows > 1, then one target forward of members × rows rows — and the number of other members. Pricing the
// round as if every member chose like this one is what keeps the members from each speculating because the
// others do (with the others' rows taken as given, a few rows more always look cheap, yet all of them
// speculating can be slower than all decoding plainly); members whose drafts are accepted less still choose
// smaller blocks, or plain decoding, by their own acceptance. ok is false while the member is alone (its own
// measurements then say everything) or the costs at that size cannot be estimated yet.
func (m *Member) RoundCost(rows int) (ns, others float64, ok bool) {
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.members)
	if _, in := s.members[m]; !in || n < 2 {
		return 0, 0, false
	}
	f, ok := estimate(s.fcost, n*rows)
	if !ok {
		return 0, 0, false
	}
	if rows > 1 {
		d, ok := estimate(s.dcost, n)
		if !ok {
			return 0, 0, false
		}
		f += d
	}
	return f, float64(n - 1), true
}

// estimate reads a cost table keyed by size: measured, or linear between the nearest measured sizes, or
// extrapolated from the two nearest on one side (never below the nearest measured one when larger, never
// above it nor below its proportional share when smaller); the caller holds the lock.
func estimate(costs map[int]*ema, size int) (float64, bool) {
	if e := costs[size]; e != nil {
		return e.v, true
	}
	lo, lo2, hi, hi2 := 0, 0, 0, 0
	for r := range costs {
		switch {
		case r < size && r > lo:
			lo, lo2 = r, lo
		case r < size && r > lo2:
			lo2 = r
		case r > size && (hi == 0 || r < hi):
			hi, hi2 = r, hi
		case r > size && (hi2 == 0 || r < hi2):
			hi2 = r
		}
	}
	at := func(r int) float64 { return costs[r].v }
	line := func(a, b int) float64 {
		return at(a) + (at(b)-at(a))*float64(size-a)/float64(b-a)
	}
	switch {
	case lo > 0 && hi > 0:
		return line(lo, hi), true
	case lo > 0 && lo2 > 0:
		return max(line(lo2, lo), at(lo)), true
	case hi > 0 && hi2 > 0:
		return min(max(line(hi, hi2), at(hi)*float64(size)/float64(hi)), at(hi)), true
	}
	return 0, false
}
