package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// maxStopSequences bounds stop_sequences: each one is matched against the output after every token.
const maxStopSequences = 64

// minThinkingBudget is Anthropic's lower bound for thinking.budget_tokens.
const minThinkingBudget = 1024

// Request is a decoded and checked Messages request: what the Generator runs plus how to answer.
type Request struct {
	Gen    ports.GenerateRequest
	Stream bool
	// ParseTools means the model was offered tools and its answer is parsed for calls.
	ParseTools bool
	// Parallel false keeps only the first call of an answer (tool_choice.disable_parallel_tool_use).
	Parallel bool
}

// body is the Messages request. Pointers and raw messages tell "absent" from zero values.
type body struct {
	Model         *string         `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	Messages      json.RawMessage `json:"messages"`
	System        json.RawMessage `json:"system"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        *bool           `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Metadata      *struct {
		UserID *string `json:"user_id"`
	} `json:"metadata"`
	Tools      json.RawMessage `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	Thinking   json.RawMessage `json:"thinking"`
	// OutputConfig.format (and the deprecated output_format) hold structured outputs' JSON Schema.
	OutputConfig json.RawMessage `json:"output_config"`
	OutputFormat json.RawMessage `json:"output_format"`
	ServiceTier  *string         `json:"service_tier"`
	Speed        *string         `json:"speed"`
	// Fields Anthropic's API takes that higgs refuses unless neutral (fields.go).
	Thread            json.RawMessage `json:"thread"`
	Container         json.RawMessage `json:"container"`
	MCPServers        json.RawMessage `json:"mcp_servers"`
	ContextManagement json.RawMessage `json:"context_management"`
	Compaction        json.RawMessage `json:"compaction"`
	// CacheControl at the top level is automatic caching: a breakpoint at the end of the conversation.
	CacheControl json.RawMessage `json:"cache_control"`
	// higgs extensions, as on the OpenAI side: the block size, the seed, and cache_prompt false to keep the
	// request out of the prefix cache (llama.cpp's name).
	BlockSize   *int    `json:"block_size"`
	Seed        *uint64 `json:"seed"`
	CachePrompt *bool   `json:"cache_prompt"`
}

// ParseMessages decodes and checks a POST /v1/messages body.
func ParseMessages(raw []byte) (Request, error) {
	return parse(raw, createFields, true)
}

// ParseCountTokens decodes and checks a POST /v1/messages/count_tokens body; the request it returns is
// the one a Messages request with the same fields would run.
func ParseCountTokens(raw []byte) (Request, error) {
	return parse(raw, countFields, false)
}

func parse(raw []byte, fields []string, create bool) (Request, error) {
	var r Request
	var b body
	if err := decode(raw, &b, fields); err != nil {
		return r, err
	}
	if err := b.refuseUnserved(create); err != nil {
		return r, err
	}
	if b.Model == nil || *b.Model == "" {
		return r, invalid("model", "field required")
	}
	r.Gen.Model = *b.Model
	if create {
		if err := b.generation(&r); err != nil {
			return r, err
		}
	}
	sys, err := parseSystem(b.System)
	if err != nil {
		return r, err
	}
	if isNull(b.Messages) {
		return r, invalid("messages", "field required")
	}
	msgs, ends, err := parseConversation(b.Messages)
	if err != nil {
		return r, err
	}
	if sys != nil {
		msgs = append([]ports.ChatMessage{*sys}, msgs...)
		for k := range ends {
			ends[k]++
		}
	}
	r.Gen.Messages = msgs
	if create {
		if r.Gen.CacheBreakpoints, err = b.cacheBreakpoints(ends); err != nil {
			return r, err
		}
	}
	var forced *ports.Constraint
	if r.Gen.Chat.Tools, r.ParseTools, r.Parallel, forced, err = parseTools(b.Tools, b.ToolChoice); err != nil {
		return r, err
	}
	if r.Gen.Constraint, err = parseOutputFormat(b.OutputConfig, b.OutputFormat); err != nil {
		return r, err
	}
	if forced != nil {
		if r.Gen.Constraint != nil {
			return r, invalid("output_config", "a JSON output format together with forced or strict tool calls: the answer is constrained to one language; send one of them")
		}
		r.Gen.Constraint = forced
	}
	if r.Gen.Chat.EnableThinking, err = parseThinking(b.Thinking, b.MaxTokens); err != nil {
		return r, err
	}
	return r, nil
}

// generation checks the fields that only matter when generating.
func (b *body) generation(r *Request) error {
	if b.MaxTokens == nil {
		return invalid("max_tokens", "field required")
	}
	if *b.MaxTokens < 1 {
		return invalid("max_tokens", "must be at least 1, not %d", *b.MaxTokens)
	}
	r.Gen.MaxTokens = *b.MaxTokens
	// Anthropic's defaults: temperature 1, no nucleus or top-k cut.
	r.Gen.Sampling = ports.SamplingParams{Temperature: 1, TopP: 1}
	if t := b.Temperature; t != nil {
		r.Gen.SamplingSet.Temperature = true
		if !(*t >= 0 && *t <= 1) {
			return invalid("temperature", "must be between 0 and 1, not %v", *t)
		}
		r.Gen.Sampling.Temperature = *t
	}
	if p := b.TopP; p != nil {
		r.Gen.SamplingSet.TopP = true
		if !(*p > 0 && *p <= 1) {
			return invalid("top_p", "must be greater than 0 and at most 1, not %v", *p)
		}
		r.Gen.Sampling.TopP = *p
	}
	if k := b.TopK; k != nil {
		r.Gen.SamplingSet.TopK = true
		if *k < 0 {
			return invalid("top_k", "must be 0 (no cut) or positive, not %d", *k)
		}
		r.Gen.Sampling.TopK = *k
	}
	if len(b.StopSequences) > maxStopSequences {
		return invalid("stop_sequences", "at most %d stop sequences, not %d", maxStopSequences, len(b.StopSequences))
	}
	for i, s := range b.StopSequences {
		if s == "" {
			return invalid(fmt.Sprintf("stop_sequences.%d", i), "must not be empty")
		}
	}
	if len(b.StopSequences) > 0 {
		r.Gen.Stop = b.StopSequences
	}
	if b.Stream != nil {
		r.Stream = *b.Stream
	}
	if b.ServiceTier != nil && *b.ServiceTier != "auto" && *b.ServiceTier != "standard_only" {
		return invalid("service_tier", "must be \"auto\" or \"standard_only\", not %q", *b.ServiceTier)
	}
	if b.BlockSize != nil {
		if *b.BlockSize < 1 {
			return invalid("block_size", "must be at least 1 (1 turns speculation off), not %d", *b.BlockSize)
		}
		r.Gen.BlockSize = *b.BlockSize
	}
	r.Gen.Seed = b.Seed
	r.Gen.NoCache = b.CachePrompt != nil && !*b.CachePrompt
	return nil
}

// decode checks the top-level fields against allowed, then unmarshals, naming the field of a type error.
func decode(raw []byte, v any, allowed []string) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return invalid("", "the request body is empty; send a JSON object")
	}
	var top map[string]json.RawMessage
	err := json.Unmarshal(raw, &top)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return invalid("", "the request body is not valid JSON (at byte %d): %v", syn.Offset, syn)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "the request body is truncated JSON")
	case err != nil || top == nil:
		return invalid("", "the request body must be a JSON object")
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return invalid(k, "Extra inputs are not permitted")
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		if errors.As(err, &typ) && typ.Field != "" {
			return invalid(typ.Field, "must be %s, not %s", httpapi.JSONKind(typ.Type.Kind().String()), typ.Value)
		}
		return invalid("", "the request body could not be decoded: %v", err)
	}
	if path, found := httpapi.InvalidText(raw); found {
		return invalid(fieldPath(path), "is not valid UTF-8 text (invalid bytes or a lone surrogate escape); send the text as UTF-8")
	}
	return nil
}

func isNull(r json.RawMessage) bool {
	t := bytes.TrimSpace(r)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// textBlock is a {"type": "text", "text": …} block (the only block system prompts and tool results hold).
type textBlock struct {
	Type *string `json:"type"`
	Text *string `json:"text"`
}

// rawIsEmptyString reports whether r is the JSON string "".
func rawIsEmptyString(r json.RawMessage) bool {
	var s string
	return json.Unmarshal(r, &s) == nil && s == ""
}

// fieldPath writes a path into the body as Anthropic names fields: messages.0.content.
func fieldPath(path []any) string {
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = fmt.Sprint(p)
	}
	return strings.Join(parts, ".")
}

// joinText reads a string or an array of text blocks; blocks are joined by a newline so that two blocks'
// sentences do not run together.
func joinText(raw json.RawMessage, field string) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []textBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return "", invalid(field, "must be a string or an array of text blocks")
	}
	parts := make([]string, len(blocks))
	for i, b := range blocks {
		f := fmt.Sprintf("%s.%d", field, i)
		switch {
		case b.Type == nil:
			return "", invalid(f+".type", "field required")
		case *b.Type != "text":
			return "", unsupported(f+".type", fmt.Sprintf("%q blocks are not served here (text only)", *b.Type))
		case b.Text == nil:
			return "", invalid(f+".text", "field required")
		}
		parts[i] = *b.Text
	}
	return strings.Join(parts, "\n"), nil
}

func parseSystem(raw json.RawMessage) (*ports.ChatMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	text, err := joinText(raw, "system")
	if err != nil {
		return nil, err
	}
	m := chatMessage(openaiMessage{Role: "system", Content: &text})
	return &m, nil
}

// openaiMessage is a chat message in the OpenAI shape the chat templates read (ports.ChatMessage.Raw).
type openaiMessage struct {
	Role             string           `json:"role"`
	Content          *string          `json:"content"`
	ReasoningContent *string          `json:"reasoning_content,omitempty"`
	ToolCalls        []openaiToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string           `json:"tool_call_id,omitempty"`
}

type openaiToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
		// Arguments is an object, not OpenAI's string of JSON: templates expect a mapping (as the OpenAI
		// adapter hands them).
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

func chatMessage(m openaiMessage) ports.ChatMessage {
	raw, _ := marshal(m) // plain strings and already valid raw JSON: cannot fail
	content := ""
	if m.Content != nil {
		content = *m.Content
	}
	return ports.ChatMessage{Role: m.Role, Content: content, Raw: raw}
}

// block is one content block of a message, with the fields of every type higgs reads.
type block struct {
	Type      *string         `json:"type"`
	Text      *string         `json:"text"`
	ID        *string         `json:"id"`
	Name      *string         `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID *string         `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   *bool           `json:"is_error"`
	Thinking  *string         `json:"thinking"`
}

type wireMessage struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

// parseConversation turns Anthropic messages into the OpenAI-shaped chat messages the template reads. It
// enforces Anthropic's tool rules: a tool_result answers a tool_use of the assistant message right before
// it, every tool_use is answered in the next user message, and a user message puts its tool_result blocks
// before any text.
//
// ends[k] is the index in the result of the last chat message wire message k became.
func parseConversation(raw json.RawMessage) (out []ports.ChatMessage, ends []int, err error) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, nil, invalid("messages", "must be an array of message objects")
	}
	if len(items) == 0 {
		return nil, nil, invalid("messages", "at least one message is required")
	}
	var open []string // tool_use ids of the previous assistant message not yet answered
	for i, it := range items {
		field := fmt.Sprintf("messages.%d", i)
		var m wireMessage
		if json.Unmarshal(it, &m) != nil {
			return nil, nil, invalid(field, "must be an object with role and content")
		}
		if m.Role == nil {
			return nil, nil, invalid(field+".role", "field required")
		}
		if isNull(m.Content) {
			return nil, nil, invalid(field+".content", "field required")
		}
		blocks, err := contentBlocks(m.Content, field+".content")
		if err != nil {
			return nil, nil, err
		}
		if len(blocks) == 0 || len(blocks) == 1 && rawIsEmptyString(m.Content) {
			// Anthropic's rule and words (a final assistant message is refused below for another reason).
			return nil, nil, invalid(field, "all messages must have non-empty content except for the optional final assistant message")
		}
		switch *m.Role {
		case "user":
			msgs, err := userMessages(blocks, field, &open)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, msgs...)
		case "assistant":
			if len(open) > 0 {
				return nil, nil, invalid(field, "tool_use ids were found without tool_result blocks immediately after: %s", strings.Join(open, ", "))
			}
			if i == len(items)-1 {
				return nil, nil, unsupported(field, "a final assistant message (prefilling the answer) is not served; end the conversation with a user message")
			}
			msg, ids, err := assistantMessage(blocks, field)
			if err != nil {
				return nil, nil, err
			}
			open = ids
			out = append(out, msg)
		default:
			return nil, nil, invalid(field+".role", "must be \"user\" or \"assistant\", not %q (a system prompt goes in the top-level system field)", *m.Role)
		}
		ends = append(ends, len(out)-1)
	}
	return out, ends, nil
}

// contentBlocks reads a message's content: a string (one text block) or an array of blocks.
func contentBlocks(raw json.RawMessage, field string) ([]block, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		t := "text"
		return []block{{Type: &t, Text: &s}}, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" {
			return nil, invalid(field+"."+typ.Field, "must be %s, not %s", httpapi.JSONKind(typ.Type.Kind().String()), typ.Value)
		}
		return nil, invalid(field, "must be a string or an array of content blocks")
	}
	for j, b := range blocks {
		if b.Type == nil {
			return nil, invalid(fmt.Sprintf("%s.%d.type", field, j), "field required")
		}
	}
	return blocks, nil
}

func userMessages(blocks []block, field string, open *[]string) ([]ports.ChatMessage, error) {
	var out []ports.ChatMessage
	var text []string
	answered := 0
	for j, b := range blocks {
		f := fmt.Sprintf("%s.content.%d", field, j)
		switch *b.Type {
		case "text":
			if b.Text == nil {
				return nil, invalid(f+".text", "field required")
			}
			text = append(text, *b.Text)
		case "tool_result":
			if len(text) > 0 {
				return nil, invalid(f, "tool_result blocks must come before any text in a user message")
			}
			if b.ToolUseID == nil || *b.ToolUseID == "" {
				return nil, invalid(f+".tool_use_id", "field required")
			}
			k := slices.Index(*open, *b.ToolUseID)
			if k < 0 {
				return nil, invalid(f+".tool_use_id", "%q matches no tool_use block of the previous assistant message (or was already answered)", *b.ToolUseID)
			}
			*open = slices.Delete(*open, k, k+1)
			answered++
			content := ""
			if !isNull(b.Content) {
				c, err := joinText(b.Content, f+".content")
				if err != nil {
					return nil, err
				}
				content = c
			}
			if b.IsError != nil && *b.IsError {
				// The template has no place for the flag; the model reads it in the reply.
				content = "Error: " + content
			}
			out = append(out, chatMessage(openaiMessage{Role: "tool", Content: &content, ToolCallID: *b.ToolUseID}))
		case "image", "document", "search_result":
			return nil, unsupported(f+".type", fmt.Sprintf("%q blocks are not served (text only)", *b.Type))
		default:
			return nil, invalid(f+".type", "%q is not a block type of a user message (text, tool_result)", *b.Type)
		}
	}
	if len(*open) > 0 {
		return nil, invalid(field, "tool_use ids were found without tool_result blocks immediately after: %s", strings.Join(*open, ", "))
	}
	if len(text) > 0 || answered == 0 {
		t := strings.Join(text, "\n")
		out = append(out, chatMessage(openaiMessage{Role: "user", Content: &t}))
	}
	return out, nil
}

func assistantMessage(blocks []block, field string) (ports.ChatMessage, []string, error) {
	var text, reasoning []string
	var calls []openaiToolCall
	var ids []string
	for j, b := range blocks {
		f := fmt.Sprintf("%s.content.%d", field, j)
		switch *b.Type {
		case "text":
			if b.Text == nil {
				return ports.ChatMessage{}, nil, invalid(f+".text", "field required")
			}
			text = append(text, *b.Text)
		case "thinking":
			if b.Thinking == nil {
				return ports.ChatMessage{}, nil, invalid(f+".thinking", "field required")
			}
			reasoning = append(reasoning, *b.Thinking)
		case "redacted_thinking":
			// Encrypted reasoning of another provider's model: nothing a local model can read.
		case "tool_use":
			switch {
			case b.ID == nil || *b.ID == "":
				return ports.ChatMessage{}, nil, invalid(f+".id", "field required")
			case b.Name == nil || !toolName.MatchString(*b.Name):
				return ports.ChatMessage{}, nil, invalid(f+".name", "must be 1 to 64 letters, digits, underscores or dashes")
			case slices.Contains(ids, *b.ID):
				return ports.ChatMessage{}, nil, invalid(f+".id", "%q is used by another tool_use block of this message", *b.ID)
			}
			input := bytes.TrimSpace(b.Input)
			if isNull(input) {
				input = []byte("{}")
			}
			if input[0] != '{' {
				return ports.ChatMessage{}, nil, invalid(f+".input", "must be an object")
			}
			var c openaiToolCall
			c.ID, c.Type = *b.ID, "function"
			c.Function.Name, c.Function.Arguments = *b.Name, input
			calls = append(calls, c)
			ids = append(ids, *b.ID)
		default:
			return ports.ChatMessage{}, nil, invalid(f+".type", "%q is not a block type of an assistant message (text, thinking, tool_use)", *b.Type)
		}
	}
	content := strings.Join(text, "\n")
	m := openaiMessage{Role: "assistant", Content: &content, ToolCalls: calls}
	if len(reasoning) > 0 {
		r := strings.Join(reasoning, "\n")
		m.ReasoningContent = &r
	}
	return chatMessage(m), ids, nil
}
