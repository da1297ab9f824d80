package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

// sseWriter writes Anthropic's named server-sent events ("event: NAME", "data: JSON", blank line), flushing
// after each so text reaches the client as it is made. The first write error is sticky.
type sseWriter struct {
	w     io.Writer
	flush func() error
	buf   bytes.Buffer
	enc   *json.Encoder
	err   error
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	sw := &sseWriter{w: w, flush: http.NewResponseController(w).Flush}
	sw.enc = json.NewEncoder(&sw.buf)
	sw.enc.SetEscapeHTML(false) // model output is full of <think> and <tool_call>
	return sw
}

// event writes one event; v's JSON is one line (JSON escapes newlines in strings), so it cannot end the
// event early.
func (s *sseWriter) event(name string, v any) error {
	if s.err != nil {
		return s.err
	}
	s.buf.Reset()
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	if err := s.enc.Encode(v); err != nil {
		return fmt.Errorf("sse: encode %s: %w", name, err)
	}
	s.buf.WriteByte('\n')
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		s.err = fmt.Errorf("sse: write: %w", err)
		return s.err
	}
	if s.flush != nil {
		if err := s.flush(); err != nil {
			s.err = fmt.Errorf("sse: flush: %w", err)
		}
	}
	return s.err
}

// The event payloads, in the order a stream sends them.
type (
	messageStart struct {
		Type    string  `json:"type"`
		Message Message `json:"message"`
	}
	ping struct {
		Type string `json:"type"`
	}
	contentBlockStart struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock Block  `json:"content_block"`
	}
	contentBlockDelta struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta delta  `json:"delta"`
	}
	delta struct {
		Type        string  `json:"type"`
		Text        *string `json:"text,omitempty"`
		Thinking    *string `json:"thinking,omitempty"`
		PartialJSON *string `json:"partial_json,omitempty"`
	}
	contentBlockStop struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	messageDelta struct {
		Type  string            `json:"type"`
		Delta messageDeltaDelta `json:"delta"`
		Usage Usage             `json:"usage"`
	}
	messageDeltaDelta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	messageStop struct {
		Type string `json:"type"`
	}
)

// stream writes one request's events. Headers and message_start go out with the first output, so that
// errors found before it (validation, a full queue) still get their own status.
type stream struct {
	w           http.ResponseWriter
	sse         *sseWriter
	id, model   string
	inputTokens int
	newID       func() string
	started     bool
	// open is the type of the content block being streamed ("" when none), at index.
	open  string
	index int
	// tools parses the answer for calls (nil when the model was not offered tools).
	tools    *toolcall.Parser
	calls    int
	parallel bool
	// ws is whitespace-only text not yet sent: it opens no text block of its own, so it waits for text to
	// lead (or is dropped at a call, as the whole message drops whitespace-only text beside calls).
	ws string
}

func (st *stream) start() error {
	if st.started {
		return nil
	}
	st.started = true
	h := st.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	st.w.WriteHeader(http.StatusOK)
	st.sse = newSSEWriter(st.w)
	st.index = -1
	msg := Message{ID: st.id, Type: "message", Role: "assistant", Model: st.model, Content: []Block{},
		Usage: Usage{InputTokens: st.inputTokens}}
	if err := st.sse.event("message_start", messageStart{Type: "message_start", Message: msg}); err != nil {
		return err
	}
	return st.sse.event("ping", ping{Type: "ping"})
}

// send streams one piece of output.
func (st *stream) send(ev ports.GenerateEvent) error {
	if err := st.start(); err != nil {
		return err
	}
	if ev.Reasoning != "" {
		if err := st.delta("thinking", ev.Reasoning); err != nil {
			return err
		}
	}
	if st.tools == nil {
		return st.text(ev.Content)
	}
	content, calls := st.tools.Feed(ev.Content)
	return st.parsed(content, calls)
}

func (st *stream) text(s string) error {
	if s == "" {
		return nil
	}
	return st.delta("text", s)
}

// parsed streams final text, then the calls that are complete.
func (st *stream) parsed(content string, calls []toolcall.Call) error {
	switch {
	case st.open == "text" || len(bytes.TrimSpace([]byte(content))) > 0:
		if err := st.text(st.ws + content); err != nil {
			return err
		}
		st.ws = ""
	default:
		st.ws += content
	}
	for _, c := range calls {
		if !st.parallel && st.calls > 0 {
			break
		}
		st.calls++
		st.ws = ""
		if err := st.closeBlock(); err != nil {
			return err
		}
		st.index++
		b := toolUseBlock(c, "toolu_"+st.newID())
		args := string(b.Input)
		b.Input = json.RawMessage("{}")
		if err := st.sse.event("content_block_start", contentBlockStart{Type: "content_block_start", Index: st.index, ContentBlock: b}); err != nil {
			return err
		}
		if err := st.sse.event("content_block_delta", contentBlockDelta{Type: "content_block_delta", Index: st.index,
			Delta: delta{Type: "input_json_delta", PartialJSON: &args}}); err != nil {
			return err
		}
		if err := st.sse.event("content_block_stop", contentBlockStop{Type: "content_block_stop", Index: st.index}); err != nil {
			return err
		}
	}
	return nil
}

// delta appends s to a block of kind ("text" or "thinking"), opening one when another kind is open.
func (st *stream) delta(kind, s string) error {
	if st.open != kind {
		if err := st.closeBlock(); err != nil {
			return err
		}
		st.index++
		st.open = kind
		b := textBlockOf("")
		if kind == "thinking" {
			b = thinkingBlockOf("")
		}
		if err := st.sse.event("content_block_start", contentBlockStart{Type: "content_block_start", Index: st.index, ContentBlock: b}); err != nil {
			return err
		}
	}
	d := delta{Type: "text_delta", Text: &s}
	if kind == "thinking" {
		d = delta{Type: "thinking_delta", Thinking: &s}
	}
	return st.sse.event("content_block_delta", contentBlockDelta{Type: "content_block_delta", Index: st.index, Delta: d})
}

func (st *stream) closeBlock() error {
	if st.open == "" {
		return nil
	}
	st.open = ""
	return st.sse.event("content_block_stop", contentBlockStop{Type: "content_block_stop", Index: st.index})
}

// finish settles what the tool parser holds, closes the last block and ends the message.
func (st *stream) finish(res ports.GenerateResult) error {
	if err := st.start(); err != nil {
		return err
	}
	if st.tools != nil {
		content, calls := st.tools.Flush()
		if err := st.parsed(content, calls); err != nil {
			return err
		}
		if st.calls == 0 {
			if err := st.text(st.ws); err != nil {
				return err
			}
		}
	}
	if err := st.closeBlock(); err != nil {
		return err
	}
	reason, seq := StopReason(res, st.calls > 0)
	if err := st.sse.event("message_delta", messageDelta{Type: "message_delta",
		Delta: messageDeltaDelta{StopReason: reason, StopSequence: seq}, Usage: UsageOf(res)}); err != nil {
		return err
	}
	return st.sse.event("message_stop", messageStop{Type: "message_stop"})
}

// fail reports an error after the stream has started, as Anthropic does: an error event ends the stream.
func (st *stream) fail(e *Error, requestID string) error {
	return st.sse.event("error", e.body(requestID))
}
