package anthropic

import (
	"net/http"

	"github.com/higgs-go/higgs/adapters/httpapi"
)

// The shutdown lifecycle is the host's (httpapi.Server.Drain); this API supplies its refusal and its
// terminal event. While draining, new /v1/messages requests get errShuttingDown (count_tokens, which
// generates nothing, keeps answering). A message still generating at the deadline ends with errCut: a 503
// when nothing was sent yet, else an `error` event, Anthropic's end of a failed stream.

// errShuttingDown answers a message request that arrives while draining: the overload Anthropic's clients
// retry, as while the model loads.
var errShuttingDown = &Error{Status: http.StatusServiceUnavailable, Type: "overloaded_error",
	Message: "the server is shutting down; retry on another instance", RetryAfter: httpapi.DrainRetryAfter}

// errCut ends a message still generating at the shutdown deadline (httpapi.ErrShutdown).
var errCut = &Error{Status: http.StatusServiceUnavailable, Type: "api_error",
	Message: "the server shut down before the request finished; retry it", RetryAfter: httpapi.DrainRetryAfter}

// refuseDraining answers a message request that arrived while draining.
func refuseDraining(w http.ResponseWriter, _ *http.Request) { writeError(w, errShuttingDown) }
