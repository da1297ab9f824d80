package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartSSEHeaders(t *testing.T) {
	rec := httptest.NewRecorder()
	StartSSE(rec)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	assert.Equal(t, "no-cache", rec.Header().Get("Cache-Control"))
	assert.Equal(t, "no", rec.Header().Get("X-Accel-Buffering"))
}

// TestSSEFrames pins the bytes of each kind of event: these are what clients' SSE parsers read.
func TestSSEFrames(t *testing.T) {
	for _, c := range []struct {
		name  string
		write func(*SSE) error
		want  string
	}{
		{"event", func(s *SSE) error { return s.Event(map[string]string{"a": "<b>\n"}) }, "data: {\"a\":\"<b>\\n\"}\n\n"},
		{"named", func(s *SSE) error { return s.Named("ping", map[string]string{"type": "ping"}) },
			"event: ping\ndata: {\"type\":\"ping\"}\n\n"},
		{"data", func(s *SSE) error { return s.Data("[DONE]") }, "data: [DONE]\n\n"},
		{"comment", func(s *SSE) error { return s.Comment("keep-alive") }, ": keep-alive\n\n"},
		{"two events", func(s *SSE) error {
			if err := s.Event(1); err != nil {
				return err
			}
			return s.Named("x", "y")
		}, "data: 1\n\nevent: x\ndata: \"y\"\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s := StartSSE(rec)
			require.NoError(t, c.write(s))
			assert.Equal(t, c.want, rec.Body.String())
			assert.NoError(t, s.Err())
		})
	}
}

// failingWriter is a ResponseWriter whose Write succeeds writes times, then fails as a closed connection does.
type failingWriter struct {
	*httptest.ResponseRecorder
	writes int
}

var errGone = errors.New("client gone")

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.writes == 0 {
		return 0, errGone
	}
	w.writes--
	return w.ResponseRecorder.Write(b)
}

// A failed write is sticky: nothing more is written to a dead connection, and Err keeps the cause.
func TestSSEStickyError(t *testing.T) {
	w := &failingWriter{ResponseRecorder: httptest.NewRecorder(), writes: 1}
	s := StartSSE(w)
	require.NoError(t, s.Event("first"))
	err := s.Event("second")
	require.ErrorIs(t, err, errGone)
	w.writes = 10
	assert.ErrorIs(t, s.Data("[DONE]"), errGone)
	assert.ErrorIs(t, s.Comment("keep-alive"), errGone)
	assert.ErrorIs(t, s.Err(), errGone)
	assert.Equal(t, "data: \"first\"\n\n", w.Body.String())
}

// An event that cannot be encoded is refused without writing, and the stream goes on.
func TestSSEEncodeError(t *testing.T) {
	rec := httptest.NewRecorder()
	s := StartSSE(rec)
	require.Error(t, s.Named("bad", make(chan int)))
	assert.NoError(t, s.Err())
	require.NoError(t, s.Event(2))
	assert.Equal(t, "data: 2\n\n", rec.Body.String())
}

// FuzzSSE writes any text as a named and an unnamed event and reads the transcript back as a client would:
// each event is one data line whose JSON is the text (each invalid UTF-8 byte read as U+FFFD, as
// encoding/json writes it), so no text can end an event early or forge another.
func FuzzSSE(f *testing.F) {
	for _, s := range []string{"hello", "\n\ndata: [DONE]\n\n", "\r\x00\u2028é", "</script><think>", "\xff", "\x84\xa9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		rec := httptest.NewRecorder()
		s := StartSSE(rec)
		if err := s.Event(text); err != nil {
			t.Fatal(err)
		}
		if err := s.Named("delta", text); err != nil {
			t.Fatal(err)
		}
		events := strings.Split(rec.Body.String(), "\n\n")
		if len(events) != 3 || events[2] != "" {
			t.Fatalf("want two events, got %q", rec.Body.String())
		}
		// encoding/json writes each invalid UTF-8 byte as U+FFFD.
		var want string
		if std, err := json.Marshal(text); err != nil || json.Unmarshal(std, &want) != nil {
			t.Fatalf("encoding/json cannot round-trip %q", text)
		}
		for i, ev := range events[:2] {
			lines := strings.Split(ev, "\n")
			if i == 1 {
				if len(lines) != 2 || lines[0] != "event: delta" {
					t.Fatalf("named event %q", ev)
				}
				lines = lines[1:]
			}
			if len(lines) != 1 {
				t.Fatalf("event %d has %d lines: %q", i, len(lines), ev)
			}
			data, ok := strings.CutPrefix(lines[0], "data: ")
			if !ok {
				t.Fatalf("not a data line: %q", lines[0])
			}
			var got string
			if err := json.Unmarshal([]byte(data), &got); err != nil {
				t.Fatalf("data %q: %v", data, err)
			}
			if got != want {
				t.Fatalf("read back %q, want %q", got, want)
			}
		}
	})
}
