package httpapi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadBody(t *testing.T) {
	for _, c := range []struct {
		name    string
		body    string
		limit   int64
		tooBig  bool
		wantLen int
	}{
		{"empty", "", 4, false, 0},
		{"under the limit", "abc", 4, false, 3},
		{"at the limit", "abcd", 4, false, 4},
		{"over the limit", "abcde", 4, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			body, err := ReadBody(rec, httptest.NewRequest("POST", "/", strings.NewReader(c.body)), c.limit, time.Second)
			if c.tooBig {
				var mbe *http.MaxBytesError
				require.ErrorAs(t, err, &mbe)
				assert.Equal(t, c.limit, mbe.Limit)
				assert.NotErrorIs(t, err, ErrBodyTimeout)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.body, string(body))
			assert.Len(t, body, c.wantLen)
			assert.Empty(t, rec.Header().Get("Connection"))
		})
	}
}

// bodyServer answers 200 with the body's length, 408 when it did not arrive in time, 413 when it is too
// large, and 401 without reading it when the request has no "ok" header; each API maps the errors alike.
func bodyServer(t *testing.T, limit int64, timeout time.Duration) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("ok") == "" {
			RefuseUnread(w, r)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		body, err := ReadBody(w, r, limit, timeout)
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, ErrBodyTimeout):
			w.WriteHeader(http.StatusRequestTimeout)
		case errors.As(err, &mbe):
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		case err != nil:
			w.WriteHeader(http.StatusBadRequest)
		default:
			_, _ = io.WriteString(w, strconv.Itoa(len(body)))
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestBodyOverTheWire sends raw requests whose declared body is sent whole, in part or not at all: a client
// that withholds its body gets its refusal or its 408 at once, on a connection closed after the answer (the
// read returning means the server closed it).
func TestBodyOverTheWire(t *testing.T) {
	addr := bodyServer(t, 8, 200*time.Millisecond)
	for _, c := range []struct {
		name     string
		header   string
		declared int
		sent     string
		status   string
		closed   bool
	}{
		{"whole body", "ok: 1\r\n", 3, "abc", "HTTP/1.1 200 OK", false},
		{"too large", "ok: 1\r\n", 9, "abcdefghi", "HTTP/1.1 413 Request Entity Too Large", true},
		{"withheld body", "ok: 1\r\n", 8, "a", "HTTP/1.1 408 Request Timeout", true},
		{"refused unread", "", 100000, "{", "HTTP/1.1 401 Unauthorized", true},
		{"refused without a body", "", 0, "", "HTTP/1.1 401 Unauthorized", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer conn.Close()
			req := fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s", c.declared, c.header, c.sent)
			_, err = io.WriteString(conn, req)
			require.NoError(t, err)
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err, "no answer in time")
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			assert.Equal(t, c.status, resp.Proto+" "+resp.Status)
			assert.Equal(t, c.closed, resp.Close, "Connection: close")
		})
	}
}

func TestRefuseUnread(t *testing.T) {
	for _, c := range []struct {
		name   string
		body   io.Reader
		length int64
		close  bool
	}{
		{"no body", nil, 0, false},
		{"declared body", strings.NewReader("abc"), 3, true},
		{"unknown length", strings.NewReader("abc"), -1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", c.body)
			r.ContentLength = c.length
			rec := httptest.NewRecorder()
			RefuseUnread(rec, r)
			assert.Equal(t, c.close, rec.Header().Get("Connection") == "close")
		})
	}
}
