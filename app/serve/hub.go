package serve

import (
	"sync"
	"sync/atomic"

	"github.com/higgs-go/higgs/ports"
)

// eventBuffer is each subscriber's queue: a page drawing at 60 frames per second keeps up with any decode
// rate; one that stalls loses events (counted) instead of slowing generation.
const eventBuffer = 1024

// hub fans events out to subscribers (ports.EventSource). Publishing never blocks; with no subscriber, the
// callers' active check is one atomic load and nothing is built.
type hub struct {
	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	n     atomic.Int32
	hello func() ports.Event
}

type subscriber struct {
	ch      chan ports.Event
	dropped int
}

var _ ports.EventSource = (*hub)(nil)

func newHub(hello func() ports.Event) *hub {
	return &hub{subs: map[*subscriber]struct{}{}, hello: hello}
}

// active reports whether anyone listens; callers check it before building an event.
func (h *hub) active() bool { return h.n.Load() > 0 }

// Subscribe implements ports.EventSource.
func (h *hub) Subscribe() (<-chan ports.Event, func()) {
	s := &subscriber{ch: make(chan ports.Event, eventBuffer)}
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

// publish hands ev to every subscriber that has room.
func (h *hub) publish(ev ports.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
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
