package openai

// Authentication and bounded body reads, shared with the APIs mounted beside this one (the Messages API).

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.opts.APIKey == "" {
		return next
	}
	want := []byte(s.opts.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			if subtle.ConstantTimeCompare([]byte(BearerToken(r.Header.Get("Authorization"))), want) != 1 {
				RefuseUnread(w, r)
				w.Header().Set("WWW-Authenticate", `Bearer realm="higgs"`)
				writeError(w, &Error{Status: http.StatusUnauthorized, Type: "invalid_request_error",
					Code: "invalid_api_key", Message: "missing or incorrect API key: send Authorization: Bearer <key>"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// BearerToken returns the credentials of an Authorization header with the Bearer scheme, compared without
// regard to case as RFC 9110 says schemes are; "" for any other header.
func BearerToken(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// RefuseUnread prepares the answer to a request refused before its body was read: the body is not read and
// the connection is closed after the answer. Otherwise net/http drains up to 256 KiB of the unread body
// before it writes the status (a client that declares a body and never sends it would never get its
// refusal), and again after the answer (holding the connection for as long as the client withholds it).
func RefuseUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	w.Header().Set("Connection", "close")
	// Closing the body under a read deadline in the past ends it at once without reading it (net/http
	// clears deadlines before its own drain, so only a body already closed is safe); writes are not
	// affected.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	_ = r.Body.Close()
}

// readBody reads the limited body.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := ReadBody(w, r, s.opts.MaxBodyBytes, s.opts.BodyTimeout)
	var mbe *http.MaxBytesError
	if err != nil && !errors.As(err, &mbe) && !errors.Is(err, errBodyTimeout) {
		return nil, badRequest("", "could not read the request body: %v", err)
	}
	return body, err
}

// errBodyTimeout is returned by ReadBody when the body did not arrive within its time limit.
var errBodyTimeout = errors.New("request body read timed out")

// ErrBodyTimeout reports whether err is ReadBody's timeout.
func ErrBodyTimeout(err error) bool { return errors.Is(err, errBodyTimeout) }

// ReadBody reads a request body of at most limit bytes within timeout: the time limit is a read deadline
// on the connection, so a client that declares a body and trickles or withholds it cannot hold the
// connection. On a timeout the connection is closed after the answer. A *http.MaxBytesError is returned
// (wrapped) for a body over the limit.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	// Where the writer cannot set deadlines (a test recorder) the body is read without one.
	hasDeadline := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// Closed while the deadline is past, the body ends without net/http draining the rest after the
		// answer (it clears deadlines first, so an open body would hold the connection for the client).
		w.Header().Set("Connection", "close")
		_ = r.Body.Close()
		return nil, fmt.Errorf("%w after %s", errBodyTimeout, timeout)
	}
	if hasDeadline {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, err
}
