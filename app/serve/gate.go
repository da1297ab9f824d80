package serve

import (
	"context"
	"sync"

	"github.com/higgs-go/higgs/ports"
)

// gate is the bounded queue in front of the engine: at most `slots` generations run at once and at most
// `queue` more wait; a request beyond that is refused with ports.ErrBusy instead of piling up.
type gate struct {
	slots chan struct{}
	queue int
	mu    sync.Mutex
	wait  int
	// changed, when set, is called (outside the lock) after the number waiting or running changed.
	changed func()
}

func newGate(concurrency, queue int) *gate {
	return &gate{slots: make(chan struct{}, concurrency), queue: queue}
}

// acquire waits for a slot. It fails with ports.ErrBusy when the queue is full, or with ctx's error when ctx
// ends first (the request then leaves the queue). The returned release must be called exactly once.
func (g *gate) acquire(ctx context.Context) (release func(), err error) {
	release = func() { <-g.slots; g.notify() }
	select {
	case g.slots <- struct{}{}:
		g.notify()
		return release, nil
	default:
	}
	g.mu.Lock()
	if g.wait >= g.queue {
		g.mu.Unlock()
		return nil, ports.ErrBusy
	}
	g.wait++
	g.mu.Unlock()
	g.notify()
	defer func() {
		g.mu.Lock()
		g.wait--
		g.mu.Unlock()
		g.notify()
	}()
	select {
	case g.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *gate) notify() {
	if g.changed != nil {
		g.changed()
	}
}

// running returns the number of generations holding a slot.
func (g *gate) running() int { return len(g.slots) }

// waiting returns the number of queued requests.
func (g *gate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wait
}
