package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// SSEWriter writes server-sent events: an optional `event: NAME` line (Anthropic's named events), one
// `data: <json>` line, a blank line after each, and for OpenAI `data: [DONE]` at the end, flushing after every
// event so tokens reach the client as they are made. The Messages API streams through it too.
type SSEWriter struct {
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
func StartSSE(w http.ResponseWriter) *SSEWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &SSEWriter{w: w, flush: http.NewResponseController(w).Flush}
}

// Event writes v as one unnamed event. JSON escapes newlines inside strings, so the payload is one line and
// cannot end the event early.
func (s *SSEWriter) Event(v any) error { return s.frame("", v) }

// Named writes v as one event named name.
func (s *SSEWriter) Named(name string, v any) error { return s.frame(name, v) }

// Err is the first write or flush failure, nil while the client is there.
func (s *SSEWriter) Err() error { return s.err }

func (s *SSEWriter) frame(name string, v any) error {
	if s.err != nil {
		return s.err
	}
	if s.enc == nil {
		// Same encoding as marshal: no HTML escaping (model output is full of <think> and <tool_call>).
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

func (s *SSEWriter) write(frame []byte) error {
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

func (s *SSEWriter) done() error { return s.write([]byte("data: [DONE]\n\n")) }
