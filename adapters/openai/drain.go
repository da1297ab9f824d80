package openai

import (
	"context"
	"net/http"
	"sync"
)

// drainer tracks generation requests in flight so that shutdown can wait for them while the listener stays
// open: /health then answers 503 draining (a load balancer takes the instance out) instead of the
// connection being refused, and new generation requests get a 503 they can retry elsewhere.
type drainer struct {
	mu       sync.Mutex
	draining bool
	n        int
	idle     chan struct{} // closed once draining and nothing is in flight
	started  chan struct{} // closed when draining starts (ends the event streams)
}

func newDrainer() *drainer { return &drainer{idle: make(chan struct{}), started: make(chan struct{})} }

// enter admits a generation request; false once draining.
func (d *drainer) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return false
	}
	d.n++
	return true
}

func (d *drainer) leave() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n--
	if d.draining && d.n == 0 {
		close(d.idle)
	}
}

func (d *drainer) start() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.draining {
		d.draining = true
		close(d.started)
		if d.n == 0 {
			close(d.idle)
		}
	}
	return d.idle
}

func (d *drainer) isDraining() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.draining
}

// Drain starts draining and waits until the generation requests in flight have ended, or ctx ends (its error
// is returned then). From the first call /health answers 503 {"status":"draining"}, new generation requests
// get 503 with code "shutting_down", and event streams end; the other routes keep answering. Call it before
// http.Server.Shutdown, which closes the listener.
func (s *Server) Drain(ctx context.Context) error {
	select {
	case <-s.drain.start():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errShuttingDown answers generation requests that arrive while draining.
var errShuttingDown = &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
	Message: "the server is shutting down; retry on another instance", RetryAfter: 5}
