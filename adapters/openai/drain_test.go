package openai

import (
	"bytes"
	"context"
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

func get(t *testing.T, s http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, drainRequest("GET", path, nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

func TestDrainAnswersHealthWhileGenerationsFinish(t *testing.T) {
	gen := &blocking{started: make(chan struct{}), release: make(chan struct{})}
	s := New(gen, Options{Log: zerolog.Nop()})
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, drainRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi"}`)))
		done <- rec.Code
	}()
	<-gen.started
	code, body := get(t, s, "/health")
	assert.Equal(t, http.StatusOK, code)

	drained := make(chan httpapi.DrainReport)
	go func() { drained <- s.host.Drain(t.Context(), time.Second) }()
	require.Eventually(t, func() bool { c, _ := get(t, s, "/health"); return c == http.StatusServiceUnavailable },
		5*time.Second, time.Millisecond)
	code, body = get(t, s, "/health")
	assert.JSONEq(t, `{"status":"draining"}`, body)
	assert.Equal(t, http.StatusServiceUnavailable, code)

	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, drainRequest("POST", path, strings.NewReader(`{"prompt":"hi"}`)))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "no new generation while draining")
		assert.Equal(t, "5", rec.Header().Get("Retry-After"))
		assert.JSONEq(t, `{"error":{"message":"the server is shutting down; retry on another instance","type":"server_error","param":null,"code":"shutting_down"}}`,
			rec.Body.String())
	}
	code, _ = get(t, s, "/v1/models")
	assert.Equal(t, http.StatusOK, code, "other routes keep answering")

	select {
	case rep := <-drained:
		t.Fatalf("Drain returned %+v with a generation in flight", rep)
	case <-time.After(20 * time.Millisecond):
	}
	close(gen.release)
	assert.Equal(t, http.StatusOK, <-done, "the in-flight request finishes normally")
	rep := <-drained
	assert.Equal(t, httpapi.DrainReport{InFlight: 1, Finished: 1, Refused: 2}, untimed(rep))
}

// A generation still running at the shutdown deadline ends with OpenAI's terminal answer: a 503 in OpenAI's
// shape when nothing was sent, an error chunk then [DONE] in a stream; both count as 503.
func TestDrainCutsAtTheDeadline(t *testing.T) {
	for _, stream := range []bool{false, true} {
		gen := &blocking{started: make(chan struct{}), release: make(chan struct{})}
		var logs bytes.Buffer
		s := New(gen, Options{Log: zerolog.New(&logs)})
		body := `{"prompt":"hi"}`
		if stream {
			body = `{"prompt":"hi","stream":true}`
		}
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			s.ServeHTTP(rec, drainRequest("POST", "/v1/completions", strings.NewReader(body)))
			close(done)
		}()
		<-gen.started
		short, stop := context.WithTimeout(t.Context(), 10*time.Millisecond)
		rep := s.host.Drain(short, 5*time.Second)
		stop()
		<-done
		assert.Equal(t, httpapi.DrainReport{InFlight: 1, Cut: 1}, untimed(rep), "stream %v", stream)
		want := `{"error":{"message":"the server shut down before the request finished; retry it","type":"server_error","param":null,"code":"shutting_down"}}`
		if stream {
			assert.Equal(t, http.StatusOK, rec.Code)
			events := strings.Split(strings.TrimSpace(rec.Body.String()), "\n\n")
			require.GreaterOrEqual(t, len(events), 3, rec.Body.String())
			assert.JSONEq(t, want, strings.TrimPrefix(events[len(events)-2], "data: "))
			assert.Equal(t, "data: [DONE]", events[len(events)-1])
		} else {
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Equal(t, "5", rec.Header().Get("Retry-After"))
			assert.JSONEq(t, want, rec.Body.String())
		}
		_, metrics := get(t, s, "/metrics")
		assert.Contains(t, metrics, `higgs_requests_total{endpoint="POST /v1/completions",status="503"} 1`, "stream %v", stream)
		assert.Contains(t, logs.String(), "request cut: still running at the shutdown deadline")
		assert.NotContains(t, logs.String(), `"level":"error"`)
	}
}

// A generation cancelled because its client left is counted with status 499 and logged at debug level,
// streamed or not, never as a failure.
func TestCancelledGenerationIsCountedAndLogged(t *testing.T) {
	for _, stream := range []bool{false, true} {
		gen := &blocking{started: make(chan struct{}), release: make(chan struct{})}
		var logs bytes.Buffer
		s := New(gen, Options{Log: zerolog.New(&logs).Level(zerolog.DebugLevel)})
		ctx, cancel := context.WithCancel(t.Context())
		body := `{"prompt":"hi"}`
		if stream {
			body = `{"prompt":"hi","stream":true}`
		}
		done := make(chan struct{})
		go func() {
			s.ServeHTTP(httptest.NewRecorder(), drainRequest("POST", "/v1/completions", strings.NewReader(body)).WithContext(ctx))
			close(done)
		}()
		<-gen.started
		cancel()
		<-done
		_, metrics := get(t, s, "/metrics")
		assert.Contains(t, metrics, `higgs_requests_total{endpoint="POST /v1/completions",status="499"} 1`, "stream %v", stream)
		assert.Contains(t, logs.String(), `"level":"debug"`)
		assert.Contains(t, logs.String(), `"status":499`)
		assert.Contains(t, logs.String(), "generation cancelled")
		assert.NotContains(t, logs.String(), `"level":"error"`, "stream %v: a client leaving is no failure", stream)
		assert.NotContains(t, logs.String(), `"status":503`)
		assert.Regexp(t, `"after":[0-9.]+`, logs.String())
	}
}

// untimed is r without its duration, for comparing counts.
func untimed(r httpapi.DrainReport) httpapi.DrainReport {
	r.Took = 0
	return r
}

// drainRequest is a request as a local client sends it: to localhost, a body as JSON.
func drainRequest(method, path string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, "http://localhost"+path, body)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}
