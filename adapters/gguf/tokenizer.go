package gguf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The pre-tokenizer regexes llama.cpp knows by name (tokenizer.ggml.pre); a tokenizer.json whose Split
// pattern is one of these exports, any other is refused (llama.cpp would split text differently).
var preTokenizers = map[string]string{
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: "qwen2",
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:                                     "gpt-2",
}

// llama.cpp's token types (llama_token_type).
const (
	tokNormal      int32 = 1
	tokControl     int32 = 3
	tokUserDefined int32 = 4
	tokUnused      int32 = 5
)

type tokenizerFile struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        struct {
		Type   string           `json:"type"`
		Vocab  map[string]int32 `json:"vocab"`
		Merges json.RawMessage  `json:"merges"`
	} `json:"model"`
}

type component struct {
	Type          string            `json:"type"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Pattern       struct {
		Regex  string `json:"Regex"`
		String string `json:"String"`
	} `json:"pattern"`
	UseRegex bool `json:"use_regex"`
}

// preName finds the llama.cpp name of a byte-level BPE pre-tokenizer: a Sequence of one Split (a known
// regex) and a ByteLevel without its own regex, or a ByteLevel with GPT-2's built-in regex.
func preName(raw json.RawMessage) (string, error) {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		if c.UseRegex {
			return "gpt-2", nil
		}
	case "Sequence":
		var regex string
		byteLevel := false
		for _, p := range c.Pretokenizers {
			var s component
			if err := json.Unmarshal(p, &s); err != nil {
				return "", fmt.Errorf("pre_tokenizer: %w", err)
			}
			switch {
			case s.Type == "Split" && regex == "" && s.Pattern.Regex != "":
				regex = s.Pattern.Regex
			case s.Type == "ByteLevel" && !s.UseRegex:
				byteLevel = true
			default:
				return "", fmt.Errorf("pre_tokenizer: a %s step llama.cpp has no name for", s.Type)
			}
		}
		if name, ok := preTokenizers[regex]; ok && byteLevel {
			return name, nil
		}
		return "", fmt.Errorf("pre_tokenizer: split regex %q is not one llama.cpp knows by name (qwen2, gpt-2)", regex)
	}
	return "", fmt.Errorf("pre_tokenizer of type %q is not byte-level BPE", c.Type)
}

// tokenizerKVs converts dir's tokenizer.json (byte-level BPE, as Qwen ships) into llama.cpp's
// tokenizer.ggml.* keys for a vocabulary of n rows: ids the tokenizer does not define (an embedding padded
// past the tokenizer, as Qwen's are) become "[PAD<id>]" tokens of type UNUSED, as llama.cpp's converter
// writes them. EOS/BOS/PAD come from tokenizer_config.json; the chat template too, when present.
func tokenizerKVs(dir string, n int) ([]KV, error) {
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no tokenizer.json in %s: llama.cpp needs the vocabulary in the GGUF (synth --tokenizer DIR copies one in)", dir)
	}
	if err != nil {
		return nil, err
	}
	var tf tokenizerFile
	if err := json.Unmarshal(b, &tf); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if tf.Model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer.json: model type %q (only byte-level BPE exports)", tf.Model.Type)
	}
	pre, err := preName(tf.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	tokens := make([]string, n)
	types := make([]int32, n)
	set := func(id int32, s string, t int32) error {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("tokenizer.json: token %q has id %d outside the model's vocabulary of %d", s, id, n)
		}
		if tokens[id] != "" && tokens[id] != s {
			return fmt.Errorf("tokenizer.json: id %d is both %q and %q", id, tokens[id], s)
		}
		tokens[id], types[id] = s, t
		return nil
	}
	for s, id := range tf.Model.Vocab {
		if err := set(id, s, tokNormal); err != nil {
			return nil, err
		}
	}
	ids := map[string]int32{}
	for _, a := range tf.AddedTokens {
		t := tokUserDefined
		if a.Special {
			t = tokControl
		}
		if err := set(a.ID, a.Content, t); err != nil {
			return nil, err
		}
		ids[a.Content] = a.ID
	}
	for i := range tokens {
		if tokens[i] == "" {
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), tokUnused
		}
	}
	merges, err := parseMerges(tf.Model.Merges)
	if err != nil {
		return nil, err
	}
	kvs := []KV{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", pre},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", merges},
	}
	special, err := specialKVs(dir, ids)
	if err != nil {
		return nil, err
	}
	return append(kvs, special...), nil
}

// parseMerges accepts both tokenizer.json merge spellings: "a b" strings and ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return []string{}, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		return strs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("tokenizer.json: merges are neither strings nor pairs: %w", err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || strings.Contains(p[0], " ") || strings.Contains(p[1], " ") {
			return nil, fmt.Errorf("tokenizer.json: merge %d %q is not a pair of space-free tokens", i, p)
		}
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}

// specialKVs reads the special tokens of tokenizer_config.json (each a string or {"content": ...}).
func specialKVs(dir string, ids map[string]int32) ([]KV, error) {
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return []KV{{"tokenizer.ggml.add_bos_token", false}}, nil
	}
	if err != nil {
		return nil, err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	var kvs []KV
	for _, k := range []struct{ json, gguf string }{
		{"bos_token", "tokenizer.ggml.bos_token_id"},
		{"eos_token", "tokenizer.ggml.eos_token_id"},
		{"pad_token", "tokenizer.ggml.padding_token_id"},
	} {
		raw, ok := cfg[k.json]
		if !ok || string(raw) == "null" {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(raw, &obj); err != nil {
				return nil, fmt.Errorf("tokenizer_config.json: %s: %w", k.json, err)
			}
			s = obj.Content
		}
		id, ok := ids[s]
		if !ok {
			return nil, fmt.Errorf("tokenizer_config.json: %s %q is not an added token of tokenizer.json", k.json, s)
		}
		kvs = append(kvs, KV{k.gguf, uint32(id)})
	}
	addBOS := false
	if raw, ok := cfg["add_bos_token"]; ok {
		_ = json.Unmarshal(raw, &addBOS)
	}
	kvs = append(kvs, KV{"tokenizer.ggml.add_bos_token", addBOS})
	if raw, ok := cfg["chat_template"]; ok {
		var tmpl string
		if json.Unmarshal(raw, &tmpl) == nil && tmpl != "" {
			kvs = append(kvs, KV{"tokenizer.chat_template", tmpl})
		}
	}
	return kvs, nil
}
