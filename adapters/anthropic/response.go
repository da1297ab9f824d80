package anthropic

import (
	"bytes"
	"encoding/json"

	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

// Message is a non-streamed Messages response (and, without content, the message of message_start).
type Message struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	Content      []Block `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        Usage   `json:"usage"`
}

// Block is a content block: thinking (Thinking, Signature), text (Text) or tool_use (ID, Name, Input).
type Block struct {
	Type      string          `json:"type"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	Text      *string         `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// Usage is the token account, split as Anthropic splits it: the prompt is input_tokens +
// cache_creation_input_tokens + cache_read_input_tokens, where cache_read_input_tokens were restored from
// the prefix cache and cache_creation_input_tokens were written to it up to the request's last cache_control
// breakpoint. Speculative is higgs' extension, as on the OpenAI side.
type Usage struct {
	InputTokens              int              `json:"input_tokens"`
	OutputTokens             int              `json:"output_tokens"`
	CacheCreationInputTokens int              `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int              `json:"cache_read_input_tokens"`
	Speculative              *ports.SpecUsage `json:"speculative,omitempty"`
}

// UsageOf builds the usage of a finished request.
func UsageOf(res ports.GenerateResult) Usage {
	spec := res.Spec
	if spec.AcceptedPerPosition == nil {
		spec.AcceptedPerPosition = []int{}
	}
	return Usage{InputTokens: max(res.PromptTokens-res.CachedTokens-res.CacheWriteTokens, 0), OutputTokens: res.CompletionTokens,
		CacheCreationInputTokens: res.CacheWriteTokens, CacheReadInputTokens: res.CachedTokens, Speculative: &spec}
}

// StopReason translates how generation ended: "stop_sequence" for a stop string, "tool_use" when the model
// stopped after calling tools, "max_tokens" when cut by the limit (also after calls: the answer may be
// incomplete), "end_turn" otherwise.
func StopReason(res ports.GenerateResult, called bool) (reason string, sequence *string) {
	switch {
	case res.StopSequence != "":
		s := res.StopSequence
		return "stop_sequence", &s
	case res.FinishReason == "length":
		return "max_tokens", nil
	case called:
		return "tool_use", nil
	}
	return "end_turn", nil
}

func textBlockOf(s string) Block { return Block{Type: "text", Text: &s} }

func thinkingBlockOf(s string) Block {
	sig := ""
	return Block{Type: "thinking", Thinking: &s, Signature: &sig}
}

// toolUseBlock names a parsed call; its arguments are the JSON object the model wrote (toolcall checks it).
func toolUseBlock(c toolcall.Call, id string) Block {
	return Block{Type: "tool_use", ID: id, Name: c.Name, Input: json.RawMessage(c.Arguments)}
}

// MessageOf builds the non-streamed response: thinking, then the text and the tool calls in the order the
// model wrote them, by the streamed message's rules (blockRules), so both carry the same blocks.
func MessageOf(id string, req Request, res ports.GenerateResult, newID func() string) Message {
	b := blockRules{parallel: req.Parallel, newID: newID, content: []Block{}}
	if res.Reasoning != "" {
		b.content = append(b.content, thinkingBlockOf(res.Reasoning))
	}
	if req.ParseTools {
		for _, pt := range toolcall.ParseParts(res.Content, toolcall.ParamTypesOf(req.Gen.Chat.Tools)) {
			b.add(pt)
		}
		if b.calls == 0 {
			b.text(b.ws)
		}
	} else {
		b.text(res.Content)
	}
	for _, c := range res.ToolCalls {
		b.structured(c)
	}
	reason, seq := StopReason(res, b.calls > 0)
	return Message{ID: id, Type: "message", Role: "assistant", Model: res.Model, Content: b.content,
		StopReason: &reason, StopSequence: seq, Usage: UsageOf(res)}
}

// blockRules turns an answer's parts into blocks, as the stream does piece by piece: text joins the open
// text block; whitespace-only text opens none (it waits for text to lead, is dropped at a call, and is a
// block of its own only in an answer without calls); each call is a tool_use block; parallel false keeps
// only the first call.
type blockRules struct {
	parallel bool
	newID    func() string
	content  []Block
	open     bool // the last block is text that may go on
	ws       string
	calls    int
}

func (b *blockRules) add(pt toolcall.Part) {
	if pt.Call == nil {
		if b.open || len(bytes.TrimSpace([]byte(pt.Content))) > 0 {
			b.text(b.ws + pt.Content)
			b.ws = ""
		} else {
			b.ws += pt.Content
		}
		return
	}
	if !b.parallel && b.calls > 0 {
		return
	}
	b.calls++
	b.ws, b.open = "", false
	b.content = append(b.content, toolUseBlock(*pt.Call, "toolu_"+b.newID()))
}

// structured adds a Generator's structured call (a remote provider's), keeping its id, by add's rules.
func (b *blockRules) structured(c ports.ToolCall) {
	if !b.parallel && b.calls > 0 {
		return
	}
	b.calls++
	b.ws, b.open = "", false
	b.content = append(b.content, structuredBlock(c, b.newID))
}

// structuredBlock is the tool_use block of a structured call; a call without an id is named with newID.
func structuredBlock(c ports.ToolCall, newID func() string) Block {
	id := c.ID
	if id == "" {
		id = "toolu_" + newID()
	}
	args := c.Arguments
	if args == "" {
		args = "{}"
	}
	return Block{Type: "tool_use", ID: id, Name: c.Name, Input: json.RawMessage(args)}
}

func (b *blockRules) text(s string) {
	if s == "" {
		return
	}
	if b.open {
		*b.content[len(b.content)-1].Text += s
		return
	}
	b.content = append(b.content, textBlockOf(s))
	b.open = true
}
