package modeltools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/higgs-go/higgs/adapters/chattemplate"
	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/ports"
)

// TokenizeOptions are the inputs of `higgs-verify tokenize`: exactly one of Text and ChatFile.
type TokenizeOptions struct {
	// TokenizerDir holds tokenizer.json (or tokenizer.json.gz) and tokenizer_config.json.
	TokenizerDir string
	// Text is encoded with the tokenizer's default special-token handling (Hugging Face Tokenizer.encode).
	Text *string
	// ChatFile is a JSON file {"messages": [...], "tools": [...]?} in the OpenAI shape, rendered with the
	// chat template and then encoded without adding post-processor special tokens (as apply_chat_template).
	ChatFile            string
	AddGenerationPrompt bool
	// EnableThinking nil leaves the template's own default.
	EnableThinking *bool
}

// TokenizeResult is the JSON `higgs-verify tokenize --json` prints: {"ids": [...]} for text and
// {"text": "...", "ids": [...]} for a chat.
type TokenizeResult struct {
	Text string        `json:"text,omitempty"`
	IDs  []ports.Token `json:"ids"`
}

// Tokenize runs the tokenize use case.
func Tokenize(ctx context.Context, opts TokenizeOptions) (TokenizeResult, error) {
	if opts.TokenizerDir == "" {
		return TokenizeResult{}, errors.New("tokenize: a tokenizer directory is required")
	}
	if (opts.Text == nil) == (opts.ChatFile == "") {
		return TokenizeResult{}, errors.New("tokenize: give exactly one of text and chat file")
	}
	// Cheap input checks come before loading the (large) tokenizer.
	var (
		messages []ports.ChatMessage
		tools    []byte
	)
	if opts.Text == nil {
		var err error
		if messages, tools, err = readChatFile(opts.ChatFile); err != nil {
			return TokenizeResult{}, fmt.Errorf("tokenize: %w", err)
		}
	}
	tok, err := tokenizer.Load(opts.TokenizerDir)
	if err != nil {
		return TokenizeResult{}, fmt.Errorf("tokenize: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return TokenizeResult{}, fmt.Errorf("tokenize: %w", err)
	}
	if opts.Text != nil {
		ids, err := tok.Encode(*opts.Text)
		if err != nil {
			return TokenizeResult{}, fmt.Errorf("tokenize: %w", err)
		}
		return TokenizeResult{IDs: nonNil(ids)}, nil
	}
	tmpl, err := chattemplate.Load(opts.TokenizerDir)
	if err != nil {
		return TokenizeResult{}, fmt.Errorf("tokenize: %w", err)
	}
	text, err := tmpl.Render(messages, ports.ChatOptions{
		AddGenerationPrompt: opts.AddGenerationPrompt,
		EnableThinking:      opts.EnableThinking,
		Tools:               tools,
	})
	if err != nil {
		return TokenizeResult{}, fmt.Errorf("tokenize %s: %w", opts.ChatFile, err)
	}
	return TokenizeResult{Text: text, IDs: nonNil(tok.EncodeWith(text, false))}, nil
}

func nonNil(ids []ports.Token) []ports.Token {
	if ids == nil {
		return []ports.Token{}
	}
	return ids
}

// readChatFile reads {"messages": [...], "tools": [...]} keeping every message's raw JSON.
func readChatFile(path string) ([]ports.ChatMessage, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var file struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    json.RawMessage   `json:"tools"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if len(file.Messages) == 0 {
		return nil, nil, fmt.Errorf("%s: no messages", path)
	}
	msgs := make([]ports.ChatMessage, len(file.Messages))
	for i, raw := range file.Messages {
		m, err := ParseChatMessage(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: message %d: %w", path, i, err)
		}
		msgs[i] = m
	}
	var tools []byte
	if len(file.Tools) > 0 && string(file.Tools) != "null" {
		tools = file.Tools
	}
	return msgs, tools, nil
}

// ParseChatMessage reads one OpenAI-shaped message, keeping its raw JSON. A content given as an array of
// parts becomes the concatenation of its text parts.
func ParseChatMessage(raw json.RawMessage) (ports.ChatMessage, error) {
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return ports.ChatMessage{}, err
	}
	if m.Role == "" {
		return ports.ChatMessage{}, errors.New(`message has no "role"`)
	}
	out := ports.ChatMessage{Role: m.Role, Raw: raw}
	switch {
	case len(m.Content) == 0 || string(m.Content) == "null":
	case m.Content[0] == '"':
		if err := json.Unmarshal(m.Content, &out.Content); err != nil {
			return ports.ChatMessage{}, fmt.Errorf("content: %w", err)
		}
	case m.Content[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return ports.ChatMessage{}, fmt.Errorf("content parts: %w", err)
		}
		var sb strings.Builder
		for _, p := range parts {
			if p.Type != "text" {
				return ports.ChatMessage{}, fmt.Errorf("content part type %q is not supported", p.Type)
			}
			sb.WriteString(p.Text)
		}
		out.Content = sb.String()
	default:
		return ports.ChatMessage{}, errors.New("content must be a string, an array of parts, or null")
	}
	return out, nil
}
