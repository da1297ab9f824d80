package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// sseWriter writes server-sent events: one `data: <json>` line per event, a blank line after each, and
// `data: [DONE]` at the end, flushing after every event so tokens reach the client as they are made.
type sseWriter struct {
	w     io.Writer
	flush func() error
	// buf and enc are reused for every event (one per token): an event is framed in buf and written at once.
	buf bytes.Buffer
	enc *json.Encoder
	// err is the first write or flush failure (the client went away); it is sticky, so that nothing more is
	// written to a dead connection.
	err error
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	rc := http.NewResponseController(w)
	return &sseWriter{w: w, flush: rc.Flush}
}

// event writes v as one event. JSON escapes newlines inside strings, so the payload is one line and cannot
// end the event early.
func (s *sseWriter) event(v any) error {
	if s.err != nil {
		return s.err
	}
	if s.enc == nil {
		// Same encoding as marshal: no HTML escaping.
		s.enc = json.NewEncoder(&s.buf)
		s.enc.SetEscapeHTML(false)
	}
	s.buf.Reset()
	s.buf.WriteString("data: ")
	if err := s.enc.Encode(v); err != nil { // Encode ends the line with '\n'
		return fmt.Errorf("sse: encode event: %w", err)
	}
	s.buf.WriteByte('\n')
	return s.write(s.buf.Bytes())
}

func (s *sseWriter) write(frame []byte) error {
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

func (s *sseWriter) done() error { return s.write([]byte("data: [DONE]\n\n")) }
