package openai

import (
	"net/http"

	"github.com/higgs-go/higgs/adapters/httpapi"
)

// The shutdown lifecycle is the host's (httpapi.Server.Drain); this API supplies its refusal and its
// terminal event. While draining, /health answers 503 {"status":"draining"}, new generation requests get
// errShuttingDown, event streams end; the other routes keep answering. A generation still running at the
// deadline ends with errCut: a 503 when nothing was sent yet, else an error chunk then `data: [DONE]`.

// errShuttingDown answers generation requests that arrive while draining.
var errShuttingDown = &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
	Message: "the server is shutting down; retry on another instance", RetryAfter: httpapi.DrainRetryAfter}

// errCut ends a generation still running at the shutdown deadline (httpapi.ErrShutdown).
var errCut = &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
	Message: "the server shut down before the request finished; retry it", RetryAfter: httpapi.DrainRetryAfter}

// refuseDraining answers a generation request that arrived while draining.
func refuseDraining(w http.ResponseWriter, _ *http.Request) { writeError(w, errShuttingDown) }
