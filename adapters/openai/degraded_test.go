package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// lostBackend is a ports.Generator whose backend can be lost (a rank of a split model): from then on it
// is Degraded and its generations fail with ports.ErrBackendLost.
type lostBackend struct{ lost atomic.Pointer[error] }

func (g *lostBackend) Models() []ports.ModelCard { return []ports.ModelCard{{ID: "toy"}} }

func (g *lostBackend) Degraded() error {
	if e := g.lost.Load(); e != nil {
		return *e
	}
	return nil
}

func (g *lostBackend) Generate(context.Context, ports.GenerateRequest, func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	if err := g.Degraded(); err != nil {
		return ports.GenerateResult{}, err
	}
	return ports.GenerateResult{FinishReason: "stop", Content: "x", CompletionTokens: 1}, nil
}

func TestLostBackendHealthAndRequests(t *testing.T) {
	gen := &lostBackend{}
	s := New(gen, Options{Log: zerolog.Nop()})
	code, _ := get(t, s, "/health")
	require.Equal(t, http.StatusOK, code)

	err := fmt.Errorf("rank lost: %w: no answer from rank 1 within 2m0s", ports.ErrBackendLost)
	gen.lost.Store(&err)
	code, body := get(t, s, "/health")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.JSONEq(t, `{"status":"degraded","error":"rank lost: backend lost: no answer from rank 1 within 2m0s"}`, body)

	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi"}`)))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
	assert.Equal(t, "backend_lost", e.Error.Code)
	assert.Contains(t, e.Error.Message, "rank 1", "the message names the lost rank")
}
