package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ErrShutdown is the cause (context.Cause) of a work request's context cancelled by Drain because the request
// was still running at the shutdown deadline. Its API ends it with its own terminal event, or, when nothing
// was sent yet, a 503 in its own shape; Cut tells a handler that this happened, Cause maps the error.
var ErrShutdown = errors.New("the server shut down before the request finished")

// DrainRetryAfter is the Retry-After, in seconds, of a request refused or cut by shutdown: another instance,
// or this one restarted, can take it.
const DrainRetryAfter = 5

// lifecycle tracks the work requests (those Work wraps: generations) in flight, so that shutdown can let them
// finish while the listener stays open, then cut the ones still running.
type lifecycle struct {
	mu       sync.Mutex
	draining bool
	started  chan struct{} // closed when draining starts
	idle     chan struct{} // closed once draining and nothing is in flight
	running  map[*work]struct{}
	refused  int
}

// work is one request in flight: its context's cancel, and whether Drain cut it.
type work struct {
	cancel context.CancelCauseFunc
	cut    bool
}

func newLifecycle() *lifecycle {
	return &lifecycle{started: make(chan struct{}), idle: make(chan struct{}), running: map[*work]struct{}{}}
}

// enter admits a request; nil once draining (the refusal is counted).
func (l *lifecycle) enter(cancel context.CancelCauseFunc) *work {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.draining {
		l.refused++
		return nil
	}
	wk := &work{cancel: cancel}
	l.running[wk] = struct{}{}
	return wk
}

func (l *lifecycle) leave(wk *work) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, wk)
	if l.draining && len(l.running) == 0 {
		close(l.idle)
	}
}

// start begins draining (once) and returns the requests in flight then.
func (l *lifecycle) start() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.draining {
		l.draining = true
		close(l.started)
		if len(l.running) == 0 {
			close(l.idle)
		}
	}
	return len(l.running)
}

// cut cancels every request in flight with ErrShutdown and returns how many it cut.
func (l *lifecycle) cut() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for wk := range l.running {
		if !wk.cut {
			wk.cut = true
			wk.cancel(ErrShutdown)
			n++
		}
	}
	return n
}

func (l *lifecycle) counts() (running, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.running), l.refused
}

// Work wraps a route whose requests are work that shutdown must account for (a generation): Drain waits for
// them, then cuts them. While the Server drains, a new request is refused without its body being read:
// Work sets the Retry-After header (DrainRetryAfter) and calls refuse, which answers 503 with the API's own
// error body. Otherwise the request runs with a context that Drain cancels, with cause ErrShutdown, when the
// shutdown deadline passes; its handler then ends it with the API's terminal event (see Cut, Cause). Wrap
// inside the API's authentication and panic recovery.
func (s *Server) Work(h http.Handler, refuse http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		wk := s.life.enter(cancel)
		if wk == nil {
			RefuseUnread(w, r)
			w.Header().Set("Retry-After", strconv.Itoa(DrainRetryAfter))
			refuse(w, r)
			return
		}
		start := time.Now()
		defer func() {
			if Cut(ctx) {
				s.log.Warn().Str("method", r.Method).Str("path", r.URL.Path).Dur("after", time.Since(start)).
					Msg("request cut: still running at the shutdown deadline")
			}
			s.life.leave(wk)
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Draining returns a channel closed when the Server starts draining: /health says so, and streams that never
// end by themselves (the live event stream) end then.
func (s *Server) Draining() <-chan struct{} { return s.life.started }

// DrainReport is what Drain did.
type DrainReport struct {
	// InFlight is the work requests running when draining started; Finished of them ended by themselves
	// before the deadline (a client that left included), Cut were still running at the deadline and were
	// cancelled with ErrShutdown. Unended of the cut ones had not returned when Drain gave up waiting.
	InFlight, Finished, Cut, Unended int
	// Refused is the new work requests answered 503 since draining started.
	Refused int
	// Took is the time Drain took.
	Took time.Duration
}

// Drain starts draining and waits for the work requests in flight until ctx ends (the shutdown deadline).
// From its first call Draining is closed and new work requests are refused (Work); other routes keep
// answering. At the deadline it cuts what still runs (each request's context is cancelled with cause
// ErrShutdown, and its handler ends it with the API's terminal event) and waits up to grace for those
// handlers to return. Call it before http.Server.Shutdown, which closes the listener. It is safe to call more
// than once; each call reports what it saw.
func (s *Server) Drain(ctx context.Context, grace time.Duration) DrainReport {
	start := time.Now()
	rep := DrainReport{InFlight: s.life.start()}
	select {
	case <-s.life.idle:
	case <-ctx.Done():
		rep.Cut = s.life.cut()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-s.life.idle:
		case <-t.C:
		}
	}
	running, refused := s.life.counts()
	rep.Unended, rep.Refused = running, refused
	rep.Finished = max(0, rep.InFlight-rep.Cut)
	rep.Took = time.Since(start)
	return rep
}

// Cut reports whether ctx — a work request's context, or one derived from it — was cancelled by Drain at
// the shutdown deadline (rather than by the client leaving or a timeout).
func Cut(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrShutdown) }

// Cause returns ErrShutdown for err, a generation's error, when it is ctx's cancellation by Drain, and err
// otherwise: the error an API maps to its answer.
func Cause(ctx context.Context, err error) error {
	if err != nil && errors.Is(err, context.Canceled) && Cut(ctx) {
		return ErrShutdown
	}
	return err
}

// ClientGone reports whether r's client went away before its response ended: its context is cancelled, and
// not by Drain. Nothing more can reach that client.
func ClientGone(r *http.Request) bool { return r.Context().Err() != nil && !Cut(r.Context()) }

// Cancelled accounts for a generation whose client went away before its response ended: it is recorded with
// StatusCancelled (499) and logged at debug level, not as a failure.
func Cancelled(log zerolog.Logger, w http.ResponseWriter, r *http.Request, err error, start time.Time, streamed bool) {
	MarkStatus(w, StatusCancelled)
	log.Debug().Err(err).Str("path", r.URL.Path).Int("status", StatusCancelled).Bool("streamed", streamed).
		Dur("after", time.Since(start)).Msg("generation cancelled: the client went away")
}

// InFlight is the number of work requests running now.
func (s *Server) InFlight() int {
	running, _ := s.life.counts()
	return running
}
