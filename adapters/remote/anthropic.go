package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/higgs-go/higgs/ports"
)

// Anthropic runs requests on an Anthropic-format provider (/v1/messages), always streamed.
type Anthropic struct{ opts Options }

var _ ports.Generator = (*Anthropic)(nil)

// NewAnthropic returns the outbound adapter of an Anthropic-format provider. Safe for concurrent use.
func NewAnthropic(opts Options) *Anthropic { return &Anthropic{opts: opts} }

// Models lists nothing: the provider's models are its own (a router sends it the names its routes match).
func (p *Anthropic) Models() []ports.ModelCard { return nil }

// anthropicVersion is the Messages API version sent with every request.
const anthropicVersion = "2023-06-01"

// minThinkingBudget is the smallest thinking budget Messages accepts.
const minThinkingBudget = 1024

type anthropicRequest struct {
	Model string `json:"model"`
	// System is the system prompt: a string, or text blocks when a cache breakpoint marks it.
	System        any                `json:"system,omitempty"`
	Messages      []anthropicMessage `json:"messages"`
	MaxTokens     int                `json:"max_tokens"`
	Temperature   *float64           `json:"temperature,omitempty"`
	TopP          float64            `json:"top_p,omitempty"`
	TopK          int                `json:"top_k,omitempty"`
	StopSequences []string           `json:"stop_sequences,omitempty"`
	Stream        bool               `json:"stream"`
	Tools         []anthropicTool    `json:"tools,omitempty"`
	ToolChoice    map[string]any     `json:"tool_choice,omitempty"`
	Thinking      map[string]any     `json:"thinking,omitempty"`
	Seed          *uint64            `json:"seed,omitempty"`
	BlockSize     int                `json:"block_size,omitempty"`
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content []anthropicBlock `json:"content"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   *string         `json:"content,omitempty"`
	// CacheControl marks a cache breakpoint: the prompt up to this block is cached by the provider.
	CacheControl map[string]string `json:"cache_control,omitempty"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// anthropicBody translates req into a Messages body: system messages become the system field, tool
// messages tool_result blocks of a user turn, an assistant's tool_calls tool_use blocks; consecutive turns of
// one role merge, as Messages wants roles to alternate.
func anthropicBody(req ports.GenerateRequest) (anthropicRequest, error) {
	b := anthropicRequest{Model: req.Model, MaxTokens: req.MaxTokens, StopSequences: req.Stop, Stream: true,
		TopK: req.Sampling.TopK, Seed: req.Seed, BlockSize: req.BlockSize}
	switch {
	case req.Messages == nil:
		return b, refuse("prompt", "a raw completion (prompt) cannot be sent to an Anthropic-format provider; send messages")
	case req.Logprobs:
		return b, refuse("logprobs", "log-probabilities are not forwarded to a remote provider")
	case req.Sampling.MinP > 0:
		return b, refuse("min_p", "min_p has no equivalent in the Anthropic format")
	}
	if b.MaxTokens == 0 {
		b.MaxTokens = defaultMaxTokens
	}
	t := req.Sampling.Temperature
	b.Temperature = &t
	if req.Sampling.TopP > 0 && req.Sampling.TopP < 1 {
		b.TopP = req.Sampling.TopP
	}
	var system []anthropicBlock
	systemMarked := false
	marks := map[int]bool{}
	if !req.NoCache {
		for _, i := range req.CacheBreakpoints {
			marks[i] = true
		}
	}
	for i, m := range req.Messages {
		before := b.blocks()
		var last *anthropicBlock // the message's last block, where its cache breakpoint goes
		cm, err := parseRaw(m)
		if err != nil {
			return b, err
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, textBlock(m.Content)...)
			last = &system[len(system)-1]
			systemMarked = systemMarked || marks[i]
		case "user":
			if m.Content != "" { // Messages refuses empty text blocks
				b.add("user", textBlock(m.Content))
			}
		case "assistant":
			var blocks []anthropicBlock
			if m.Content != "" {
				blocks = append(blocks, textBlock(m.Content)...)
			}
			for _, c := range cm.ToolCalls {
				blocks = append(blocks, anthropicBlock{Type: "tool_use", ID: c.ID, Name: c.Function.Name, Input: argsObject(c.Function.Arguments)})
			}
			if len(blocks) > 0 {
				b.add("assistant", blocks)
			}
		case "tool":
			content := m.Content
			b.add("user", []anthropicBlock{{Type: "tool_result", ToolUseID: cm.ToolCallID, Content: &content}})
		default:
			return b, refuse(fmt.Sprintf("messages[%d].role", i), "role %q has no equivalent in the Anthropic format", m.Role)
		}
		if b.blocks() > before { // the message added blocks: they end the last turn
			t := b.Messages[len(b.Messages)-1].Content
			last = &t[len(t)-1]
		}
		if marks[i] && last != nil {
			last.CacheControl = map[string]string{"type": "ephemeral"}
		}
	}
	switch {
	case systemMarked:
		b.System = system
	case len(system) > 0:
		texts := make([]string, len(system))
		for i, sb := range system {
			texts[i] = *sb.Text
		}
		b.System = strings.Join(texts, "\n\n")
	}
	if len(req.Chat.Tools) > 0 {
		var tools []openAITool
		if err := json.Unmarshal(req.Chat.Tools, &tools); err != nil {
			return b, refuse("tools", "the tools could not be read for the provider: %v", err)
		}
		for _, t := range tools {
			schema := t.Function.Parameters
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			b.Tools = append(b.Tools, anthropicTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema})
		}
	}
	if req.Chat.EnableThinking != nil {
		switch {
		case !*req.Chat.EnableThinking:
			b.Thinking = map[string]any{"type": "disabled"}
		case b.MaxTokens <= minThinkingBudget:
			return b, refuse("max_tokens", "thinking on an Anthropic-format provider needs max_tokens above %d (its smallest thinking budget)", minThinkingBudget)
		default:
			b.Thinking = map[string]any{"type": "enabled", "budget_tokens": max(minThinkingBudget, b.MaxTokens/2)}
		}
	}
	if c := req.Constraint; c != nil {
		switch c.Kind {
		case ports.ConstrainJSONObject, ports.ConstrainJSONSchema:
			return b, refuse(c.Param, "a JSON response format is not forwarded to an Anthropic-format provider")
		case ports.ConstrainToolCall:
			b.ToolChoice = map[string]any{"type": "any"}
			if len(c.Tools) == 1 {
				b.ToolChoice = map[string]any{"type": "tool", "name": c.Tools[0].Name}
			}
			if !c.Parallel {
				b.ToolChoice["disable_parallel_tool_use"] = true
			}
		case ports.ConstrainStrictTools:
			// Strictness is the provider's to enforce; the tools go as they are.
		}
	}
	return b, nil
}

// blocks counts the blocks of every turn so far.
func (b *anthropicRequest) blocks() int {
	n := 0
	for _, m := range b.Messages {
		n += len(m.Content)
	}
	return n
}

func textBlock(s string) []anthropicBlock { return []anthropicBlock{{Type: "text", Text: &s}} }

// add appends blocks as a turn of role, merged into the last turn when it has the same role.
func (b *anthropicRequest) add(role string, blocks []anthropicBlock) {
	if n := len(b.Messages); n > 0 && b.Messages[n-1].Role == role {
		b.Messages[n-1].Content = append(b.Messages[n-1].Content, blocks...)
		return
	}
	b.Messages = append(b.Messages, anthropicMessage{Role: role, Content: blocks})
}

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// describeAnthropic reads Anthropic's error shape {"type": "error", "error": {"type", "message"}}; any
// other body is the message as it stands.
func describeAnthropic(body []byte) (msg, param string) {
	var e struct {
		Error *anthropicError `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		return e.Error.Message, ""
	}
	return plainMessage(body), ""
}

// Generate runs req on the provider, streaming its answer into emit.
func (p *Anthropic) Generate(ctx context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	res := ports.GenerateResult{Model: req.Model}
	body, err := anthropicBody(req)
	if err != nil {
		return res, err
	}
	headers := map[string]string{"anthropic-version": anthropicVersion}
	if p.opts.Key != "" {
		headers["x-api-key"] = p.opts.Key
	}
	resp, err := p.opts.post(ctx, "/v1/messages", body, headers, describeAnthropic)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	return p.read(ctx, newSSEReader(resp.Body), res, emit)
}

// anthropicEvent is any event of a Messages stream (the fields of all of them).
type anthropicEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Model string         `json:"model"`
		Usage anthropicUsage `json:"usage"`
	} `json:"message"`
	Index        int `json:"index"`
	ContentBlock *struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta *struct {
		Type         string  `json:"type"`
		Text         string  `json:"text"`
		Thinking     string  `json:"thinking"`
		PartialJSON  string  `json:"partial_json"`
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error *anthropicError `json:"error"`
}

type anthropicUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             int  `json:"output_tokens"`
	CacheCreationInputTokens int  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int  `json:"cache_read_input_tokens"`
}

// apply sets res's token counts: Messages counts the input read from and written to its cache apart from
// input_tokens, the port counts the whole prompt, the part restored and the part written.
func (u anthropicUsage) apply(res *ports.GenerateResult) {
	if u.InputTokens != nil {
		res.PromptTokens = *u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
		res.CachedTokens, res.CacheWriteTokens = u.CacheReadInputTokens, u.CacheCreationInputTokens
	}
	res.CompletionTokens = u.OutputTokens
}

// read folds the Messages stream into events and the result: text and thinking as they come, each tool_use
// block whole at its content_block_stop, the stop reason and usage from message_delta.
func (p *Anthropic) read(ctx context.Context, sse *sseReader, res ports.GenerateResult, emit func(ports.GenerateEvent) error) (out ports.GenerateResult, _ error) {
	name := p.opts.Name
	ans := p.opts.answer()
	defer func() { ans.into(&out) }()
	tools := map[int]*pendingCall{}
	for {
		e, err := sse.Next()
		if err != nil {
			return res, readError(ctx, name, err)
		}
		var ev anthropicEvent
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			return res, badAnswer(name, "stream event", err)
		}
		switch ev.Type {
		case "error":
			if ev.Error == nil {
				return res, badAnswer(name, "error event", errors.New("no error object"))
			}
			return res, streamError(name, ev.Error.Type, ev.Error.Message)
		case "message_start":
			if ev.Message != nil {
				if ev.Message.Model != "" {
					res.Model = ev.Message.Model
				}
				ev.Message.Usage.apply(&res)
			}
		case "content_block_start":
			if b := ev.ContentBlock; b != nil && b.Type == "tool_use" {
				if err := ans.hold(callBytes + len(b.ID) + len(b.Name)); err != nil {
					return res, err
				}
				tools[ev.Index] = &pendingCall{id: b.ID, name: b.Name}
			}
		case "content_block_delta":
			if ev.Delta == nil {
				continue
			}
			switch ev.Delta.Type {
			case "text_delta", "thinking_delta":
				text := ports.GenerateEvent{Content: ev.Delta.Text, Reasoning: ev.Delta.Thinking}
				if err := ans.text(text.Content, text.Reasoning); err != nil {
					return res, err
				}
				if err := send(emit, text); err != nil {
					return res, err
				}
			case "input_json_delta":
				if c := tools[ev.Index]; c != nil {
					if err := ans.hold(len(ev.Delta.PartialJSON)); err != nil {
						return res, err
					}
					c.args = append(c.args, ev.Delta.PartialJSON...)
				}
			}
		case "content_block_stop":
			c := tools[ev.Index]
			if c == nil {
				continue
			}
			delete(tools, ev.Index)
			call := ports.ToolCall{ID: c.id, Name: c.name, Arguments: string(argsObject(c.args))}
			res.ToolCalls = append(res.ToolCalls, call)
			if err := send(emit, ports.GenerateEvent{ToolCalls: []ports.ToolCall{call}}); err != nil {
				return res, err
			}
		case "message_delta":
			if ev.Usage != nil {
				ev.Usage.apply(&res)
			}
			if ev.Delta != nil && ev.Delta.StopReason != nil {
				res.FinishReason = "stop"
				switch *ev.Delta.StopReason {
				case "max_tokens", "model_context_window_exceeded":
					res.FinishReason = "length"
				case "stop_sequence":
					if ev.Delta.StopSequence != nil {
						res.StopSequence = *ev.Delta.StopSequence
					}
				}
			}
		case "message_stop":
			if res.FinishReason == "" {
				return res, fmt.Errorf("%w: provider %s ended its answer without a stop reason", ports.ErrProvider, name)
			}
			return res, nil
		}
	}
}
