package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// Error is an API error in OpenAI's shape ({"error":{"message","type","param","code"}}) with its HTTP status.
type Error struct {
	Status  int
	Message string
	Type    string
	Param   string
	Code    string
	// RetryAfter, when > 0, is sent as the Retry-After header (seconds).
	RetryAfter int
}

func (e *Error) Error() string { return e.Message }

// errorBody is the wire form of Error.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *Error) body() errorBody {
	d := errorDetail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		d.Param = &e.Param
	}
	if e.Code != "" {
		d.Code = &e.Code
	}
	return errorBody{Error: d}
}

// badRequest is a 400 naming the offending parameter.
func badRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param,
		Message: fmt.Sprintf(format, args...)}
}

// unsupported is a 400 for a parameter whose value would change the output and that higgs cannot honour.
func unsupported(param, why string) *Error {
	e := badRequest(param, "%s is not supported by this server: %s", param, why)
	e.Code = "unsupported_parameter"
	return e
}

// ErrorFor maps any error to the API error to send: one place that decides statuses, using errors.Is/As.
func ErrorFor(err error) *Error {
	var apiErr *Error
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.Is(err, httpapi.ErrShutdown):
		return errCut
	case errors.Is(err, httpapi.ErrBodyTimeout):
		return &Error{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "request_timeout",
			Message: "the request body did not arrive in time"}
	case errors.As(err, &maxBytes):
		return &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Code: "request_too_large", Message: fmt.Sprintf("request body larger than %d bytes", maxBytes.Limit)}
	case errors.Is(err, ports.ErrUnknownModel):
		return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model",
			Code: "model_not_found", Message: err.Error()}
	case errors.Is(err, ports.ErrInvalidRequest):
		// A RequestError names its parameter and carries a message written for the client; a joined list of
		// them reads as one message per line, with the first one's parameter.
		e := &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()}
		var re *ports.RequestError
		if errors.As(err, &re) {
			e.Param = re.Param
		}
		return e
	case errors.Is(err, errors.ErrUnsupported):
		// What this model or backend cannot do (embeddings from a model split across processes, or one
		// that pools otherwise); the message says what.
		return &Error{Status: http.StatusNotImplemented, Type: "server_error", Code: "not_implemented", Message: err.Error()}
	case errors.Is(err, ports.ErrBusy):
		return &Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "server_busy",
			Message: "the server's request queue is full; retry later", RetryAfter: 1}
	case errors.Is(err, ports.ErrBackendLost):
		return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "backend_lost", Message: err.Error()}
	case errors.Is(err, ports.ErrProvider):
		return &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "provider_error", Message: err.Error()}
	case errors.Is(err, ports.ErrModelLoad):
		return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "model_load_failed", Message: err.Error()}
	case errors.Is(err, ports.ErrNotReady):
		return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "model_loading",
			Message: "the model is still loading; retry later", RetryAfter: 5}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "timeout",
			Message: "the request took longer than the server's request timeout"}
	case errors.Is(err, context.Canceled):
		// The request's context was cancelled for a reason no other case names; a client that went away is
		// not answered (httpapi.Cancelled), a request cut by shutdown is httpapi.ErrShutdown.
		return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "cancelled",
			Message: "the request was cancelled"}
	}
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
		Message: "internal server error"}
}
