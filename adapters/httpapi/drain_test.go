package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drainRoutes registers two work routes on a fresh Server: /finish ends when release closes (or its context
// ends) and reports how its context ended; /stuck ignores its context until unstick closes. The refusal
// writes a marker body, as an API writes its own shape.
func drainRoutes(release, unstick chan struct{}, started chan string, ended chan error) *Server {
	s := New(bareGen{}, Options{Log: zerolog.Nop()})
	refuse := func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("refused"))
	}
	s.Handle("POST /finish", s.Work(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- "finish"
		select {
		case <-release:
			w.WriteHeader(http.StatusOK)
			ended <- nil
		case <-r.Context().Done():
			err := Cause(r.Context(), r.Context().Err())
			if !ClientGone(r) {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			ended <- err
		}
	}), refuse))
	s.Handle("POST /stuck", s.Work(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		started <- "stuck"
		<-unstick
	}), refuse))
	s.Handle("GET /other", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	return s
}

func TestDrainWaitsRefusesAndCuts(t *testing.T) {
	release, unstick := make(chan struct{}), make(chan struct{})
	started, ended := make(chan string, 4), make(chan error, 4)
	s := drainRoutes(release, unstick, started, ended)
	serve := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader("{}")))
		return rec
	}
	// Two requests in flight, then draining: new work is refused, other routes answer.
	go serve("/finish")
	go serve("/finish")
	<-started
	<-started
	select {
	case <-s.Draining():
		t.Fatal("draining before Drain")
	default:
	}
	ctx, cancel := context.WithCancel(t.Context())
	report := make(chan DrainReport)
	go func() { report <- s.Drain(ctx, time.Second) }()
	<-s.Draining()
	rec := serve("/finish")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "5", rec.Header().Get("Retry-After"))
	assert.Equal(t, "refused", rec.Body.String())
	other := httptest.NewRecorder()
	s.ServeHTTP(other, httptest.NewRequest("GET", "/other", nil))
	assert.Equal(t, http.StatusNoContent, other.Code, "routes that are not work keep answering")

	// The deadline passes: both are cut, with ErrShutdown as the cause their handlers see.
	cancel()
	rep := <-report
	assert.Equal(t, 2, rep.InFlight)
	assert.Equal(t, 2, rep.Cut)
	assert.Equal(t, 0, rep.Finished)
	assert.Equal(t, 0, rep.Unended)
	assert.Equal(t, 1, rep.Refused)
	for range 2 {
		assert.ErrorIs(t, <-ended, ErrShutdown)
	}
	// The instrumentation records a request after its handler has left the lifecycle.
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, s), `higgs_requests_total{endpoint="POST /finish",status="503"} 3`)
	}, 5*time.Second, time.Millisecond)
}

// A request that finishes before the deadline is Finished; a cut handler that ignores its context is
// Unended once the grace has passed.
func TestDrainReportsFinishedAndUnended(t *testing.T) {
	release, unstick := make(chan struct{}), make(chan struct{})
	started, ended := make(chan string, 4), make(chan error, 4)
	s := drainRoutes(release, unstick, started, ended)
	serve := func(path string) {
		s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", path, strings.NewReader("{}")))
	}
	go serve("/finish")
	go serve("/stuck")
	<-started
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	report := make(chan DrainReport)
	go func() { report <- s.Drain(ctx, 20*time.Millisecond) }()
	<-s.Draining()
	close(release)
	require.NoError(t, <-ended)
	require.Eventually(t, func() bool { running, _ := s.life.counts(); return running == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	rep := <-report
	assert.Equal(t, DrainReport{InFlight: 2, Finished: 1, Cut: 1, Unended: 1}, DrainReport{InFlight: rep.InFlight,
		Finished: rep.Finished, Cut: rep.Cut, Unended: rep.Unended, Refused: rep.Refused})
	close(unstick)
}

// Nothing in flight: Drain returns at once. A client that leaves is gone, not cut.
func TestDrainIdleAndClientGone(t *testing.T) {
	release, unstick := make(chan struct{}), make(chan struct{})
	started, ended := make(chan string, 4), make(chan error, 4)
	s := drainRoutes(release, unstick, started, ended)
	ctx, cancel := context.WithCancel(t.Context())
	go s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/finish", strings.NewReader("{}")).WithContext(ctx))
	<-started
	cancel()
	err := <-ended
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, errors.Is(err, ErrShutdown))
	require.Eventually(t, func() bool { running, _ := s.life.counts(); return running == 0 }, 5*time.Second, time.Millisecond)
	rep := s.Drain(t.Context(), time.Second)
	assert.Equal(t, DrainReport{}, DrainReport{InFlight: rep.InFlight, Cut: rep.Cut, Refused: rep.Refused})
	assert.Less(t, rep.Took, time.Second)
}
