package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/higgs-go/higgs/ports"
)

// Timer is the clock ability the scheduler waits with: After returns a channel that receives once the clock
// has advanced by d (time.After on the system clock; a test's manual clock fires it when advanced).
type Timer interface {
	After(d time.Duration) <-chan time.Time
}

// Clock is what the scheduler measures and waits with.
type Clock interface {
	ports.Clock
	Timer
}

// DefaultMaxWait is Config.MaxWait's default: long enough for members to come back with their next call
// after accepting, rolling back and emitting (microseconds when nothing blocks), short beside a round.
const DefaultMaxWait = 2 * time.Millisecond

// Config tunes a Scheduler. The zero value means the defaults.
type Config struct {
	// MaxWait bounds how long a round waits for active members that have not submitted a call, from the
	// moment the scheduler is free with a call pending (default DefaultMaxWait; negative: never wait, each
	// round takes what is pending).
	MaxWait time.Duration
	// Observe, when non-nil, is called after each round with its account, on the scheduler's goroutine
	// (keep it quick: the next round waits for it).
	Observe func(Round)
}

// RoundKind says what a round ran.
type RoundKind string

// Round kinds.
const (
	RoundForward RoundKind = "forward" // target forwards: verifies, plain steps, prefill chunks, recomputes
	RoundDraft   RoundKind = "draft"   // drafter calls
)

// Round is one round's account.
type Round struct {
	Kind RoundKind
	// Sequences is the number of members in the round; Rows the tokens the target ran (forward rounds) or
	// the block slots drafted (draft rounds).
	Sequences, Rows int
	// Batched says the round was one batched call (else its items ran one after another).
	Batched bool
	// Duration is the round's compute time; Wait how long the oldest call in it waited for the round.
	Duration, Wait time.Duration
}

// Scheduler forms the rounds. Create it with New and give each generation a Member (Join) for as long as it
// decodes; rounds run on a goroutine of the scheduler's own while it has members. It is safe for
// concurrent use.
type Scheduler struct {
	cfg   Config
	clock Clock
	fwd   ports.BatchForwarder // nil: the target cannot batch
	drf   ports.BatchDrafter   // nil: the drafter cannot batch (or there is none)

	wake chan struct{}

	mu sync.Mutex
	// dispatching says the dispatcher goroutine runs (from the first Join to the last Leave).
	dispatching bool
	members     map[*Member]struct{}
	forwards    []*call
	drafts      []*call
	// free is when the scheduler last became free (the end of its latest round).
	free time.Time
	// fcost[rows] is the moving average of a forward round's time by its total rows, dcost[n] a draft
	// round's by its number of sequences (RoundCost's tables).
	fcost, dcost map[int]*ema
}

// New returns a scheduler for target's sessions and drafter's (drafter may be nil). It batches through the
// ports.BatchForwarder and ports.BatchDrafter abilities when they are there.
func New(cfg Config, clock Clock, target ports.Target, drafter ports.Drafter) (*Scheduler, error) {
	var errs []error
	if clock == nil {
		errs = append(errs, errors.New("nil clock"))
	}
	if target == nil {
		errs = append(errs, errors.New("nil target"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("batch scheduler: %w", err)
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	s := &Scheduler{cfg: cfg, clock: clock, wake: make(chan struct{}, 1), members: map[*Member]struct{}{},
		fcost: map[int]*ema{}, dcost: map[int]*ema{}}
	s.fwd, _ = target.(ports.BatchForwarder)
	if drafter != nil {
		s.drf, _ = drafter.(ports.BatchDrafter)
	}
	return s, nil
}

// Batching reports whether forwards and drafts run as batched calls (false: one after another).
func (s *Scheduler) Batching() (forward, draft bool) { return s.fwd != nil, s.drf != nil }

// call is one member's submitted Forward or Draft.
type call struct {
	m   *Member
	ctx context.Context
	at  time.Time
	fwd ports.BatchItem
	drf ports.DraftItem
	// isDraft says which of fwd and drf this is.
	isDraft bool
	// tree, for a forward, holds a verification tree's parents (ports.TreeVerifier); top, for a draft, the
	// candidates asked for (ports.TopDrafter; K > 0). Such a call runs on its own in its round: the batched
	// ports take chains and plain drafts only.
	tree []int
	top  ports.TopRequest
	// running is set (under the scheduler's lock) when a round takes the call.
	running bool
	fres    ports.BatchResult
	dres    ports.DraftResult
	// panicked holds what the backend panicked with while running the call (or its batch): the member
	// panics with it on its own goroutine, as an unbatched call would have.
	panicked any
	done     chan struct{}
}

// guard runs f, recording a panic of f in every call of calls instead of crashing the scheduler.
func guard(calls []*call, f func()) {
	defer func() {
		if r := recover(); r != nil {
			for _, c := range calls {
				c.panicked = r
			}
		}
	}()
	f()
}

// dispatch forms and runs rounds while the scheduler has members; Join starts it, and it returns once the
// last member has left (so an idle scheduler holds no goroutine). Batched calls run under a context of their
// own, not a member's: a member's cancellation withdraws its pending call but does not abort the others'
// round (which ends within one forward); a round run one item after another runs each under its own
// member's context.
func (s *Scheduler) dispatch() {
	ctx := context.Background()
	// expired says the last wait's timer fired: the round then runs whatever the clock says, since a clock
	// whose timers are not its own (a frozen test clock beside real timers) may never show the wait as over.
	expired := false
	for {
		calls, kind, wait, idle := s.next(expired)
		expired = false
		if idle {
			return
		}
		if calls != nil {
			s.run(ctx, kind, calls)
			continue
		}
		var timer <-chan time.Time
		if wait > 0 {
			timer = s.clock.After(wait)
		}
		select {
		case <-s.wake:
		case <-timer:
			expired = true
		}
	}
}

// next takes the calls of the next round, or says how long to wait for one (0: until woken), or that the
// scheduler is idle (no member left: the dispatcher stops). expired runs a round of what is pending without
// waiting for the missing members.
func (s *Scheduler) next(expired bool) (calls []*call, kind RoundKind, wait time.Duration, idle bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pending := len(s.forwards) + len(s.drafts)
	if pending == 0 {
		if len(s.members) == 0 {
			s.dispatching = false
			return nil, "", 0, true
		}
		return nil, "", 0, false
	}
	if !expired && pending < len(s.members) && s.cfg.MaxWait > 0 {
		// The wait counts from the scheduler being free with the oldest call pending: a call that came
		// while a round ran has not waited for the missing members yet.
		start := s.oldestSince()
		if waited := s.clock.Now().Sub(start); waited < s.cfg.MaxWait {
			return nil, "", s.cfg.MaxWait - waited, false
		}
	}
	// Drafts first: the members that draft come back with their verifies, which join the forwards already
	// pending in one target forward.
	kind = RoundForward
	if len(s.drafts) > 0 {
		calls, s.drafts, kind = s.drafts, nil, RoundDraft
	} else {
		calls, s.forwards = s.forwards, nil
	}
	for _, c := range calls {
		c.running = true
	}
	return calls, kind, 0, false
}

// oldestSince returns the later of free and the oldest pending call's submission time.
func (s *Scheduler) oldestSince() time.Time {
	var oldest time.Time
	for _, cs := range [][]*call{s.forwards, s.drafts} {
		for _, c := range cs {
			if oldest.IsZero() || c.at.Before(oldest) {
				oldest = c.at
			}
		}
	}
	return later(oldest, s.free)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// run runs one round and hands every call its result.
func (s *Scheduler) run(ctx context.Context, kind RoundKind, calls []*call) {
	t0 := s.clock.Now()
	var oldest time.Time
	// rows and shared/sharedRows count the round's calls and those of its shared part (the calls that are
	// not solo ones): the cost tables price shared rounds, which a solo call's rows and time would distort.
	rows, shared, sharedRows := 0, 0, 0
	for _, c := range calls {
		if oldest.IsZero() || c.at.Before(oldest) {
			oldest = c.at
		}
		n := len(c.fwd.Tokens)
		if c.isDraft {
			n = c.drf.BlockSize
		}
		rows += n
		if !c.solo() {
			shared++
			sharedRows += n
		}
	}
	var batched bool
	var solo time.Duration
	if kind == RoundDraft {
		batched, solo = s.draftRound(ctx, calls)
	} else {
		batched, solo = s.forwardRound(ctx, calls)
	}
	end := s.clock.Now()
	d := end.Sub(t0)
	s.mu.Lock()
	s.free = end
	if shared > 0 {
		table, key := s.fcost, sharedRows
		if kind == RoundDraft {
			table, key = s.dcost, shared
		}
		e := table[key]
		if e == nil {
			e = &ema{}
			table[key] = e
		}
		e.add(float64(max(0, d-solo)))
	}
	s.mu.Unlock()
	if s.cfg.Observe != nil {
		s.cfg.Observe(Round{Kind: kind, Sequences: len(calls), Rows: rows, Batched: batched, Duration: d,
			Wait: t0.Sub(oldest)})
	}
	for _, c := range calls {
		close(c.done)
	}
}

// forwardRound runs the target forwards of calls: one ForwardBatch when the target can and there are
// several, else one Forward each under its member's context; a tree's forward runs on its own first (alone).
// It reports whether it batched and the time the solo calls took.
func (s *Scheduler) forwardRound(ctx context.Context, calls []*call) (bool, time.Duration) {
	calls, solo := s.alone(calls, func(c *call) {
		tv, ok := c.fwd.Session.(ports.TreeVerifier)
		if !ok {
			c.fres = ports.BatchResult{Err: fmt.Errorf("tree forward: session %T cannot verify trees: %w", c.fwd.Session, errors.ErrUnsupported)}
			return
		}
		fr, err := tv.ForwardTree(c.ctx, c.fwd.Tokens, c.tree, c.fwd.Opts)
		c.fres = ports.BatchResult{Result: fr, Err: err}
	})
	if s.fwd != nil && len(calls) > 1 {
		items := make([]ports.BatchItem, len(calls))
		for i, c := range calls {
			items[i] = c.fwd
		}
		var res []ports.BatchResult
		var err error
		guard(calls, func() { res, err = s.fwd.ForwardBatch(ctx, items) })
		if err == nil && len(res) != len(items) {
			err = fmt.Errorf("batched forward returned %d results for %d blocks", len(res), len(items))
		}
		for i, c := range calls {
			if err != nil {
				c.fres = ports.BatchResult{Err: fmt.Errorf("batched forward of %d sequences: %w", len(calls), err)}
				continue
			}
			c.fres = res[i]
		}
		return true, solo
	}
	for _, c := range calls {
		guard([]*call{c}, func() {
			fr, err := c.fwd.Session.Forward(c.ctx, c.fwd.Tokens, c.fwd.Opts)
			c.fres = ports.BatchResult{Result: fr, Err: err}
		})
	}
	return false, solo
}

// draftRound is forwardRound for drafts.
func (s *Scheduler) draftRound(ctx context.Context, calls []*call) (bool, time.Duration) {
	calls, solo := s.alone(calls, func(c *call) {
		td, ok := c.drf.Session.(ports.TopDrafter)
		if !ok {
			c.dres = ports.DraftResult{Err: fmt.Errorf("draft with candidates: draft session %T cannot list them: %w", c.drf.Session, errors.ErrUnsupported)}
			return
		}
		p, err := td.DraftTop(c.ctx, c.drf.Anchor, c.drf.NewCtx, c.drf.BlockSize, c.top)
		c.dres = ports.DraftResult{Proposal: p, Err: err}
	})
	if s.drf != nil && len(calls) > 1 {
		items := make([]ports.DraftItem, len(calls))
		for i, c := range calls {
			items[i] = c.drf
		}
		var res []ports.DraftResult
		var err error
		guard(calls, func() { res, err = s.drf.DraftBatch(ctx, items) })
		if err == nil && len(res) != len(items) {
			err = fmt.Errorf("batched draft returned %d results for %d sequences", len(res), len(items))
		}
		for i, c := range calls {
			if err != nil {
				c.dres = ports.DraftResult{Err: fmt.Errorf("batched draft of %d sequences: %w", len(calls), err)}
				continue
			}
			c.dres = res[i]
		}
		return true, solo
	}
	for _, c := range calls {
		guard([]*call{c}, func() { c.dres = draftOne(c.ctx, c.drf) })
	}
	return false, solo
}

// alone runs, one by one under their members' contexts, the calls of a round the batched ports cannot take
// (call.solo), and returns the others and the time the solo calls took.
func (s *Scheduler) alone(calls []*call, run func(*call)) ([]*call, time.Duration) {
	rest := calls[:0:0]
	var took time.Duration
	for _, c := range calls {
		if !c.solo() {
			rest = append(rest, c)
			continue
		}
		t0 := s.clock.Now()
		guard([]*call{c}, func() { run(c) })
		took += s.clock.Now().Sub(t0)
	}
	return rest, took
}

// solo reports whether c runs on its own in its round: a tree's forward or a draft with candidates.
func (c *call) solo() bool { return c.tree != nil || c.top.K > 0 }

// draftOne is a draft item's solo call.
func draftOne(ctx context.Context, it ports.DraftItem) ports.DraftResult {
	if it.Temperature > 0 {
		sd, ok := it.Session.(ports.SamplingDrafter)
		if !ok {
			return ports.DraftResult{Err: fmt.Errorf("sampled draft: draft session %T cannot sample: %w", it.Session, errors.ErrUnsupported)}
		}
		p, err := sd.DraftSampled(ctx, it.Anchor, it.NewCtx, it.BlockSize, it.Temperature, it.Rand)
		return ports.DraftResult{Proposal: p, Err: err}
	}
	p, err := it.Session.Draft(ctx, it.Anchor, it.NewCtx, it.BlockSize)
	return ports.DraftResult{Proposal: p, Err: err}
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// submit queues c and waits for its round. A call still pending when ctx ends is withdrawn (ctx's error);
// one already running is waited for, since its session is in use until the round ends.
func (s *Scheduler) submit(c *call) {
	c.done = make(chan struct{})
	s.mu.Lock()
	c.at = s.clock.Now()
	if c.isDraft {
		s.drafts = append(s.drafts, c)
	} else {
		s.forwards = append(s.forwards, c)
	}
	s.mu.Unlock()
	s.poke()
	select {
	case <-c.done:
		return
	case <-c.ctx.Done():
	}
	s.mu.Lock()
	if !c.running && s.withdraw(c) {
		s.mu.Unlock()
		err := c.ctx.Err()
		c.fres.Err, c.dres.Err = err, err
		return
	}
	s.mu.Unlock()
	<-c.done
}

// withdraw removes a pending call; the caller holds the lock. It reports whether c was pending.
func (s *Scheduler) withdraw(c *call) bool {
	list := &s.forwards
	if c.isDraft {
		list = &s.drafts
	}
	for i, x := range *list {
		if x == c {
			*list = append((*list)[:i], (*list)[i+1:]...)
			return true
		}
	}
	return false
}

// ema is an exponential moving average that starts at its first sample.
type ema struct {
	v  float64
	ok bool
}

// emaWeight is the weight of the newest sample.
const emaWeight = 0.2

func (e *ema) add(x float64) {
	if !e.ok {
		e.v, e.ok = x, true
		return
	}
	e.v += emaWeight * (x - e.v)
}
