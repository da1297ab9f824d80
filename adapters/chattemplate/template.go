// Package chattemplate renders Hugging Face chat templates (Jinja, from tokenizer_config.json or
// chat_template.jinja) the way transformers' apply_chat_template does, on github.com/ardanlabs/jinja.
//
// `tojson` is transformers' (Python json.dumps, see pyToJSON), not the library's. A known difference from Python
// Jinja2, outside what Qwen templates exercise: `{{ none }}` prints "" where Python prints "None".
package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ardanlabs/jinja"

	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.ChatTemplate = (*Template)(nil)

// ErrNoTemplate means the directory holds no chat template.
var ErrNoTemplate = errors.New("no chat template")

// SpecialTokens are the token strings templates read as bos_token, eos_token, pad_token, unk_token and
// additional_special_tokens ("" / nil when the tokenizer does not set them; they are then undefined).
type SpecialTokens struct {
	BOS, EOS, Pad, Unk string
	Additional         []string
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	def     *jinja.Template // "default" template (the only one in the plain string form); may be nil
	toolUse *jinja.Template // "tool_use" named template, used when tools are given; may be nil
	special SpecialTokens
}

// Load reads the chat template of a model directory: chat_template.jinja when present (it takes precedence,
// as in transformers), otherwise tokenizer_config.json's chat_template (a string or a list of
// {"name", "template"}), together with the special token strings from tokenizer_config.json.
func Load(dir string) (*Template, error) {
	cfgData, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load chat template from %s: %w", dir, err)
	}
	var cfg map[string]json.RawMessage
	if len(cfgData) > 0 {
		if err := json.Unmarshal(cfgData, &cfg); err != nil {
			return nil, fmt.Errorf("load chat template from %s: parse tokenizer_config.json: %w", dir, err)
		}
	}
	special, err := readSpecialTokens(cfg)
	if err != nil {
		return nil, fmt.Errorf("load chat template from %s: %w", dir, err)
	}
	named := map[string]string{}
	if src, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		named["default"] = string(src)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load chat template from %s: %w", dir, err)
	} else if raw, ok := cfg["chat_template"]; ok && string(raw) != "null" {
		if named, err = parseChatTemplateField(raw); err != nil {
			return nil, fmt.Errorf("load chat template from %s: tokenizer_config.json chat_template: %w", dir, err)
		}
	}
	if len(named) == 0 {
		return nil, fmt.Errorf("load chat template from %s: %w", dir, ErrNoTemplate)
	}
	t, err := newTemplate(named, special)
	if err != nil {
		return nil, fmt.Errorf("load chat template from %s: %w", dir, err)
	}
	return t, nil
}

// New compiles a single template source.
func New(source string, special SpecialTokens) (*Template, error) {
	return newTemplate(map[string]string{"default": source}, special)
}

func newTemplate(named map[string]string, special SpecialTokens) (*Template, error) {
	t := &Template{special: special}
	for name, src := range named {
		c, err := jinja.Compile(rewriteToJSON(src))
		if err != nil {
			return nil, fmt.Errorf("compile chat template %q: %w", name, err)
		}
		switch name {
		case "default":
			t.def = c
		case "tool_use":
			t.toolUse = c
		}
	}
	if t.def == nil && t.toolUse == nil {
		return nil, fmt.Errorf("%w named \"default\" or \"tool_use\"", ErrNoTemplate)
	}
	return t, nil
}

// parseChatTemplateField reads the string form or the list-of-named-templates form.
func parseChatTemplateField(raw json.RawMessage) (map[string]string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return map[string]string{"default": s}, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("neither a string nor a list of {name, template}: %w", err)
	}
	out := make(map[string]string, len(list))
	for _, e := range list {
		out[e.Name] = e.Template
	}
	return out, nil
}

func readSpecialTokens(cfg map[string]json.RawMessage) (SpecialTokens, error) {
	var st SpecialTokens
	for key, dst := range map[string]*string{"bos_token": &st.BOS, "eos_token": &st.EOS, "pad_token": &st.Pad,
		"unk_token": &st.Unk} {
		s, err := tokenizer.SpecialTokenString(cfg[key])
		if err != nil {
			return st, fmt.Errorf("tokenizer_config.json %s: %w", key, err)
		}
		*dst = s
	}
	if raw, ok := cfg["additional_special_tokens"]; ok && string(raw) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return st, fmt.Errorf("tokenizer_config.json additional_special_tokens: %w", err)
		}
		st.Additional = []string{}
		for _, item := range list {
			s, err := tokenizer.SpecialTokenString(item)
			if err != nil {
				return st, fmt.Errorf("tokenizer_config.json additional_special_tokens: %w", err)
			}
			st.Additional = append(st.Additional, s)
		}
	}
	return st, nil
}

// Render renders the conversation as transformers' apply_chat_template(tokenize=False) does: the template
// sees messages, tools (None when absent), documents (None), add_generation_prompt, the special token
// strings, and enable_thinking only when opts.EnableThinking is set (undefined otherwise, so the template's
// own default applies).
//
// Each message is its Raw JSON object when present (key order kept, so tool_calls and reasoning_content
// reach the template as sent), with role and content taken from the struct when Raw lacks them or its
// content is not a string (null, or an array of parts the caller has already flattened into Content).
func (t *Template) Render(messages []ports.ChatMessage, opts ports.ChatOptions) (string, error) {
	msgs := make([]jinja.Value, 0, len(messages))
	for i, m := range messages {
		v, err := messageValue(m)
		if err != nil {
			return "", fmt.Errorf("render chat template: message %d: %w", i, err)
		}
		msgs = append(msgs, v)
	}
	tools := jinja.None()
	if len(opts.Tools) > 0 && string(opts.Tools) != "null" {
		v, err := decodeJSON(opts.Tools)
		if err != nil {
			return "", fmt.Errorf("render chat template: tools: %w", err)
		}
		if !v.IsList() {
			return "", errors.New("render chat template: tools must be a JSON array")
		}
		tools = v
	}
	tmpl := t.def
	if t.toolUse != nil && (!tools.IsNone() || tmpl == nil) {
		tmpl = t.toolUse
	}
	if tmpl == nil {
		return "", fmt.Errorf("render chat template: %w named \"default\"", ErrNoTemplate)
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"tools":                 tools,
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.NewBool(opts.AddGenerationPrompt),
		pyToJSONName:            jinja.NewCallable("tojson", pyToJSON),
	}
	for key, s := range map[string]string{"bos_token": t.special.BOS, "eos_token": t.special.EOS,
		"pad_token": t.special.Pad, "unk_token": t.special.Unk} {
		if s != "" {
			data[key] = jinja.NewString(s)
		}
	}
	if t.special.Additional != nil {
		items := make([]jinja.Value, len(t.special.Additional))
		for i, s := range t.special.Additional {
			items[i] = jinja.NewString(s)
		}
		data["additional_special_tokens"] = jinja.NewList(items)
	}
	if opts.EnableThinking != nil {
		data["enable_thinking"] = jinja.NewBool(*opts.EnableThinking)
	}
	out, err := tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out, nil
}

func messageValue(m ports.ChatMessage) (jinja.Value, error) {
	if len(m.Raw) == 0 {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		return d, nil
	}
	v, err := decodeJSON(m.Raw)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("raw JSON: %w", err)
	}
	if !v.IsDict() {
		return jinja.Undefined(), errors.New("raw JSON is not an object")
	}
	d := v.AsDict()
	if r, ok := d.Get("role"); !ok || !r.IsString() {
		d.Set("role", jinja.NewString(m.Role))
	}
	if c, ok := d.Get("content"); !ok || !c.IsString() {
		d.Set("content", jinja.NewString(m.Content))
	}
	return v, nil
}

// DefaultEnableThinking returns the enable_thinking value to pass when a request does not say, per model
// family: nil (pass nothing, so the template's own default applies — thinking on for Qwen3 and Qwen3.5) for
// every family except the Qwen3.6-style ones ("qwen3.6", "qwen3_6"), whose default is non-thinking. The
// family is a name the caller knows (config model_type does not tell Qwen3.5 from Qwen3.6).
func DefaultEnableThinking(family string) *bool {
	switch strings.ToLower(strings.TrimSpace(family)) {
	case "qwen3.6", "qwen3_6", "qwen3.6_moe", "qwen3_6_moe":
		f := false
		return &f
	}
	return nil
}
