package anthropic

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// blocking is a ports.Generator whose generations wait for release (or their context) after the first event.
type blocking struct {
	started chan struct{}
	release chan struct{}
}

func (b *blocking) Models() []ports.ModelCard { return []ports.ModelCard{{ID: "toy"}} }

func (b *blocking) Generate(ctx context.Context, _ ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	if err := emit(ports.GenerateEvent{Content: "x"}); err != nil {
		return ports.GenerateResult{}, err
	}
	close(b.started)
	select {
	case <-b.release:
		return ports.GenerateResult{FinishReason: "stop", Content: "x", CompletionTokens: 1}, nil
	case <-ctx.Done():
		return ports.GenerateResult{CompletionTokens: 1}, ctx.Err()
	}
}

const drainMessage = `{"model":"toy","max_tokens":10,"messages":[{"role":"user","content":"hi"}]%s}`

func postMessage(s http.Handler, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, drainRequest("POST", "/v1/messages", strings.NewReader(body)))
	return rec
}

func newIDs() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("id%d", n) }
}

// A message in flight when draining starts finishes normally; new ones are refused with 503, Retry-After
// and Anthropic's error shape; count_tokens keeps answering.
func TestDrainRefusesNewMessagesWhileOthersFinish(t *testing.T) {
	for _, stream := range []bool{false, true} {
		gen := &blocking{started: make(chan struct{}), release: make(chan struct{})}
		s := New(gen, Options{Log: zerolog.Nop(), NewID: newIDs()})
		extra := ""
		if stream {
			extra = `,"stream":true`
		}
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- postMessage(s, fmt.Sprintf(drainMessage, extra)) }()
		<-gen.started
		drained := make(chan httpapi.DrainReport)
		go func() { drained <- s.host.Drain(t.Context(), time.Second) }()
		<-s.host.Draining()

		for _, x := range []string{"", `,"stream":true`} {
			rec := postMessage(s, fmt.Sprintf(drainMessage, x))
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "no new message while draining")
			assert.Equal(t, "5", rec.Header().Get("Retry-After"))
			assert.JSONEq(t, `{"type":"error","error":{"type":"overloaded_error","message":"the server is shutting down; retry on another instance"},"request_id":"`+rec.Header().Get("request-id")+`"}`,
				rec.Body.String())
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, drainRequest("POST", "/v1/messages/count_tokens", strings.NewReader(fmt.Sprintf(drainMessage, ""))))
		assert.NotEqual(t, http.StatusServiceUnavailable, rec.Code, "count_tokens generates nothing and keeps answering")

		select {
		case rep := <-drained:
			t.Fatalf("Drain returned %+v with a message in flight", rep)
		case <-time.After(20 * time.Millisecond):
		}
		close(gen.release)
		rec = <-done
		assert.Equal(t, http.StatusOK, rec.Code)
		if stream {
			assert.True(t, strings.HasSuffix(rec.Body.String(), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), rec.Body.String())
		} else {
			assert.Contains(t, rec.Body.String(), `"stop_reason":"end_turn"`)
		}
		rep := <-drained
		rep.Took = 0
		assert.Equal(t, httpapi.DrainReport{InFlight: 1, Finished: 1, Refused: 2}, rep)
	}
}

// A message still generating at the shutdown deadline ends with Anthropic's terminal answer: an `error`
// event in a stream, a 503 in Anthropic's shape otherwise; both count as 503 and neither is logged as a
// failure.
func TestDrainCutsAtTheDeadline(t *testing.T) {
	for _, stream := range []bool{false, true} {
		gen := &blocking{started: make(chan struct{}), release: make(chan struct{})}
		var logs bytes.Buffer
		s := New(gen, Options{Log: zerolog.New(&logs), NewID: newIDs()})
		extra := ""
		if stream {
			extra = `,"stream":true`
		}
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- postMessage(s, fmt.Sprintf(drainMessage, extra)) }()
		<-gen.started
		short, stop := context.WithTimeout(t.Context(), 10*time.Millisecond)
		rep := s.host.Drain(short, 5*time.Second)
		stop()
		rec := <-done
		rep.Took = 0
		assert.Equal(t, httpapi.DrainReport{InFlight: 1, Cut: 1}, rep, "stream %v", stream)
		want := `{"type":"error","error":{"type":"api_error","message":"the server shut down before the request finished; retry it"},"request_id":"` +
			rec.Header().Get("request-id") + `"}`
		if stream {
			assert.Equal(t, http.StatusOK, rec.Code)
			events := strings.Split(strings.TrimSpace(rec.Body.String()), "\n\n")
			last := strings.SplitN(events[len(events)-1], "\n", 2)
			require.Len(t, last, 2, rec.Body.String())
			assert.Equal(t, "event: error", last[0])
			assert.JSONEq(t, want, strings.TrimPrefix(last[1], "data: "))
			assert.NotContains(t, rec.Body.String(), "message_stop")
		} else {
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Equal(t, "5", rec.Header().Get("Retry-After"))
			assert.JSONEq(t, want, rec.Body.String())
		}
		metrics := httptest.NewRecorder()
		s.ServeHTTP(metrics, drainRequest("GET", "/metrics", nil))
		assert.Contains(t, metrics.Body.String(), `higgs_requests_total{endpoint="POST /v1/messages",status="503"} 1`, "stream %v", stream)
		assert.Contains(t, logs.String(), "request cut: still running at the shutdown deadline")
		assert.NotContains(t, logs.String(), `"level":"error"`)
	}
}

// A message whose client left is counted with status 499 and logged at debug level, never as a failure.
func TestCancelledMessageIsCountedAndLogged(t *testing.T) {
	for _, stream := range []bool{false, true} {
		gen := &blocking{started: make(chan struct{}), release: make(chan struct{})}
		var logs bytes.Buffer
		s := New(gen, Options{Log: zerolog.New(&logs).Level(zerolog.DebugLevel), NewID: newIDs()})
		extra := ""
		if stream {
			extra = `,"stream":true`
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			s.ServeHTTP(httptest.NewRecorder(), drainRequest("POST", "/v1/messages",
				strings.NewReader(fmt.Sprintf(drainMessage, extra))).WithContext(ctx))
			close(done)
		}()
		<-gen.started
		cancel()
		<-done
		metrics := httptest.NewRecorder()
		s.ServeHTTP(metrics, drainRequest("GET", "/metrics", nil))
		assert.Contains(t, metrics.Body.String(), `higgs_requests_total{endpoint="POST /v1/messages",status="499"} 1`, "stream %v", stream)
		assert.Contains(t, logs.String(), `"level":"debug"`)
		assert.Contains(t, logs.String(), `"status":499`)
		assert.Contains(t, logs.String(), "generation cancelled")
		assert.NotContains(t, logs.String(), `"level":"error"`)
		assert.NotContains(t, logs.String(), `"status":503`)
	}
}

// drainRequest is a request as a local client sends it: to localhost, a body as JSON.
func drainRequest(method, path string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, "http://localhost"+path, body)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}
