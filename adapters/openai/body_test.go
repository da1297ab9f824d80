package openai

import (
	"bufio"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client that declares a body and sends one byte gets its 401 at once (not after net/http has waited
// to drain the body), and with the right key its 408 once the body timeout has passed.
func TestWithheldBody(t *testing.T) {
	srv := httptest.NewServer(New(&scripted{ready: true}, Options{Keys: testKeys(t, "k"), BodyTimeout: 200 * time.Millisecond, Log: zerolog.Nop()}))
	t.Cleanup(srv.Close)
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
	for _, c := range []struct{ auth, status, body string }{
		{"", "HTTP/1.1 401 Unauthorized", `"invalid_api_key"`},
		{"Authorization: Bearer k\r\n", "HTTP/1.1 408 Request Timeout", `"request_timeout"`},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, head+c.auth+"\r\n{")
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
		resp, err := io.ReadAll(bufio.NewReader(conn)) // the server closes the connection after answering
		require.NoError(t, err, "no answer in time, or the connection was held open")
		assert.True(t, strings.HasPrefix(string(resp), c.status), "%q", resp)
		assert.Contains(t, string(resp), "Connection: close")
		assert.Contains(t, string(resp), c.body)
	}
}
