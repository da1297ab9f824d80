package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrUnsupported is wrapped by load errors for tokenizer.json components this package does not implement.
var ErrUnsupported = errors.New("unsupported tokenizer component")

// fileJSON is the part of tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	Model         *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         *int32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// typed is the common head of every component object: {"type": "..."}.
type typed struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func componentType(raw json.RawMessage) (string, error) {
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", fmt.Errorf("component is not a JSON object: %w", err)
	}
	if t.Type == "" {
		return "", errors.New(`component has no "type"`)
	}
	return t.Type, nil
}

// parseMerges accepts both serialisations: ["a b", ...] (tokenizers < 0.20) and [["a","b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	// Look at the first element to pick the form, so the large array is decoded only once.
	first := bytes.TrimLeft(bytes.TrimPrefix(bytes.TrimSpace(raw), []byte("[")), " \t\r\n")
	var strs []string
	if len(first) > 0 && first[0] == '"' {
		if err := json.Unmarshal(raw, &strs); err != nil {
			return nil, fmt.Errorf("merges: %w", err)
		}
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := cutSingleSpace(s)
			if !ok {
				return nil, fmt.Errorf("merge %d %q is not two tokens separated by one space", i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges are neither strings nor string pairs: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d has %d parts, want 2", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// cutSingleSpace splits "a b" the way tokenizers does: exactly two parts.
func cutSingleSpace(s string) (string, string, bool) {
	n := 0
	at := -1
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			n++
			at = i
		}
	}
	if n != 1 {
		return "", "", false
	}
	return s[:at], s[at+1:], true
}
