package openai

import (
	"fmt"
	"io"
	"net/http"
)

// sseWriter writes server-sent events: one `data: <json>` line per event, a blank line after each, and
// `data: [DONE]` at the end, flushing after every event so tokens reach the client as they are made.
type sseWriter struct {
	w     io.Writer
	flush func() error
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
	b, err := marshal(v)
	if err != nil {
		return fmt.Errorf("sse: encode event: %w", err)
	}
	return s.raw(b)
}

func (s *sseWriter) raw(data []byte) error {
	if s.err != nil {
		return s.err
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", data); err != nil {
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

func (s *sseWriter) done() error { return s.raw([]byte("[DONE]")) }
