package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// DefaultMaxBodyBytes is the request body limit an API uses when configured with 0.
const DefaultMaxBodyBytes = 4 << 20

// DefaultBodyTimeout is the time a client may take to send a request body when an API is configured with 0.
const DefaultBodyTimeout = 30 * time.Second

// ErrBodyTimeout is returned (wrapped) by ReadBody when the body did not arrive within its time limit; each
// API maps it to its own 408.
var ErrBodyTimeout = errors.New("request body read timed out")

// ReadBody reads a request body of at most limit bytes within timeout: the time limit is a read deadline
// on the connection, so a client that declares a body and trickles or withholds it cannot hold the
// connection. On a timeout the connection is closed after the answer and ErrBodyTimeout is returned
// (wrapped). A *http.MaxBytesError is returned (wrapped) for a body over the limit.
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
		return nil, fmt.Errorf("%w after %s", ErrBodyTimeout, timeout)
	}
	if hasDeadline {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, err
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
