package remote

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxEventBytes bounds one server-sent event (its lines together): a provider that sends more without a
// blank line is answering nonsense, not a stream.
const maxEventBytes = 8 << 20

// event is one server-sent event: its name ("" when the stream names none) and its data lines joined by "\n".
type event struct {
	Name string
	Data []byte
}

// sseReader reads server-sent events as the HTML standard defines them: lines ending in LF, CRLF or CR;
// "field: value" lines (one space after the colon dropped); lines starting with ':' are comments; a blank
// line dispatches the event; an event with no data line is not dispatched.
type sseReader struct {
	r    *bufio.Reader
	name string
	data []byte
	has  bool
	size int
	cr   bool // the last line ended in CR: a following LF belongs to it
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 64<<10)} }

// errEventTooLarge is returned for an event over maxEventBytes.
var errEventTooLarge = errors.New("server-sent event too large")

// Next returns the next event, or io.EOF at the end of the stream (an event not ended by a blank line is
// dropped, as the standard says).
func (s *sseReader) Next() (event, error) {
	for {
		line, err := s.line()
		if err != nil {
			return event{}, err
		}
		if len(line) == 0 {
			if s.has {
				ev := event{Name: s.name, Data: s.data}
				s.name, s.data, s.has, s.size = "", nil, false, 0
				return ev, nil
			}
			s.name, s.size = "", 0
			continue
		}
		if s.size += len(line); s.size > maxEventBytes {
			return event{}, fmt.Errorf("%w (over %d bytes)", errEventTooLarge, maxEventBytes)
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			s.name = string(value)
		case "data":
			if s.has {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			s.has = true
		}
	}
}

// line reads one line without its end; io.EOF when the stream ends (a last line without an end is dropped
// with its event, which the blank line never dispatched).
func (s *sseReader) line() ([]byte, error) {
	var out []byte
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return nil, err
		}
		if s.cr {
			s.cr = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return out, nil
		case '\r':
			s.cr = true
			return out, nil
		}
		if len(out) >= maxEventBytes {
			return nil, fmt.Errorf("%w (a line over %d bytes)", errEventTooLarge, maxEventBytes)
		}
		out = append(out, b)
	}
}
