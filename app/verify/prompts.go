package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// PromptInput is one prompt as given on the command line or in a prompts file: token ids, or text encoded
// with the model's tokenizer (after its chat template when Chat).
type PromptInput struct {
	Tokens []ports.Token
	Text   string
	Chat   bool
}

// DefaultPrompts are the prompts lossless and bench use when given none: beginnings of Go functions in the
// standard library's style, which the bundled demo model (trained on Go's standard library) continues
// sensibly, and which any code-capable model can continue.
func DefaultPrompts() []PromptInput {
	return []PromptInput{
		{Text: "// String returns the contents of the unread portion of the buffer\n// as a string.\nfunc (b *Buffer) String() string {\n"},
		{Text: "// Len returns the number of bytes of the unread portion of the buffer.\nfunc (b *Buffer) Len() int {"},
		{Text: "// IsSpace reports whether the byte is an ASCII space character.\nfunc IsSpace(c byte) bool {\n"},
		{Text: "package main\n\nimport \"fmt\"\n\nfunc main() {\n"},
	}
}

// ParseTokenList parses "1,2,3" (spaces allowed) into token ids.
func ParseTokenList(s string) ([]ports.Token, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("%w: empty token list", ErrBadInput)
	}
	parts := strings.Split(s, ",")
	out := make([]ports.Token, 0, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%w: token list entry %d %q is not a non-negative integer", ErrBadInput, i, strings.TrimSpace(p))
		}
		out = append(out, ports.Token(v))
	}
	return out, nil
}

// ParsePromptsFile reads a prompts file. Two forms are accepted:
//   - a JSON array whose elements are strings (text prompts), arrays of token ids, or objects
//     {"text": "...", "chat": true} / {"tokens": [...]};
//   - otherwise plain text: every non-blank line is a text prompt.
func ParsePromptsFile(data []byte) ([]PromptInput, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: prompts file is empty", ErrBadInput)
	}
	if trimmed[0] != '[' {
		var out []PromptInput
		for line := range strings.Lines(string(data)) {
			if l := strings.TrimRight(line, "\r\n"); strings.TrimSpace(l) != "" {
				out = append(out, PromptInput{Text: l})
			}
		}
		return out, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return nil, fmt.Errorf("%w: prompts file: %v", ErrBadInput, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: prompts file holds no prompts", ErrBadInput)
	}
	out := make([]PromptInput, 0, len(raw))
	for i, r := range raw {
		p, err := parsePromptJSON(r)
		if err != nil {
			return nil, fmt.Errorf("%w: prompt %d: %v", ErrBadInput, i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePromptJSON(r json.RawMessage) (PromptInput, error) {
	r = bytes.TrimSpace(r)
	if len(r) == 0 {
		return PromptInput{}, errors.New("empty element")
	}
	switch r[0] {
	case '"':
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return PromptInput{}, err
		}
		if s == "" {
			return PromptInput{}, errors.New("empty text")
		}
		return PromptInput{Text: s}, nil
	case '[':
		toks, err := tokenArray(r)
		return PromptInput{Tokens: toks}, err
	case '{':
		var o struct {
			Text   *string         `json:"text"`
			Chat   bool            `json:"chat"`
			Tokens json.RawMessage `json:"tokens"`
		}
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return PromptInput{}, err
		}
		if (o.Text == nil) == (o.Tokens == nil) {
			return PromptInput{}, errors.New(`give exactly one of "text" and "tokens"`)
		}
		if o.Text != nil {
			if *o.Text == "" {
				return PromptInput{}, errors.New("empty text")
			}
			return PromptInput{Text: *o.Text, Chat: o.Chat}, nil
		}
		if o.Chat {
			return PromptInput{}, errors.New(`"chat" applies to text prompts only`)
		}
		toks, err := tokenArray(o.Tokens)
		return PromptInput{Tokens: toks}, err
	}
	return PromptInput{}, fmt.Errorf("want a string, an array of token ids or an object, got %.20s", r)
}

func tokenArray(r json.RawMessage) ([]ports.Token, error) {
	var vals []float64
	if err := json.Unmarshal(r, &vals); err != nil {
		return nil, err
	}
	if len(vals) == 0 {
		return nil, errors.New("empty token array")
	}
	out := make([]ports.Token, len(vals))
	for i, v := range vals {
		if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("token %d: %v is not a token id", i, v)
		}
		out[i] = ports.Token(v)
	}
	return out, nil
}

// rawEncoder is the tokenizer ability to encode without the post-processor's special tokens.
type rawEncoder interface {
	EncodeWith(text string, addSpecialTokens bool) []ports.Token
}

// EncodePrompt turns a prompt input into token ids with m's tokenizer (and chat template when Chat).
func EncodePrompt(m *models.Models, in PromptInput) ([]ports.Token, error) {
	if in.Tokens != nil {
		if in.Text != "" || in.Chat {
			return nil, fmt.Errorf("%w: give either token ids or text, not both", ErrBadInput)
		}
		return in.Tokens, nil
	}
	if in.Text == "" {
		return nil, fmt.Errorf("%w: no prompt: give --tokens or --prompt", ErrBadInput)
	}
	if m.Tokenizer == nil {
		return nil, fmt.Errorf("%w: model %s has no tokenizer.json; give --tokens instead of --prompt", ErrBadInput, m.Name)
	}
	text := in.Text
	if in.Chat {
		if m.Template == nil {
			return nil, fmt.Errorf("%w: model %s has no chat template", ErrBadInput, m.Name)
		}
		var err error
		text, err = m.Template.Render([]ports.ChatMessage{{Role: "user", Content: in.Text}},
			ports.ChatOptions{AddGenerationPrompt: true})
		if err != nil {
			return nil, fmt.Errorf("render chat template: %w", err)
		}
	}
	var ids []ports.Token
	if raw, ok := m.Tokenizer.(rawEncoder); ok && in.Chat {
		// A rendered chat already holds its special tokens: encode it without the post-processor's (BOS…),
		// as transformers' apply_chat_template does.
		ids = raw.EncodeWith(text, false)
	} else {
		var err error
		if ids, err = m.Tokenizer.Encode(text); err != nil {
			return nil, fmt.Errorf("encode prompt: %w", err)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: the prompt encodes to no tokens", ErrBadInput)
	}
	return ids, nil
}
