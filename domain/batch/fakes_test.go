package batch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// manualClock is a clock that moves only when the test advances it; After's channels fire then.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock and fires the timers that are due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// timers returns the number of pending timers.
func (c *manualClock) timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// plainTarget and plainDrafter hide every ability but the required ones (portfake's own batched calls
// among them), so the scheduler runs their rounds one item after another.
type plainTarget struct{ ports.Target }

type plainDrafter struct{ ports.Drafter }

// batchTarget is portfake's model with a ForwardBatch that runs its items one by one (each item is then
// trivially its solo call) and records each batch's size, optionally refusing items or failing a batch.
type batchTarget struct {
	*portfake.Model
	mu      sync.Mutex
	batches [][]int // per batch: each item's block length
	// refuse, when set, is an item's own refusal (BatchResult.Err) for the tokens it would run.
	refuse func(tokens []ports.Token) error
	// fail makes the next batch fail as a whole.
	fail error
	// cost advances clock by the batch's simulated time.
	clock *manualClock
	cost  func(rows int) time.Duration
}

func (b *batchTarget) ForwardBatch(ctx context.Context, items []ports.BatchItem) ([]ports.BatchResult, error) {
	b.mu.Lock()
	sizes := make([]int, len(items))
	rows := 0
	for i, it := range items {
		sizes[i] = len(it.Tokens)
		rows += len(it.Tokens)
	}
	b.batches = append(b.batches, sizes)
	fail := b.fail
	b.fail = nil
	b.mu.Unlock()
	if b.cost != nil {
		b.clock.Advance(b.cost(rows))
	}
	if fail != nil {
		return nil, fail
	}
	out := make([]ports.BatchResult, len(items))
	for i, it := range items {
		if b.refuse != nil {
			if err := b.refuse(it.Tokens); err != nil {
				out[i].Err = err
				continue
			}
		}
		fr, err := it.Session.Forward(ctx, it.Tokens, it.Opts)
		if err != nil {
			return nil, err
		}
		out[i].Result = fr
	}
	return out, nil
}

func (b *batchTarget) sizes() [][]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]int(nil), b.batches...)
}

// batchDrafter is portfake's drafter with a DraftBatch that runs its items one by one and records sizes.
type batchDrafter struct {
	*portfake.Drafter
	mu      sync.Mutex
	batches []int
}

func (b *batchDrafter) DraftBatch(ctx context.Context, items []ports.DraftItem) ([]ports.DraftResult, error) {
	b.mu.Lock()
	b.batches = append(b.batches, len(items))
	b.mu.Unlock()
	out := make([]ports.DraftResult, len(items))
	for i, it := range items {
		out[i] = draftOne(ctx, it)
		if out[i].Err != nil && errors.Is(out[i].Err, context.Canceled) {
			return nil, out[i].Err
		}
	}
	return out, nil
}

func (b *batchDrafter) sizes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.batches...)
}
