package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrOverBudget is wrapped by Budget.Reserve when a request needs more bytes than the whole budget: it could
// never run, however long it waited.
var ErrOverBudget = errors.New("request needs more memory than the budget")

// Budget is the memory admission policy: each request reserves the bytes its sequence can grow to (KV cache
// and recurrent state for its prompt and its whole token budget, the drafter's context) before it joins,
// so the sum over running requests never passes the budget whatever the arrival pattern. Requests are
// admitted first come first served: one that does not fit waits, and the ones behind it wait too (a large
// request is never starved by a stream of small ones). Safe for concurrent use.
type Budget struct {
	total int64
	mu    sync.Mutex
	used  int64
	queue []*reservation // waiting, oldest first
}

type reservation struct {
	n     int64
	ready chan struct{} // closed when granted
}

// NewBudget returns a budget of total bytes (> 0).
func NewBudget(total int64) (*Budget, error) {
	if total <= 0 {
		return nil, fmt.Errorf("memory budget %d bytes must be > 0", total)
	}
	return &Budget{total: total}, nil
}

// Total returns the budget in bytes.
func (b *Budget) Total() int64 { return b.total }

// Used returns the bytes reserved now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Waiting returns the number of reservations waiting.
func (b *Budget) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Reserve waits until n bytes fit beside what is reserved and every earlier waiter has been served, then
// reserves them. It fails at once with an error wrapping ErrOverBudget when n exceeds the budget, and with
// ctx's error when ctx ends first (nothing is then reserved). The returned release gives the bytes back; it
// must be called once (later calls do nothing).
func (b *Budget) Reserve(ctx context.Context, n int64) (release func(), err error) {
	if n < 0 {
		return nil, fmt.Errorf("reserve %d bytes: negative", n)
	}
	if n > b.total {
		return nil, fmt.Errorf("%w: %d bytes needed, budget %d bytes", ErrOverBudget, n, b.total)
	}
	r := &reservation{n: n, ready: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	b.grant()
	b.mu.Unlock()
	select {
	case <-r.ready:
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-r.ready:
			// Granted while ctx ended: give it back.
			b.used -= n
		default:
			for i, x := range b.queue {
				if x == r {
					b.queue = append(b.queue[:i], b.queue[i+1:]...)
					break
				}
			}
		}
		// The head may have changed: those behind it may fit now.
		b.grant()
		b.mu.Unlock()
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.used -= n
			b.grant()
			b.mu.Unlock()
		})
	}, nil
}

// grant admits waiters from the head of the queue while they fit; the caller holds the lock.
func (b *Budget) grant() {
	for len(b.queue) > 0 && b.used+b.queue[0].n <= b.total {
		r := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.used += r.n
		close(r.ready)
	}
}
