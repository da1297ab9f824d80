package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// SSE writes server-sent events: an optional `event: NAME` line (the Messages API's named events), one
// `data: <json>` line and a blank line after each, flushing after every event so that tokens reach the client
// as they are made. It is not safe for concurrent use: one request's handler writes its stream.
type SSE struct {
	w     io.Writer
	flush func() error
	// buf and enc are reused for every event (one per token): an event is framed in buf and written at once.
	buf bytes.Buffer
	enc *json.Encoder
	// err is the first write or flush failure (the client went away); it is sticky, so that nothing more is
	// written to a dead connection.
	err error
}

// StartSSE answers 200 with the headers of an event stream (no caching, no proxy buffering) and returns the
// writer for its events.
func StartSSE(w http.ResponseWriter) *SSE {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &SSE{w: w, flush: http.NewResponseController(w).Flush}
}

// Event writes v as one unnamed event. JSON escapes newlines inside strings, so the payload is one line and
// cannot end the event early.
func (s *SSE) Event(v any) error { return s.frame("", v) }

// Named writes v as one event named name. The name is the API's own constant; it must not hold a newline.
func (s *SSE) Named(name string, v any) error { return s.frame(name, v) }

// Data writes one event whose data is the literal payload (OpenAI's `[DONE]`), which must not hold a newline.
func (s *SSE) Data(payload string) error { return s.write([]byte("data: " + payload + "\n\n")) }

// Comment writes a comment line, which clients ignore: a keep-alive that stops proxies and browsers from
// timing out an idle stream. The text must not hold a newline.
func (s *SSE) Comment(text string) error { return s.write([]byte(": " + text + "\n\n")) }

// Err is the first write or flush failure, nil while the client is there.
func (s *SSE) Err() error { return s.err }

func (s *SSE) frame(name string, v any) error {
	if s.err != nil {
		return s.err
	}
	if s.enc == nil {
		// Same encoding as Marshal: no HTML escaping (model output is full of <think> and <tool_call>).
		s.enc = json.NewEncoder(&s.buf)
		s.enc.SetEscapeHTML(false)
	}
	s.buf.Reset()
	if name != "" {
		s.buf.WriteString("event: ")
		s.buf.WriteString(name)
		s.buf.WriteByte('\n')
	}
	s.buf.WriteString("data: ")
	if err := s.enc.Encode(v); err != nil { // Encode ends the line with '\n'
		return fmt.Errorf("sse: encode event %q: %w", name, err)
	}
	s.buf.WriteByte('\n')
	return s.write(s.buf.Bytes())
}

func (s *SSE) write(frame []byte) error {
	if s.err != nil {
		return s.err
	}
	if _, err := s.w.Write(frame); err != nil {
		s.err = fmt.Errorf("sse: write: %w", err)
		return s.err
	}
	if s.flush != nil {
		if err := s.flush(); err != nil {
			s.err = fmt.Errorf("sse: flush: %w", err)
			return s.err
		}
	}
	return nil
}
