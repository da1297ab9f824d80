package fleet

import (
	"sync"

	"github.com/higgs-go/higgs/ports"
)

// eventBuffer is a subscriber's queue, as each Serve's: one that stalls loses events instead of slowing
// generation or a load.
const eventBuffer = 1024

// feed is the fleet's ports.EventSource: every model's Serve events (each Serve's hub keeps its tenancy
// scope) merged with the fleet's own model events (loads, unloads), after one hello.
type feed struct {
	f    *Fleet
	mu   sync.Mutex
	subs map[chan ports.Event]struct{}
}

var _ ports.EventSource = (*feed)(nil)

func newFeed(f *Fleet) *feed { return &feed{f: f, subs: map[chan ports.Event]struct{}{}} }

// model publishes a model's change of state to every subscriber that has room (model events are server-wide,
// like the queue's: they carry no tenant's data).
func (d *feed) model(ev ports.ModelEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.subs) == 0 {
		return
	}
	e := ports.Event{Type: "model", TimeMS: d.f.clock.Now().UnixMilli(), Model: &ev}
	for ch := range d.subs {
		select {
		case ch <- e:
		default:
		}
	}
}

// Subscribe implements ports.EventSource: the first model's hello (named after the default model when it is
// not loaded yet), then every model's events within scope and the model events.
func (d *feed) Subscribe(scope ports.EventScope) (<-chan ports.Event, func()) {
	out := make(chan ports.Event, eventBuffer)
	stop := make(chan struct{})
	own := make(chan ports.Event, eventBuffer)
	d.mu.Lock()
	d.subs[own] = struct{}{}
	d.mu.Unlock()
	var wg sync.WaitGroup
	forward := func(src <-chan ports.Event) {
		defer wg.Done()
		for ev := range src {
			if ev.Type == "hello" {
				continue // the subscription's one hello was sent first
			}
			select {
			case out <- ev:
			case <-stop:
				// Drain src until its cancel closes it.
				for range src {
				}
				return
			}
		}
	}
	cancels := make([]func(), 0, len(d.f.entries))
	for i, e := range d.f.entries {
		ch, cancel := e.serve.Events().Subscribe(scope)
		if i == 0 {
			// The hello must come first: take it before any other source may send.
			ev := <-ch
			if ev.Hello != nil && ev.Hello.Model == "" {
				ev.Hello.Model = e.Name
			}
			out <- ev
		}
		cancels = append(cancels, cancel)
		wg.Add(1)
		go forward(ch)
	}
	wg.Add(1)
	go forward(own)
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(stop)
			for _, c := range cancels {
				c()
			}
			d.mu.Lock()
			delete(d.subs, own)
			close(own)
			d.mu.Unlock()
			wg.Wait()
			close(out)
		})
	}
}
