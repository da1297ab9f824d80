package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// maxStop is the number of stop strings a request may give (OpenAI's limit).
const maxStop = 4

// Request is a decoded and checked request: what the Generator runs plus how to answer.
type Request struct {
	Gen          ports.GenerateRequest
	Stream       bool
	IncludeUsage bool
	// ParseTools means the model was offered tools (Gen.Chat.Tools) and its answer is parsed for calls.
	ParseTools bool
	// ParallelToolCalls false keeps only the first call of an answer.
	ParallelToolCalls bool
}

// params are the fields shared by /v1/chat/completions and /v1/completions. Pointers and raw messages tell
// "absent" from a zero value, so that neutral values of unsupported fields (logprobs false, n 1, penalties
// 0…) are accepted: many clients send them by default.
type params struct {
	Model               *string         `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	BlockSize *int `json:"block_size"`
	// CachePrompt false keeps the request out of the prefix cache (llama.cpp's name).
	CachePrompt *bool `json:"cache_prompt"`
	// Chat only: checked by ParseChat, refused with anything but their neutral values on /v1/completions.
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`

	// logprobs is a boolean on chat and an integer on completions (logprobs.go reads them).
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs json.RawMessage `json:"top_logprobs"`

	// Fields that change the output; only their neutral values are accepted.
	Functions         json.RawMessage `json:"functions"`
	FunctionCall      json.RawMessage `json:"function_call"`
	ResponseFormat    json.RawMessage `json:"response_format"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	LogitBias         json.RawMessage `json:"logit_bias"`
	Suffix            json.RawMessage `json:"suffix"`
	Echo              *bool           `json:"echo"`
	BestOf            *int            `json:"best_of"`
	Modalities        json.RawMessage `json:"modalities"`
	Audio             json.RawMessage `json:"audio"`
	Prediction        json.RawMessage `json:"prediction"`
	ReasoningEffort   json.RawMessage `json:"reasoning_effort"`
	GuidedJSON        json.RawMessage `json:"guided_json"`
	GuidedRegex       json.RawMessage `json:"guided_regex"`
	GuidedChoice      json.RawMessage `json:"guided_choice"`
	WebSearchOptions  json.RawMessage `json:"web_search_options"`
}

type chatBody struct {
	params
	Messages           json.RawMessage `json:"messages"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

type completionBody struct {
	params
	Prompt json.RawMessage `json:"prompt"`
}

// decodeJSON unmarshals body into v, turning encoding/json's errors into messages that name the field.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "the request body is empty; send a JSON object")
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		if path, found := httpapi.InvalidText(body); found {
			field := fieldPath(path)
			return badRequest(field, "%s is not valid UTF-8 text (invalid bytes or a lone surrogate escape); send the text as UTF-8", fieldOr(field, "a string of the body"))
		}
		return nil
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badRequest("", "the request body is not valid JSON (at byte %d): %v", syn.Offset, syn)
	case errors.As(err, &typ) && typ.Field == "":
		return badRequest("", "the request body must be a JSON object, not %s", typ.Value)
	case errors.As(err, &typ):
		// Fields of the embedded params struct are reported as "params.x"; clients know them as "x".
		field := strings.TrimPrefix(typ.Field, "params.")
		return badRequest(field, "%s must be %s, not %s", field, httpapi.JSONKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "the request body is truncated JSON")
	}
	return badRequest("", "the request body could not be decoded: %v", err)
}

// fieldPath writes a path into the body as OpenAI names fields: messages[0].content.
func fieldPath(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch x := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", x)
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(x)
		}
	}
	return b.String()
}

// isEmptyArray reports whether r is the JSON array [].
func isEmptyArray(r json.RawMessage) bool {
	var items []json.RawMessage
	return json.Unmarshal(r, &items) == nil && items != nil && len(items) == 0
}

// fieldOr is field, or what when field is "".
func fieldOr(field, what string) string {
	if field == "" {
		return what
	}
	return field
}

// isNull reports whether a raw field is absent or JSON null.
func isNull(r json.RawMessage) bool {
	t := bytes.TrimSpace(r)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// rawIs reports whether r is one of the given JSON literals (compared after trimming space).
func rawIs(r json.RawMessage, lits ...string) bool {
	t := string(bytes.TrimSpace(r))
	for _, l := range lits {
		if t == l {
			return true
		}
	}
	return false
}

// ParseChat decodes and checks a /v1/chat/completions body.
func ParseChat(body []byte) (Request, error) {
	var b chatBody
	if err := decodeJSON(body, &b); err != nil {
		return Request{}, err
	}
	if err := checkFields(body, chatFields, unrecognized); err != nil {
		return Request{}, err
	}
	req, err := b.params.translate()
	if err != nil {
		return Request{}, err
	}
	if isNull(b.Messages) {
		return Request{}, badRequest("messages", "messages is required")
	}
	msgs, breaks, err := parseMessages(b.Messages)
	if err != nil {
		return Request{}, err
	}
	req.Gen.Messages, req.Gen.CacheBreakpoints = msgs, breaks
	if req.Gen.Logprobs, req.Gen.TopLogprobs, err = b.params.chatLogprobs(); err != nil {
		return Request{}, err
	}
	if req.Gen.Chat, err = parseKwargs(b.ChatTemplateKwargs); err != nil {
		return Request{}, err
	}
	var forced *ports.Constraint
	if req.Gen.Chat.Tools, req.ParseTools, forced, err = parseTools(b.Tools, b.ToolChoice); err != nil {
		return Request{}, err
	}
	req.ParallelToolCalls = b.ParallelToolCalls == nil || *b.ParallelToolCalls
	if forced != nil {
		if req.Gen.Constraint != nil {
			return Request{}, unsupported("response_format", "a JSON response_format together with forced or strict tool calls: the answer is constrained to one language; send one of them")
		}
		forced.Parallel = req.ParallelToolCalls
		req.Gen.Constraint = forced
	}
	return req, nil
}

// ParseCompletion decodes and checks a /v1/completions body.
func ParseCompletion(body []byte) (Request, error) {
	var b completionBody
	if err := decodeJSON(body, &b); err != nil {
		return Request{}, err
	}
	if err := checkFields(body, completionFields, unrecognized); err != nil {
		return Request{}, err
	}
	req, err := b.params.translate()
	if err != nil {
		return Request{}, err
	}
	if !isNull(b.Suffix) && !rawIs(b.Suffix, `""`) {
		return Request{}, unsupported("suffix", "insertion (fill-in-the-middle) is not implemented")
	}
	if b.Echo != nil && *b.Echo {
		return Request{}, unsupported("echo", "echoing the prompt is not implemented")
	}
	if !isNull(b.Tools) && !rawIs(b.Tools, "[]") {
		return Request{}, unsupported("tools", "tool calling is served on /v1/chat/completions, not on raw completions")
	}
	if !isNull(b.ToolChoice) && !rawIs(b.ToolChoice, `"none"`, `"auto"`) {
		return Request{}, unsupported("tool_choice", "tool calling is served on /v1/chat/completions, not on raw completions")
	}
	if b.BestOf != nil && *b.BestOf != 1 {
		return Request{}, unsupported("best_of", "only best_of 1 is served")
	}
	if req.Gen.Prompt, err = parsePrompt(b.Prompt); err != nil {
		return Request{}, err
	}
	if req.Gen.Logprobs, req.Gen.TopLogprobs, err = b.params.completionLogprobs(); err != nil {
		return Request{}, err
	}
	return req, nil
}

func parsePrompt(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", badRequest("prompt", "prompt is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(raw, &arr); err != nil {
		return "", badRequest("prompt", "prompt must be a string or an array of one string")
	}
	var num json.Number
	switch {
	case len(arr) == 0:
		return "", badRequest("prompt", "prompt must not be an empty array")
	case json.Unmarshal(arr[0], &num) == nil, bytes.HasPrefix(bytes.TrimSpace(arr[0]), []byte("[")):
		return "", unsupported("prompt", "token-id prompts are not served; send text")
	case len(arr) > 1:
		return "", unsupported("prompt", "batched prompts (an array of several) are not served; send one request per prompt")
	}
	if err := json.Unmarshal(arr[0], &s); err != nil {
		return "", unsupported("prompt", "token-id prompts are not served; send text")
	}
	return s, nil
}

// translate checks the shared fields and fills a Request.
func (p params) translate() (Request, error) {
	var r Request
	if p.Model != nil {
		r.Gen.Model = *p.Model
	}
	if err := p.rejectUnsupported(); err != nil {
		return r, err
	}
	var err error
	if r.Gen.Constraint, err = parseResponseFormat(p.ResponseFormat); err != nil {
		return r, err
	}
	if p.N != nil && *p.N != 1 {
		return r, unsupported("n", fmt.Sprintf("n must be 1 (got %d): one choice per request", *p.N))
	}
	maxTok, name := p.MaxTokens, "max_tokens"
	if p.MaxCompletionTokens != nil {
		if p.MaxTokens != nil && *p.MaxTokens != *p.MaxCompletionTokens {
			return r, badRequest("max_completion_tokens", "max_tokens %d and max_completion_tokens %d disagree; send one",
				*p.MaxTokens, *p.MaxCompletionTokens)
		}
		maxTok, name = p.MaxCompletionTokens, "max_completion_tokens"
	}
	if maxTok != nil {
		if *maxTok < 1 {
			return r, badRequest(name, "%s must be at least 1, not %d", name, *maxTok)
		}
		r.Gen.MaxTokens = *maxTok
	}
	// OpenAI's defaults: temperature 1, top_p 1.
	r.Gen.Sampling = ports.SamplingParams{Temperature: 1, TopP: 1}
	if t := p.Temperature; t != nil {
		r.Gen.SamplingSet.Temperature = true
		if !(*t >= 0 && *t <= 2) {
			return r, badRequest("temperature", "temperature must be between 0 and 2, not %v", *t)
		}
		r.Gen.Sampling.Temperature = *t
	}
	if t := p.TopP; t != nil {
		r.Gen.SamplingSet.TopP = true
		if !(*t > 0 && *t <= 1) {
			return r, badRequest("top_p", "top_p must be greater than 0 and at most 1, not %v", *t)
		}
		r.Gen.Sampling.TopP = *t
	}
	if k := p.TopK; k != nil {
		r.Gen.SamplingSet.TopK = true
		// vLLM spells "disabled" -1; we also take 0.
		if *k < -1 {
			return r, badRequest("top_k", "top_k must be -1 (disabled), 0 (disabled) or positive, not %d", *k)
		}
		r.Gen.Sampling.TopK = max(*k, 0)
	}
	if m := p.MinP; m != nil {
		r.Gen.SamplingSet.MinP = true
		if !(*m >= 0 && *m <= 1) {
			return r, badRequest("min_p", "min_p must be between 0 and 1, not %v", *m)
		}
		r.Gen.Sampling.MinP = *m
	}
	if p.Seed != nil {
		u := uint64(*p.Seed)
		r.Gen.Seed = &u
	}
	r.Gen.NoCache = p.CachePrompt != nil && !*p.CachePrompt
	if p.BlockSize != nil {
		if *p.BlockSize < 1 {
			return r, badRequest("block_size", "block_size must be at least 1 (1 turns speculation off), not %d", *p.BlockSize)
		}
		r.Gen.BlockSize = *p.BlockSize
	}
	stop, err := parseStop(p.Stop)
	if err != nil {
		return r, err
	}
	r.Gen.Stop = stop
	if p.Stream != nil {
		r.Stream = *p.Stream
	}
	if p.StreamOptions != nil {
		if !r.Stream {
			return r, badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		r.IncludeUsage = p.StreamOptions.IncludeUsage != nil && *p.StreamOptions.IncludeUsage
	}
	return r, nil
}

// rejectUnsupported refuses fields that would change the output if honoured: silently ignoring them would
// hand the client something other than what it asked for.
func (p params) rejectUnsupported() error {
	switch {
	case !isNull(p.Functions) && !rawIs(p.Functions, "[]"):
		return unsupported("functions", "the deprecated functions field is not served; send tools")
	case !isNull(p.FunctionCall) && !rawIs(p.FunctionCall, `"none"`, `"auto"`):
		return unsupported("function_call", "the deprecated function_call field is not served; send tool_choice")
	case p.PresencePenalty != nil && *p.PresencePenalty != 0:
		return unsupported("presence_penalty", "only 0 is served")
	case p.FrequencyPenalty != nil && *p.FrequencyPenalty != 0:
		return unsupported("frequency_penalty", "only 0 is served")
	case p.RepetitionPenalty != nil && *p.RepetitionPenalty != 1:
		return unsupported("repetition_penalty", "only 1 is served")
	case !isNull(p.LogitBias) && !rawIs(p.LogitBias, "{}"):
		return unsupported("logit_bias", "logit biases are not applied")
	case !isNull(p.Modalities) && !rawIs(p.Modalities, `["text"]`):
		return unsupported("modalities", "only text is produced")
	case !isNull(p.Audio):
		return unsupported("audio", "only text is produced")
	case !isNull(p.Prediction):
		return unsupported("prediction", "predicted outputs are not implemented (speculation uses the DFlash drafter)")
	case !isNull(p.ReasoningEffort):
		return unsupported("reasoning_effort", "use chat_template_kwargs.enable_thinking instead")
	case !isNull(p.GuidedJSON), !isNull(p.GuidedRegex), !isNull(p.GuidedChoice):
		return unsupported("guided_decoding", "constrained decoding is not implemented")
	case !isNull(p.WebSearchOptions):
		return unsupported("web_search_options", "web search is not available")
	}
	return nil
}

func parseStop(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, badRequest("stop", "stop must not be an empty string")
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(many) > maxStop {
		return nil, badRequest("stop", "stop may hold at most %d strings, not %d", maxStop, len(many))
	}
	for i, s := range many {
		if s == "" {
			return nil, badRequest("stop", "stop[%d] must not be an empty string", i)
		}
	}
	if len(many) == 0 {
		return nil, nil
	}
	return many, nil
}

// wireMessage is the part of a chat message higgs reads; the template sees the whole object through Raw.
type wireMessage struct {
	Role       *string         `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID json.RawMessage `json:"tool_call_id"`
}

var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// breaks are the indices of the messages with a cache_control mark on a content part.
func parseMessages(raw json.RawMessage) (out []ports.ChatMessage, breaks []int, err error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, badRequest("messages", "messages must be an array of message objects")
	}
	if len(items) == 0 {
		return nil, nil, badRequest("messages", "messages must not be empty")
	}
	out = make([]ports.ChatMessage, 0, len(items))
	// callIDs are the ids of the calls of the latest assistant message, which tool messages answer.
	var callIDs map[string]bool
	for i, it := range items {
		param := fmt.Sprintf("messages[%d]", i)
		var m wireMessage
		if err := json.Unmarshal(it, &m); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) && typ.Field != "" {
				return nil, nil, badRequest(param+"."+typ.Field, "%s.%s must be %s, not %s", param, typ.Field,
					httpapi.JSONKind(typ.Type.Kind().String()), typ.Value)
			}
			return nil, nil, badRequest(param, "%s must be an object with role and content", param)
		}
		if m.Role == nil {
			return nil, nil, badRequest(param+".role", "%s.role is required", param)
		}
		role := *m.Role
		if !roles[role] {
			return nil, nil, badRequest(param+".role", "%s.role %q is not one of system, developer, user, assistant, tool", param, role)
		}
		text, isString, marked, err := messageText(m.Content, param)
		if err != nil {
			return nil, nil, err
		}
		if marked {
			breaks = append(breaks, len(out))
		}
		if isNull(m.Content) && role != "assistant" {
			return nil, nil, badRequest(param+".content", "%s.content is required for role %s", param, role)
		}
		// OpenAI's schema gives every role but the assistant's an array of at least one content part.
		if !isString && role != "assistant" && isEmptyArray(m.Content) {
			return nil, nil, badRequest(param+".content", "%s.content must not be an empty array: send at least one content part, or a string", param)
		}
		if !isNull(m.ToolCalls) && role != "assistant" {
			return nil, nil, badRequest(param+".tool_calls", "%s.tool_calls is only allowed on assistant messages", param)
		}
		if role == "assistant" {
			callIDs = nil
		}
		if role == "tool" {
			if err := checkToolReply(m.ToolCallID, callIDs, param); err != nil {
				return nil, nil, err
			}
		}
		if !isNull(m.ToolCalls) {
			calls, err := toolCallsForTemplate(m.ToolCalls, param+".tool_calls")
			if err != nil {
				return nil, nil, err
			}
			callIDs = toolCallIDs(m.ToolCalls)
			if it, err = setKeyRaw(it, "tool_calls", calls); err != nil {
				return nil, nil, badRequest(param, "%s: %v", param, err)
			}
		}
		msg := ports.ChatMessage{Role: role, Content: text, Raw: it}
		// Templates know "system"; OpenAI's "developer" role means the same. Content given as parts is
		// flattened so templates see a string, as they were trained with.
		if role == "developer" {
			msg.Role = "system"
			if msg.Raw, err = setKey(msg.Raw, "role", "system"); err != nil {
				return nil, nil, badRequest(param, "%s: %v", param, err)
			}
		}
		if !isString && !isNull(m.Content) {
			if msg.Raw, err = setKey(msg.Raw, "content", text); err != nil {
				return nil, nil, badRequest(param, "%s: %v", param, err)
			}
		}
		out = append(out, msg)
	}
	if len(breaks) > ports.MaxCacheBreakpoints {
		return nil, nil, badRequest("messages", "at most %d messages may carry a cache_control mark, not %d", ports.MaxCacheBreakpoints, len(breaks))
	}
	return out, breaks, nil
}

// messageText returns a message's text: a string, or the concatenation of an array of text parts; marked
// reports a part with a cache_control mark.
func messageText(raw json.RawMessage, param string) (text string, isString, marked bool, err error) {
	if isNull(raw) {
		return "", false, false, nil
	}
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, true, false, nil
	}
	var parts []struct {
		Type *string `json:"type"`
		Text *string `json:"text"`
		// CacheControl marks a cache breakpoint, as OpenRouter and LiteLLM take Anthropic's mark on
		// OpenAI content parts (cached.go).
		CacheControl json.RawMessage `json:"cache_control"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false, false, badRequest(param+".content", "%s.content must be a string or an array of content parts", param)
	}
	var sb strings.Builder
	for j, p := range parts {
		pp := fmt.Sprintf("%s.content[%d]", param, j)
		switch {
		case p.Type == nil:
			return "", false, false, badRequest(pp+".type", "%s.type is required", pp)
		case *p.Type != "text":
			return "", false, false, unsupported(pp+".type", fmt.Sprintf("content parts of type %q are not served (text only)", *p.Type))
		case p.Text == nil:
			return "", false, false, badRequest(pp+".text", "%s.text is required", pp)
		}
		m, err := cacheMark(p.CacheControl, pp+".cache_control")
		if err != nil {
			return "", false, false, err
		}
		marked = marked || m
		sb.WriteString(*p.Text)
	}
	return sb.String(), false, marked, nil
}

func parseKwargs(raw json.RawMessage) (ports.ChatOptions, error) {
	var opts ports.ChatOptions
	if isNull(raw) {
		return opts, nil
	}
	var kw map[string]json.RawMessage
	if err := json.Unmarshal(raw, &kw); err != nil {
		return opts, badRequest("chat_template_kwargs", "chat_template_kwargs must be an object")
	}
	for k, v := range kw {
		if k != "enable_thinking" {
			return opts, unsupported("chat_template_kwargs."+k, "only enable_thinking is passed to the template")
		}
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return opts, badRequest("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking must be a boolean")
		}
		opts.EnableThinking = &b
	}
	return opts, nil
}
