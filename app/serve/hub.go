package serve

import (
	"sync"
	"sync/atomic"

	"github.com/higgs-go/higgs/ports"
)

// eventBuffer is each subscriber's queue: a page drawing at 60 frames per second keeps up with any decode
// rate; one that stalls loses events (counted) instead of slowing generation.
const eventBuffer = 1024

// hub fans events out to subscribers (ports.EventSource), each within its scope. Publishing never blocks;
// with no subscriber, the callers' active check is one atomic load and nothing is built.
type hub struct {
	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	n     atomic.Int32
	hello func() ports.Event
}

type subscriber struct {
	ch      chan ports.Event
	scope   ports.EventScope
	dropped int
}

// sees reports whether the subscriber may see the generations of tenant.
func (s *subscriber) sees(tenant ports.Tenant) bool { return s.scope.All || s.scope.Tenant == tenant }

var _ ports.EventSource = (*hub)(nil)

func newHub(hello func() ports.Event) *hub {
	return &hub{subs: map[*subscriber]struct{}{}, hello: hello}
}

// active reports whether anyone listens; callers check it before building an event.
func (h *hub) active() bool { return h.n.Load() > 0 }

// Subscribe implements ports.EventSource.
func (h *hub) Subscribe(scope ports.EventScope) (<-chan ports.Event, func()) {
	s := &subscriber{ch: make(chan ports.Event, eventBuffer), scope: scope}
	s.ch <- h.hello()
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.n.Add(1)
	h.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.n.Add(-1)
			close(s.ch)
			h.mu.Unlock()
		})
	}
}

// publish hands an event of one of tenant's generations to every subscriber that may see it and has room.
func (h *hub) publish(tenant ports.Tenant, ev ports.Event) {
	h.send(ev, func(s *subscriber) bool { return s.sees(tenant) })
}

// broadcast hands a server-wide event (the queue's load) to every subscriber that has room.
func (h *hub) broadcast(ev ports.Event) {
	h.send(ev, func(*subscriber) bool { return true })
}

func (h *hub) send(ev ports.Event, to func(*subscriber) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if !to(s) {
			continue
		}
		e := ev
		e.Dropped = s.dropped
		select {
		case s.ch <- e:
			s.dropped = 0
		default:
			s.dropped++
		}
	}
}
