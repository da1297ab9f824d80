package openai

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	s.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

func TestDrainAnswersHealthWhileGenerationsFinish(t *testing.T) {
	gen := &blocking{started: make(chan struct{}), release: make(chan struct{})}
	s := New(gen, Options{Log: zerolog.Nop()})
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi"}`)))
		done <- rec.Code
	}()
	<-gen.started
	code, body := get(t, s, "/health")
	assert.Equal(t, http.StatusOK, code)

	drained := make(chan error)
	go func() { drained <- s.Drain(t.Context()) }()
	require.Eventually(t, func() bool { c, _ := get(t, s, "/health"); return c == http.StatusServiceUnavailable },
		5*time.Second, time.Millisecond)
	code, body = get(t, s, "/health")
	assert.JSONEq(t, `{"status":"draining"}`, body)
	assert.Equal(t, http.StatusServiceUnavailable, code)

	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi"}`)))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "no new generation while draining")
	assert.Contains(t, rec.Body.String(), `"shutting_down"`)
	code, _ = get(t, s, "/v1/models")
	assert.Equal(t, http.StatusOK, code, "other routes keep answering")

	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a generation in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(gen.release)
	assert.Equal(t, http.StatusOK, <-done, "the in-flight request finishes normally")
	require.NoError(t, <-drained)
}

func TestDrainTimesOut(t *testing.T) {
	gen := &blocking{started: make(chan struct{}), release: make(chan struct{})}
	s := New(gen, Options{Log: zerolog.Nop()})
	ctx, cancel := context.WithCancel(t.Context())
	go s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi"}`)).WithContext(ctx))
	<-gen.started
	short, stop := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer stop()
	assert.ErrorIs(t, s.Drain(short), context.DeadlineExceeded)
	cancel()
}

// A generation cancelled because its client left is counted with status 499 and logged at debug level,
// streamed or not.
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
			s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/completions", strings.NewReader(body)).WithContext(ctx))
			close(done)
		}()
		<-gen.started
		cancel()
		<-done
		_, metrics := get(t, s, "/metrics")
		assert.Contains(t, metrics, `higgs_requests_total{endpoint="POST /v1/completions",status="499"} 1`, "stream %v", stream)
		assert.Contains(t, logs.String(), `"level":"debug"`)
		assert.Contains(t, logs.String(), "generation cancelled")
		assert.Regexp(t, `"after":[0-9.]+`, logs.String())
	}
}
