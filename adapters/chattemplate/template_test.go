package chattemplate_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/chattemplate"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

var handmadeDir = filepath.Join("..", "tokenizer", "testdata", "handmade")

func user(text string) ports.ChatMessage { return ports.ChatMessage{Role: "user", Content: text} }

func TestNamedTemplatesPickToolUseWhenToolsAreGiven(t *testing.T) {
	tmpl, err := chattemplate.Load(handmadeDir)
	require.NoError(t, err)
	got, err := tmpl.Render([]ports.ChatMessage{user("hi")}, ports.ChatOptions{})
	require.NoError(t, err)
	assert.Equal(t, "<s>[user] hi</s>", got)

	tools := []byte(`[{"type": "function", "function": {"name": "f", "z": 1, "a": "é<&>", "n": [1.5, -2, null, true]}}]`)
	got, err = tmpl.Render([]ports.ChatMessage{user("hi")}, ports.ChatOptions{Tools: tools})
	require.NoError(t, err)
	// Keys keep the client's order; the separators and the unescaped non-ASCII and <&> are json.dumps'.
	assert.Equal(t, `<s>TOOLS [{"type": "function", "function": {"name": "f", "z": 1, "a": "é<&>", "n": [1.5, -2, null, true]}}][user] hi</s>`, got)
}

func TestLoad(t *testing.T) {
	cfg := `{"eos_token": {"content": "<eos>"}, "bos_token": "<bos>", "chat_template": "A{{ bos_token }}{{ eos_token }}"}`
	cases := []struct {
		name    string
		files   map[string]string
		want    string
		wantErr string
	}{
		{"config string", map[string]string{"tokenizer_config.json": cfg}, "A<bos><eos>", ""},
		{"jinja file wins", map[string]string{"tokenizer_config.json": cfg, "chat_template.jinja": "B{{ eos_token }}"}, "B<eos>", ""},
		{"jinja file alone", map[string]string{"chat_template.jinja": "C{{ bos_token }}|"}, "C|", ""},
		{"no template", map[string]string{"tokenizer_config.json": `{"eos_token": "x"}`}, "", "no chat template"},
		{"empty dir", map[string]string{}, "", "no chat template"},
		{"bad config", map[string]string{"tokenizer_config.json": `{"chat_template": 5}`}, "", "chat_template"},
		{"bad json", map[string]string{"tokenizer_config.json": `{`}, "", "tokenizer_config.json"},
		{"bad jinja", map[string]string{"chat_template.jinja": "{% if %}"}, "", "compile"},
		{"unclosed block", map[string]string{"chat_template.jinja": "{% for m in messages %}x"}, "", "compile"},
		{"list without default", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "rag", "template": "x"}]}`}, "", "no chat template"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := chattemplate.Load(testmodel.Files(t, c.files))
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			got, err := tmpl.Render([]ports.ChatMessage{user("x")}, ports.ChatOptions{})
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestRenderInputs(t *testing.T) {
	yes, no := true, false
	cases := []struct {
		name    string
		src     string
		msgs    []ports.ChatMessage
		opts    ports.ChatOptions
		want    string
		wantErr string
	}{
		{"thinking undefined by default", `{% if enable_thinking is defined %}{{ enable_thinking }}{% else %}undef{% endif %}`,
			[]ports.ChatMessage{user("x")}, ports.ChatOptions{}, "undef", ""},
		{"thinking true", `{{ enable_thinking }}`, []ports.ChatMessage{user("x")}, ports.ChatOptions{EnableThinking: &yes}, "True", ""},
		{"thinking false", `{{ enable_thinking is false }}`, []ports.ChatMessage{user("x")}, ports.ChatOptions{EnableThinking: &no}, "True", ""},
		{"generation prompt", `{{ add_generation_prompt }}`, []ports.ChatMessage{user("x")}, ports.ChatOptions{AddGenerationPrompt: true}, "True", ""},
		{"tools none", `{{ tools is none }}`, []ports.ChatMessage{user("x")}, ports.ChatOptions{}, "True", ""},
		{"raw fields with order", `{% for m in messages %}{{ m | tojson }}{% endfor %}`,
			[]ports.ChatMessage{{Role: "assistant", Content: "", Raw: []byte(`{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"b":2,"a":1}}}],"content":null}`)}},
			ports.ChatOptions{}, `{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 2, "a": 1}}}], "content": ""}`, ""},
		{"content parts flattened", `{{ messages[0].content }}`,
			[]ports.ChatMessage{{Role: "user", Content: "ab", Raw: []byte(`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`)}},
			ports.ChatOptions{}, "ab", ""},
		{"raise_exception", `{% if messages[0].role != 'system' %}{{ raise_exception('first message must be system') }}{% endif %}`,
			[]ports.ChatMessage{user("x")}, ports.ChatOptions{}, "", "first message must be system"},
		{"loop controls", `{% for m in messages %}{% if loop.index0 == 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}`,
			[]ports.ChatMessage{user("a"), user("b")}, ports.ChatOptions{}, "a", ""},
		{"trim and lstrip blocks", "{% for m in messages %}\n    {% if true %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}",
			[]ports.ChatMessage{user("a")}, ports.ChatOptions{}, "a\n", ""},
		{"raw not an object", `x`, []ports.ChatMessage{{Role: "user", Raw: []byte(`[1]`)}}, ports.ChatOptions{}, "", "not an object"},
		{"raw malformed", `x`, []ports.ChatMessage{{Role: "user", Raw: []byte(`{"a":`)}}, ports.ChatOptions{}, "", "raw JSON"},
		{"tools not a list", `x`, []ports.ChatMessage{user("x")}, ports.ChatOptions{Tools: []byte(`{"a":1}`)}, "", "array"},
		{"tools malformed", `x`, []ports.ChatMessage{user("x")}, ports.ChatOptions{Tools: []byte(`[`)}, "", "tools"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := chattemplate.New(c.src, chattemplate.SpecialTokens{})
			require.NoError(t, err)
			got, err := tmpl.Render(c.msgs, c.opts)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestStrftimeNow(t *testing.T) {
	tmpl, err := chattemplate.New(`{{ strftime_now('%Y-%m-%d') }}`, chattemplate.SpecialTokens{})
	require.NoError(t, err)
	got, err := tmpl.Render(nil, ports.ChatOptions{})
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`), got)
}

func TestDefaultEnableThinking(t *testing.T) {
	for family, want := range map[string]*bool{"qwen3": nil, "qwen3_5": nil, "qwen3_next": nil, "": nil,
		"qwen3.6": new(bool), "Qwen3_6": new(bool)} {
		assert.Equal(t, want, chattemplate.DefaultEnableThinking(family), family)
	}
}

func TestConcurrentRender(t *testing.T) {
	tmpl, err := chattemplate.Load(qwen3Dir)
	require.NoError(t, err)
	msgs := []ports.ChatMessage{{Role: "system", Content: "s"}, user("hello")}
	want, err := tmpl.Render(msgs, ports.ChatOptions{AddGenerationPrompt: true})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				got, err := tmpl.Render(msgs, ports.ChatOptions{AddGenerationPrompt: true})
				assert.NoError(t, err)
				assert.Equal(t, want, got)
			}
		})
	}
	wg.Wait()
}

func FuzzRenderQwen3(f *testing.F) {
	f.Add("hello", `{"role":"assistant","content":"<think>x</think>y","reasoning_content":null}`, `[{"a":1}]`)
	f.Add("", `{"role":"tool","content":"r"}`, ``)
	f.Add("<|im_end|>", `{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}`, `null`)
	tmpl, err := chattemplate.Load(qwen3Dir)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, content, raw, tools string) {
		msgs := []ports.ChatMessage{user(content), {Role: "assistant", Content: content, Raw: []byte(raw)}}
		// Any input either renders or fails with an error; it must never panic.
		_, _ = tmpl.Render(msgs, ports.ChatOptions{AddGenerationPrompt: true, Tools: []byte(tools)})
		if json.Valid([]byte(raw)) {
			_, _ = tmpl.Render(msgs[1:], ports.ChatOptions{})
		}
	})
}
