package anthropic

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

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
	sse         *httpapi.SSE
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
	st.sse = httpapi.StartSSE(st.w)
	st.index = -1
	msg := Message{ID: st.id, Type: "message", Role: "assistant", Model: st.model, Content: []Block{},
		Usage: Usage{InputTokens: st.inputTokens}}
	if err := st.sse.Named("message_start", messageStart{Type: "message_start", Message: msg}); err != nil {
		return err
	}
	return st.sse.Named("ping", ping{Type: "ping"})
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
	var err error
	if st.tools == nil {
		err = st.text(ev.Content)
	} else {
		err = st.parsed(st.tools.FeedParts(ev.Content))
	}
	if err != nil {
		return err
	}
	for _, c := range ev.ToolCalls {
		if !st.parallel && st.calls > 0 {
			break
		}
		st.calls++
		st.ws = ""
		if err := st.toolUse(structuredBlock(c, st.newID)); err != nil {
			return err
		}
	}
	return nil
}

func (st *stream) text(s string) error {
	if s == "" {
		return nil
	}
	return st.delta("text", s)
}

// parsed streams final text and complete calls in the order the model wrote them, by the rules MessageOf
// follows (see blockRules), so the streamed message has the non-streamed one's blocks.
func (st *stream) parsed(parts []toolcall.Part) error {
	for _, pt := range parts {
		if pt.Call == nil {
			if st.open == "text" || len(bytes.TrimSpace([]byte(pt.Content))) > 0 {
				if err := st.text(st.ws + pt.Content); err != nil {
					return err
				}
				st.ws = ""
			} else {
				st.ws += pt.Content
			}
			continue
		}
		if !st.parallel && st.calls > 0 {
			continue
		}
		st.calls++
		st.ws = ""
		if err := st.toolUse(toolUseBlock(*pt.Call, "toolu_"+st.newID())); err != nil {
			return err
		}
	}
	return nil
}

// toolUse streams one complete tool_use block: its start with empty input, the arguments in one
// input_json_delta, its stop.
func (st *stream) toolUse(b Block) error {
	if err := st.closeBlock(); err != nil {
		return err
	}
	st.index++
	args := string(b.Input)
	b.Input = json.RawMessage("{}")
	if err := st.sse.Named("content_block_start", contentBlockStart{Type: "content_block_start", Index: st.index, ContentBlock: b}); err != nil {
		return err
	}
	if err := st.sse.Named("content_block_delta", contentBlockDelta{Type: "content_block_delta", Index: st.index,
		Delta: delta{Type: "input_json_delta", PartialJSON: &args}}); err != nil {
		return err
	}
	return st.sse.Named("content_block_stop", contentBlockStop{Type: "content_block_stop", Index: st.index})
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
		if err := st.sse.Named("content_block_start", contentBlockStart{Type: "content_block_start", Index: st.index, ContentBlock: b}); err != nil {
			return err
		}
	}
	d := delta{Type: "text_delta", Text: &s}
	if kind == "thinking" {
		d = delta{Type: "thinking_delta", Thinking: &s}
	}
	return st.sse.Named("content_block_delta", contentBlockDelta{Type: "content_block_delta", Index: st.index, Delta: d})
}

func (st *stream) closeBlock() error {
	if st.open == "" {
		return nil
	}
	st.open = ""
	return st.sse.Named("content_block_stop", contentBlockStop{Type: "content_block_stop", Index: st.index})
}

// finish settles what the tool parser holds, closes the last block and ends the message.
func (st *stream) finish(res ports.GenerateResult) error {
	if err := st.start(); err != nil {
		return err
	}
	if st.tools != nil {
		if err := st.parsed(st.tools.FlushParts()); err != nil {
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
	if err := st.sse.Named("message_delta", messageDelta{Type: "message_delta",
		Delta: messageDeltaDelta{StopReason: reason, StopSequence: seq}, Usage: UsageOf(res)}); err != nil {
		return err
	}
	return st.sse.Named("message_stop", messageStop{Type: "message_stop"})
}

// fail reports an error after the stream has started, as Anthropic does: an error event ends the stream.
func (st *stream) fail(e *Error, requestID string) error {
	return st.sse.Named("error", e.body(requestID))
}
