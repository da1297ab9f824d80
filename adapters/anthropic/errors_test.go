package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/higgs-go/higgs/ports"
)

// TestErrorForStatuses: each of the port's failures gets the status and type the docs give, with the
// message where it helps the client (a lost rank is named, as on the OpenAI side's 503 backend_lost).
func TestErrorForStatuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		typ    string
		msg    string
	}{
		{"lost rank", fmt.Errorf("generate: %w: no heartbeat from rank 1 within 10s", ports.ErrBackendLost), http.StatusServiceUnavailable, "api_error", "no heartbeat from rank 1 within 10s"},
		{"provider", fmt.Errorf("%w: provider up answered 500: boom", ports.ErrProvider), http.StatusBadGateway, "api_error", "boom"},
		{"model load", fmt.Errorf("%w: model \"a\": bad", ports.ErrModelLoad), http.StatusServiceUnavailable, "api_error", "bad"},
		{"busy", ports.ErrBusy, 529, "overloaded_error", "queue is full"},
		{"loading", ports.ErrNotReady, http.StatusServiceUnavailable, "overloaded_error", "still loading"},
		{"timeout", context.DeadlineExceeded, http.StatusGatewayTimeout, "timeout_error", "request timeout"},
		{"unknown", errors.New("a bug"), http.StatusInternalServerError, "api_error", "internal server error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ErrorFor(tc.err)
			assert.Equal(t, tc.status, e.Status)
			assert.Equal(t, tc.typ, e.Type)
			assert.Contains(t, e.Message, tc.msg)
		})
	}
}
