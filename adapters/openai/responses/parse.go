package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/higgs-go/higgs/adapters/openai"
)

// POST /v1/responses, as the OpenAI SDKs and Codex use it. A Responses body is translated into the chat
// completions body it means (instructions → a system message, input items → chat messages, function tools →
// chat tools, text.format → response_format) and checked by ParseChat, so that both APIs share one path:
// the chat template, tool-call parsing, constrained decoding and logprobs. Nothing is stored: store true and
// previous_response_id are refused (400); the caller sends the whole conversation each time, as Codex does
// with store false.

// responsesBody is a /v1/responses request. Fields the translation does not read are accepted and ignored
// when they do not change the output (metadata, user, prompt_cache_key, service_tier, truncation, reasoning,
// include but for logprobs, stream_options).
type responsesBody struct {
	Model              *string         `json:"model"`
	Instructions       json.RawMessage `json:"instructions"`
	Input              json.RawMessage `json:"input"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Text               *responsesText  `json:"text"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	TopLogprobs        *int            `json:"top_logprobs"`
	Include            []string        `json:"include"`
	Stream             *bool           `json:"stream"`
	Store              *bool           `json:"store"`
	PreviousResponseID json.RawMessage `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         *bool           `json:"background"`
	Prompt             json.RawMessage `json:"prompt"`
	Seed               *int64          `json:"seed"`
	BlockSize          *int            `json:"block_size"`
	CachePrompt        *bool           `json:"cache_prompt"`
	MaxToolCalls       *int            `json:"max_tool_calls"`
	// ChatTemplateKwargs is higgs's (and vLLM's chat) extension, passed to the chat translation as is:
	// {"enable_thinking": true} opens a think block where the template's default does not.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

type responsesText struct {
	Format *struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
		Description string          `json:"description"`
	} `json:"format"`
	Verbosity json.RawMessage `json:"verbosity"`
}

// fields are the top-level fields /v1/responses takes: every field of OpenAI's ResponseCreateParams today,
// the client_metadata Codex sends, and higgs's extensions. Any other is refused as OpenAI refuses it.
var fields = []string{
	"model", "instructions", "input", "tools", "tool_choice", "parallel_tool_calls", "text", "max_output_tokens",
	"temperature", "top_p", "top_logprobs", "include", "stream", "stream_options", "store", "previous_response_id",
	"conversation", "background", "prompt", "max_tool_calls", "reasoning", "metadata", "user", "service_tier",
	"truncation", "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "client_metadata",
	// higgs's extensions, as on chat completions.
	"seed", "block_size", "chat_template_kwargs", "cache_prompt",
}

// includeLogprobs is the include value that asks for the output text's logprobs.
const includeLogprobs = "message.output_text.logprobs"

// responsesParams is what the response echoes of its request.
type responsesParams struct {
	Instructions      *string
	Tools             []json.RawMessage
	ToolChoice        json.RawMessage
	ParallelToolCalls bool
	Text              json.RawMessage
	Temperature       *float64
	TopP              *float64
	MaxOutputTokens   *int
	Logprobs          bool
}

// isNull reports whether a raw field is absent or JSON null.
func isNull(r json.RawMessage) bool {
	t := bytes.TrimSpace(r)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// Parse decodes and checks a /v1/responses body.
// It is one function because it is one pass over the request's fields, each mapped to its chat completions
// equivalent or refused by name; the item translation lives in its own functions.
func Parse(body []byte) (openai.Request, responsesParams, error) {
	var b responsesBody
	var p responsesParams
	if err := openai.DecodeJSON(body, &b); err != nil {
		return openai.Request{}, p, err
	}
	if err := openai.CheckFields(body, fields); err != nil {
		return openai.Request{}, p, err
	}
	if b.Store != nil && *b.Store {
		return openai.Request{}, p, openai.Unsupported("store", "this server keeps no responses; send store false (or leave it out) and the whole conversation in input")
	}
	if !isNull(b.PreviousResponseID) {
		return openai.Request{}, p, openai.Unsupported("previous_response_id", "this server keeps no responses; send the whole conversation in input")
	}
	if !isNull(b.Conversation) {
		return openai.Request{}, p, openai.Unsupported("conversation", "this server keeps no conversations; send the whole conversation in input")
	}
	if b.Background != nil && *b.Background {
		return openai.Request{}, p, openai.Unsupported("background", "background responses need a store; this server keeps none")
	}
	if !isNull(b.Prompt) {
		return openai.Request{}, p, openai.Unsupported("prompt", "stored prompt templates are not served; send instructions and input")
	}
	chat := map[string]any{}
	if b.Model != nil {
		chat["model"] = *b.Model
	}
	var msgs []map[string]any
	if !isNull(b.Instructions) {
		var s string
		if err := json.Unmarshal(b.Instructions, &s); err != nil {
			return openai.Request{}, p, openai.BadRequest("instructions", "instructions must be a string")
		}
		p.Instructions = &s
		if s != "" {
			msgs = append(msgs, map[string]any{"role": "system", "content": s})
		}
	}
	in, err := inputMessages(b.Input)
	if err != nil {
		return openai.Request{}, p, err
	}
	chat["messages"] = append(msgs, in...)
	tools, chatTools, err := responsesTools(b.Tools)
	if err != nil {
		return openai.Request{}, p, err
	}
	p.Tools = tools
	if len(chatTools) > 0 {
		chat["tools"] = chatTools
	}
	p.ToolChoice = json.RawMessage(`"auto"`)
	if !isNull(b.ToolChoice) {
		tc, err := responsesToolChoice(b.ToolChoice, len(chatTools) > 0)
		if err != nil {
			return openai.Request{}, p, err
		}
		p.ToolChoice = b.ToolChoice
		if tc != nil {
			chat["tool_choice"] = tc
		}
	}
	p.ParallelToolCalls = b.ParallelToolCalls == nil || *b.ParallelToolCalls
	if b.ParallelToolCalls != nil {
		chat["parallel_tool_calls"] = *b.ParallelToolCalls
	}
	p.Text = json.RawMessage(`{"format":{"type":"text"}}`)
	if b.Text != nil && b.Text.Format != nil {
		f := b.Text.Format
		p.Text, _ = json.Marshal(map[string]any{"format": f})
		switch f.Type {
		case "", "text":
		case "json_object":
			chat["response_format"] = map[string]any{"type": "json_object"}
		case "json_schema":
			if len(bytes.TrimSpace(f.Schema)) == 0 {
				return openai.Request{}, p, openai.BadRequest("text.format.schema", "text.format.schema is required for type json_schema")
			}
			js := map[string]any{"name": f.Name, "schema": f.Schema}
			if f.Strict != nil {
				js["strict"] = *f.Strict
			}
			chat["response_format"] = map[string]any{"type": "json_schema", "json_schema": js}
		default:
			return openai.Request{}, p, openai.BadRequest("text.format.type", "text.format.type must be text, json_object or json_schema, not %q", f.Type)
		}
	}
	if b.MaxOutputTokens != nil {
		if *b.MaxOutputTokens < 1 {
			return openai.Request{}, p, openai.BadRequest("max_output_tokens", "max_output_tokens must be at least 1, not %d", *b.MaxOutputTokens)
		}
		chat["max_tokens"] = *b.MaxOutputTokens
		p.MaxOutputTokens = b.MaxOutputTokens
	}
	if b.Temperature != nil {
		chat["temperature"] = *b.Temperature
	}
	if b.TopP != nil {
		chat["top_p"] = *b.TopP
	}
	p.Temperature, p.TopP = b.Temperature, b.TopP
	if b.Seed != nil {
		chat["seed"] = *b.Seed
	}
	if b.CachePrompt != nil {
		chat["cache_prompt"] = *b.CachePrompt
	}
	if b.BlockSize != nil {
		chat["block_size"] = *b.BlockSize
	}
	for _, inc := range b.Include {
		if inc == includeLogprobs {
			p.Logprobs = true
		}
	}
	if b.TopLogprobs != nil && *b.TopLogprobs > 0 {
		p.Logprobs = true
		chat["top_logprobs"] = *b.TopLogprobs
	}
	if p.Logprobs {
		chat["logprobs"] = true
	}
	if !isNull(b.ChatTemplateKwargs) {
		chat["chat_template_kwargs"] = b.ChatTemplateKwargs
	}
	raw, err := json.Marshal(chat)
	if err != nil {
		return openai.Request{}, p, openai.BadRequest("", "the request could not be translated: %v", err)
	}
	req, err := openai.ParseChat(raw)
	if err != nil {
		return openai.Request{}, p, responsesError(err)
	}
	if c := req.Gen.Constraint; c != nil && c.Param == "response_format" {
		c.Param = "text.format"
	}
	req.Stream = b.Stream != nil && *b.Stream
	req.IncludeUsage = true
	return req, p, nil
}

// inputItem is one item of a Responses input: a message (type "message" or none), a function call the
// model made, a function call's output, or a reasoning item (dropped: the chat templates do not replay it).
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// inputMessages translates input (a string, or an array of items) into chat messages.
func inputMessages(raw json.RawMessage) ([]map[string]any, error) {
	if isNull(raw) {
		return nil, openai.BadRequest("input", "input is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []map[string]any{{"role": "user", "content": s}}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, openai.BadRequest("input", "input must be a string or an array of input items")
	}
	var out []map[string]any
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			text, err := inputText(it.Content, param+".content")
			if err != nil {
				return nil, err
			}
			switch it.Role {
			case "user", "system", "developer", "assistant":
			default:
				return nil, openai.BadRequest(param+".role", "%s.role %q is not one of user, system, developer, assistant", param, it.Role)
			}
			out = append(out, map[string]any{"role": it.Role, "content": text})
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, openai.BadRequest(param, "%s: a function_call needs call_id and name", param)
			}
			call := map[string]any{"id": it.CallID, "type": "function",
				"function": map[string]any{"name": it.Name, "arguments": it.Arguments}}
			// Consecutive calls are one assistant turn; so is a message the model wrote before them.
			if n := len(out); n > 0 && out[n-1]["role"] == "assistant" {
				calls, _ := out[n-1]["tool_calls"].([]any)
				out[n-1]["tool_calls"] = append(calls, call)
				continue
			}
			out = append(out, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}})
		case "function_call_output":
			if it.CallID == "" {
				return nil, openai.BadRequest(param+".call_id", "%s.call_id is required", param)
			}
			text, err := inputText(it.Output, param+".output")
			if err != nil {
				return nil, err
			}
			out = append(out, map[string]any{"role": "tool", "tool_call_id": it.CallID, "content": text})
		case "reasoning":
			// The model's earlier thinking: chat templates drop it from past turns, so do we.
		default:
			return nil, openai.Unsupported(param+".type", fmt.Sprintf("input items of type %q are not served; send message, function_call, function_call_output or reasoning items", it.Type))
		}
	}
	if len(out) == 0 {
		return nil, openai.BadRequest("input", "input holds no message")
	}
	return out, nil
}

// inputText reads a content: a string, or an array of text parts (input_text, output_text, text) joined.
func inputText(raw json.RawMessage, param string) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", openai.BadRequest(param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for i, part := range parts {
		switch part.Type {
		case "input_text", "output_text", "text", "summary_text", "reasoning_text":
			b.WriteString(part.Text)
		default:
			return "", openai.Unsupported(fmt.Sprintf("%s[%d].type", param, i), fmt.Sprintf("content parts of type %q are not served; send text", part.Type))
		}
	}
	return b.String(), nil
}

// responsesTools translates function tools into chat tools. Built-in tool types (web_search, local_shell,
// file_search, custom, mcp…, which Codex sends beside its function tools) are dropped: the model is not
// offered them, and Codex goes on with the function tools it has. echo is every tool as sent.
func responsesTools(raw json.RawMessage) (echo []json.RawMessage, chat []map[string]any, err error) {
	echo = []json.RawMessage{}
	if isNull(raw) {
		return echo, nil, nil
	}
	if err := json.Unmarshal(raw, &echo); err != nil {
		return nil, nil, openai.BadRequest("tools", "tools must be an array")
	}
	for i, t := range echo {
		var f struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description *string         `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}
		if err := json.Unmarshal(t, &f); err != nil {
			return nil, nil, openai.BadRequest(fmt.Sprintf("tools[%d]", i), "tools[%d] must be an object with a type", i)
		}
		if f.Type != "function" {
			continue
		}
		fn := map[string]any{"name": f.Name}
		if f.Description != nil {
			fn["description"] = *f.Description
		}
		if !isNull(f.Parameters) {
			fn["parameters"] = f.Parameters
		}
		if f.Strict != nil {
			fn["strict"] = *f.Strict
		}
		chat = append(chat, map[string]any{"type": "function", "function": fn})
	}
	return echo, chat, nil
}

// responsesToolChoice translates tool_choice: "none", "auto", "required", or {"type":"function","name":…};
// a choice of a built-in tool is refused (it is not offered), allowed_tools is taken as auto.
func responsesToolChoice(raw json.RawMessage, haveTools bool) (any, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if !haveTools {
			return nil, nil
		}
		return s, nil
	}
	var c struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, openai.BadRequest("tool_choice", "tool_choice must be a string or an object with a type")
	}
	switch c.Type {
	case "function":
		return map[string]any{"type": "function", "function": map[string]any{"name": c.Name}}, nil
	case "allowed_tools":
		return nil, nil
	}
	return nil, openai.Unsupported("tool_choice", fmt.Sprintf("only function tools are served; built-in tools (%q) are not offered to the model", c.Type))
}

// responsesError renames, in an error of the chat translation, the chat fields to the Responses fields they
// came from.
func responsesError(err error) error {
	var e *openai.Error
	if !errors.As(err, &e) {
		return err
	}
	for chat, resp := range map[string]string{"response_format": "text.format", "messages": "input", "max_tokens": "max_output_tokens"} {
		if strings.HasPrefix(e.Param, chat) {
			c := *e
			c.Param = resp + strings.TrimPrefix(e.Param, chat)
			c.Message = strings.ReplaceAll(c.Message, chat, resp)
			return &c
		}
	}
	return err
}
