package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// Error is an API error in Anthropic's shape with its HTTP status.
type Error struct {
	Status int
	// Type is Anthropic's error type: invalid_request_error, authentication_error, not_found_error,
	// request_too_large, rate_limit_error, api_error, overloaded_error, timeout_error.
	Type    string
	Message string
	// RetryAfter, when > 0, is sent as the Retry-After header (seconds).
	RetryAfter int
	// Details, when set, is sent as error.details: the machine-readable reason SDKs act on
	// ({"error_code": "thread_unsupported_request", …}).
	Details map[string]any
}

func (e *Error) Error() string { return e.Message }

type errorBody struct {
	Type      string      `json:"type"`
	Error     errorDetail `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

type errorDetail struct {
	Type    string         `json:"type"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

func (e *Error) body(requestID string) errorBody {
	return errorBody{Type: "error", Error: errorDetail{Type: e.Type, Message: e.Message, Details: e.Details}, RequestID: requestID}
}

// invalid is a 400 whose message starts with the field at fault, as Anthropic's messages do
// ("max_tokens: Field required").
func invalid(field, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: msg}
}

// unsupported is a 400 for a field higgs cannot honour.
func unsupported(field, why string) *Error {
	return invalid(field, "not supported by this server: %s", why)
}

// wireName maps the OpenAI-side parameter names the Generator reports to this API's names.
var wireName = map[string]string{"stop": "stop_sequences", "prompt": "messages"}

// ErrorFor maps any error to the API error to send, with errors.Is/As.
func ErrorFor(err error) *Error {
	var apiErr *Error
	var maxBytes *http.MaxBytesError
	var reqErr *ports.RequestError
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.Is(err, httpapi.ErrShutdown):
		return errCut
	case errors.Is(err, httpapi.ErrBodyTimeout):
		return &Error{Status: http.StatusRequestTimeout, Type: "invalid_request_error",
			Message: "the request body did not arrive in time"}
	case errors.As(err, &maxBytes):
		return &Error{Status: http.StatusRequestEntityTooLarge, Type: "request_too_large",
			Message: fmt.Sprintf("request body larger than %d bytes", maxBytes.Limit)}
	case errors.Is(err, ports.ErrUnknownModel):
		return invalidStatus(http.StatusNotFound, "not_found_error", "", err.Error())
	case errors.As(err, &reqErr):
		field := reqErr.Param
		if n, ok := wireName[field]; ok {
			field = n
		}
		return invalidStatus(http.StatusBadRequest, "invalid_request_error", field, err.Error())
	case errors.Is(err, ports.ErrInvalidRequest):
		return invalidStatus(http.StatusBadRequest, "invalid_request_error", "", err.Error())
	case errors.Is(err, ports.ErrBusy):
		// Anthropic's 529 is "the API is temporarily overloaded", which a full queue is; 429 is a per-account
		// rate limit, which higgs does not have.
		return &Error{Status: 529, Type: "overloaded_error", Message: "the server's request queue is full; retry later", RetryAfter: 1}
	case errors.Is(err, ports.ErrBackendLost):
		// A distributed model lost a rank: 503 naming it, as on the OpenAI side (backend_lost).
		return &Error{Status: http.StatusServiceUnavailable, Type: "api_error", Message: err.Error()}
	case errors.Is(err, ports.ErrProvider):
		return &Error{Status: http.StatusBadGateway, Type: "api_error", Message: err.Error()}
	case errors.Is(err, ports.ErrModelLoad):
		return &Error{Status: http.StatusServiceUnavailable, Type: "api_error", Message: err.Error()}
	case errors.Is(err, ports.ErrNotReady):
		return &Error{Status: http.StatusServiceUnavailable, Type: "overloaded_error",
			Message: "the model is still loading; retry later", RetryAfter: 5}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusGatewayTimeout, Type: "timeout_error",
			Message: "the request took longer than the server's request timeout"}
	case errors.Is(err, context.Canceled):
		return &Error{Status: http.StatusServiceUnavailable, Type: "api_error", Message: "the request was cancelled"}
	}
	return &Error{Status: http.StatusInternalServerError, Type: "api_error", Message: "internal server error"}
}

func invalidStatus(status int, typ, field, msg string) *Error {
	if field != "" {
		msg = field + ": " + msg
	}
	return &Error{Status: status, Type: typ, Message: msg}
}
