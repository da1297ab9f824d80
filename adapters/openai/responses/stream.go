package responses

import (
	"net/http"
	"strings"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

// responseStream writes one /v1/responses request's events, in the documented order: response.created and
// response.in_progress, then per output item output_item.added, its parts (content_part.added, the deltas,
// output_text.done or reasoning_text.done, content_part.done) or its arguments (function_call_arguments
// .delta and .done), output_item.done, and last response.completed (or response.incomplete / response.failed).
// Every event carries its sequence_number, from 0. Headers go out with the first event.
type responseStream struct {
	w        http.ResponseWriter
	sse      *httpapi.SSE
	resp     Response
	seq      int
	started  bool
	newID    func() string
	tools    *toolcall.Parser
	calls    int
	parallel bool
	logprobs bool
	// open is the item being written (a reasoning item or a message), nil between items; text and lps are
	// its text and logprobs so far.
	open *OutputItem
	text strings.Builder
	lps  []ports.TokenLogprob
}

type event map[string]any

func (st *responseStream) emit(typ string, ev event) error {
	ev["type"] = typ
	ev["sequence_number"] = st.seq
	st.seq++
	return st.sse.Named(typ, ev)
}

func (st *responseStream) start() error {
	if st.started {
		return nil
	}
	st.started = true
	st.sse = httpapi.StartSSE(st.w)
	if err := st.emit("response.created", event{"response": st.resp}); err != nil {
		return err
	}
	return st.emit("response.in_progress", event{"response": st.resp})
}

func (st *responseStream) index() int { return len(st.resp.Output) }

// openItem starts a reasoning item or a message (kind "reasoning" or "message"), closing another one.
func (st *responseStream) openItem(kind string) error {
	if st.open != nil && st.open.Type == kind {
		return nil
	}
	if err := st.closeItem(); err != nil {
		return err
	}
	it := OutputItem{Type: kind, Status: "in_progress"}
	part := ContentPart{Type: "reasoning_text"}
	if kind == "message" {
		it.ID, it.Role = "msg_"+st.newID(), "assistant"
		part = textPart("", nil, st.logprobs)
	} else {
		it.ID = "rs_" + st.newID()
	}
	st.open = &it
	if err := st.emit("response.output_item.added", event{"output_index": st.index(), "item": itemAdded(it)}); err != nil {
		return err
	}
	return st.emit("response.content_part.added", event{"item_id": it.ID, "output_index": st.index(), "content_index": 0, "part": part})
}

// itemAdded is an item as output_item.added shows it: no content yet (a reasoning item's summary is []).
func itemAdded(it OutputItem) OutputItem {
	it.Content = []ContentPart{}
	return it
}

func (st *responseStream) closeItem() error {
	it := st.open
	if it == nil {
		return nil
	}
	st.open = nil
	text := st.text.String()
	st.text.Reset()
	base := event{"item_id": it.ID, "output_index": st.index(), "content_index": 0}
	var part ContentPart
	var err error
	if it.Type == "message" {
		part = textPart(text, st.lps, st.logprobs)
		done := event{"text": text, "logprobs": part.Logprobs}
		if part.Logprobs == nil {
			done["logprobs"] = []openai.ChatTokenLogprob{}
		}
		err = st.emit("response.output_text.done", with(base, done))
	} else {
		part = ContentPart{Type: "reasoning_text", Text: text}
		err = st.emit("response.reasoning_text.done", with(base, event{"text": text}))
	}
	st.lps = nil
	if err != nil {
		return err
	}
	if err := st.emit("response.content_part.done", with(base, event{"part": part})); err != nil {
		return err
	}
	it.Status = "completed"
	it.Content = []ContentPart{part}
	if err := st.emit("response.output_item.done", event{"output_index": st.index(), "item": *it}); err != nil {
		return err
	}
	st.resp.Output = append(st.resp.Output, *it)
	return nil
}

func with(base, more event) event {
	out := event{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

func (st *responseStream) send(ev ports.GenerateEvent) error {
	if err := st.start(); err != nil {
		return err
	}
	var calls []toolcall.Call
	if st.tools != nil {
		ev.Content, calls = st.tools.Feed(ev.Content)
	}
	return st.sendParsed(ev, append(calls, structuredCalls(ev.ToolCalls)...))
}

func (st *responseStream) sendParsed(ev ports.GenerateEvent, calls []toolcall.Call) error {
	if ev.Reasoning != "" {
		if err := st.openItem("reasoning"); err != nil {
			return err
		}
		st.text.WriteString(ev.Reasoning)
		if err := st.emit("response.reasoning_text.delta", event{"item_id": st.open.ID, "output_index": st.index(),
			"content_index": 0, "delta": ev.Reasoning}); err != nil {
			return err
		}
	}
	if ev.Content != "" {
		if err := st.openItem("message"); err != nil {
			return err
		}
		st.text.WriteString(ev.Content)
		st.lps = append(st.lps, ev.Logprobs...)
		d := event{"item_id": st.open.ID, "output_index": st.index(), "content_index": 0, "delta": ev.Content,
			"logprobs": []openai.ChatTokenLogprob{}}
		if st.logprobs {
			if l := openai.ChatLogprobsOf(ev.Logprobs); l != nil {
				d["logprobs"] = l.Content
			}
		}
		if err := st.emit("response.output_text.delta", d); err != nil {
			return err
		}
	} else if st.open != nil && st.open.Type == "message" {
		st.lps = append(st.lps, ev.Logprobs...)
	}
	if !st.parallel && st.calls+len(calls) > 1 {
		calls = calls[:max(0, 1-st.calls)]
	}
	for _, c := range calls {
		if err := st.sendCall(c); err != nil {
			return err
		}
	}
	return nil
}

// sendCall writes one complete function call as its own output item.
func (st *responseStream) sendCall(c toolcall.Call) error {
	if err := st.closeItem(); err != nil {
		return err
	}
	st.calls++
	empty := ""
	it := OutputItem{ID: "fc_" + st.newID(), Type: "function_call", Status: "in_progress", CallID: "call_" + st.newID(),
		Name: c.Name, Arguments: &empty}
	idx := st.index()
	if err := st.emit("response.output_item.added", event{"output_index": idx, "item": it}); err != nil {
		return err
	}
	if err := st.emit("response.function_call_arguments.delta", event{"item_id": it.ID, "output_index": idx, "delta": c.Arguments}); err != nil {
		return err
	}
	if err := st.emit("response.function_call_arguments.done", event{"item_id": it.ID, "output_index": idx,
		"name": c.Name, "arguments": c.Arguments}); err != nil {
		return err
	}
	args := c.Arguments
	it.Arguments, it.Status = &args, "completed"
	if err := st.emit("response.output_item.done", event{"output_index": idx, "item": it}); err != nil {
		return err
	}
	st.resp.Output = append(st.resp.Output, it)
	return nil
}

func (st *responseStream) finish(res ports.GenerateResult) error {
	if err := st.start(); err != nil {
		return err
	}
	if st.tools != nil {
		content, calls := st.tools.Flush()
		if err := st.sendParsed(ports.GenerateEvent{Content: content}, calls); err != nil {
			return err
		}
	}
	if len(st.resp.Output) == 0 && (st.open == nil || st.open.Type != "message") {
		// An answer with no text and no call is still a message, as when not streamed.
		if err := st.openItem("message"); err != nil {
			return err
		}
	}
	if err := st.closeItem(); err != nil {
		return err
	}
	finishResponse(&st.resp, res)
	typ := "response.completed"
	if st.resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	return st.emit(typ, event{"response": st.resp})
}

// failed ends a stream whose generation failed after it started: response.failed with the error.
func (st *responseStream) failed(e *openai.Error) error {
	st.resp.Status = "failed"
	code := e.Code
	if code == "" {
		code = "server_error"
	}
	st.resp.Error = &ResponseError{Code: code, Message: e.Message}
	return st.emit("response.failed", event{"response": st.resp})
}
