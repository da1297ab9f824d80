package route

import (
	"sync"

	"github.com/higgs-go/higgs/ports"
)

// eventBuffer is each subscriber's queue, as the local generator's.
const eventBuffer = 1024

// events merges the local generator's event stream with the router's own events (routed requests' start
// and end), each subscriber seeing only its scope. Publishing never blocks: a subscriber that does not keep
// up loses events, counted in the next one it gets.
type events struct {
	local ports.EventSource
	mu    sync.Mutex
	subs  map[*subscriber]struct{}
}

type subscriber struct {
	scope   ports.EventScope
	mu      sync.Mutex
	ch      chan ports.Event
	closed  bool
	dropped int
}

var _ ports.EventSource = (*events)(nil)

func newEvents(local ports.EventSource) *events {
	return &events{local: local, subs: map[*subscriber]struct{}{}}
}

// deliver queues ev without blocking; a full queue drops it and counts the loss.
func (s *subscriber) deliver(ev ports.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	ev.Dropped += s.dropped
	select {
	case s.ch <- ev:
		s.dropped = 0
	default:
		s.dropped = ev.Dropped + 1
	}
}

func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(s.ch)
}

// Subscribe implements ports.EventSource. Without a local stream the router says hello itself.
func (e *events) Subscribe(scope ports.EventScope) (<-chan ports.Event, func()) {
	s := &subscriber{scope: scope, ch: make(chan ports.Event, eventBuffer)}
	var localCancel func()
	done := make(chan struct{})
	if e.local != nil {
		var in <-chan ports.Event
		in, localCancel = e.local.Subscribe(scope)
		// The local stream's hello is its first event: taken here, it comes before any routed event.
		if hello, ok := <-in; ok {
			s.deliver(hello)
		}
		go func() {
			defer close(done)
			for ev := range in {
				s.deliver(ev)
			}
		}()
	} else {
		s.deliver(ports.Event{Type: "hello", Hello: &ports.HelloEvent{}})
		close(done)
	}
	e.mu.Lock()
	e.subs[s] = struct{}{}
	e.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			e.mu.Lock()
			delete(e.subs, s)
			e.mu.Unlock()
			if localCancel != nil {
				localCancel() // closes in: the forwarding goroutine ends
			}
			<-done
			s.close()
		})
	}
}

// publish sends ev to the subscribers that see tenant's generations.
func (e *events) publish(tenant ports.Tenant, ev ports.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for s := range e.subs {
		if s.scope.All || s.scope.Tenant == tenant {
			s.deliver(ev)
		}
	}
}
