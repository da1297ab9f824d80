package modeltools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// qwen3TokenizerDir is the Qwen3 tokenizer checked in as the tokenizer adapter's test data.
var qwen3TokenizerDir = filepath.Join("..", "..", "adapters", "tokenizer", "testdata", "qwen3")

func TestTokenizeText(t *testing.T) {
	text := "Hello, my dog is cute<|im_end|>"
	res, err := Tokenize(t.Context(), TokenizeOptions{TokenizerDir: qwen3TokenizerDir, Text: &text})
	require.NoError(t, err)
	assert.Equal(t, []int32{9707, 11, 847, 5562, 374, 18838, 151645}, res.IDs)
	out, err := json.Marshal(res)
	require.NoError(t, err)
	assert.JSONEq(t, `{"ids":[9707,11,847,5562,374,18838,151645]}`, string(out))

	empty := ""
	res, err = Tokenize(t.Context(), TokenizeOptions{TokenizerDir: qwen3TokenizerDir, Text: &empty})
	require.NoError(t, err)
	out, err = json.Marshal(res)
	require.NoError(t, err)
	assert.Equal(t, `{"ids":[]}`, string(out))
}

// TestTokenizeChat checks the use case against the transformers goldens of the chat template adapter.
func TestTokenizeChat(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "adapters", "chattemplate", "testdata", "qwen3_chat.json"))
	require.NoError(t, err)
	var g struct {
		Cases []struct {
			Name                string          `json:"name"`
			Messages            json.RawMessage `json:"messages"`
			Tools               json.RawMessage `json:"tools"`
			AddGenerationPrompt bool            `json:"add_generation_prompt"`
			EnableThinking      *bool           `json:"enable_thinking"`
			Text                string          `json:"text"`
			IDs                 []int32         `json:"ids"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &g))
	dir := t.TempDir()
	checked := 0
	for i, c := range g.Cases {
		if i%13 != 0 { // a spread of cases; the adapter's own test covers all of them
			continue
		}
		file := filepath.Join(dir, "chat.json")
		body, err := json.Marshal(map[string]json.RawMessage{"messages": c.Messages, "tools": c.Tools})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file, body, 0o644))
		res, err := Tokenize(t.Context(), TokenizeOptions{TokenizerDir: qwen3TokenizerDir, ChatFile: file,
			AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking})
		require.NoError(t, err, c.Name)
		assert.Equal(t, c.Text, res.Text, c.Name)
		assert.Equal(t, c.IDs, res.IDs, c.Name)
		checked++
	}
	assert.Equal(t, 4, checked)
}

func TestTokenizeErrors(t *testing.T) {
	text := "x"
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	cases := []struct {
		name string
		opts TokenizeOptions
		want string
	}{
		{"no dir", TokenizeOptions{Text: &text}, "tokenizer directory"},
		{"neither", TokenizeOptions{TokenizerDir: qwen3TokenizerDir}, "exactly one"},
		{"both", TokenizeOptions{TokenizerDir: qwen3TokenizerDir, Text: &text, ChatFile: "f"}, "exactly one"},
		{"missing tokenizer", TokenizeOptions{TokenizerDir: dir, Text: &text}, "tokenizer.json"},
		{"missing chat file", TokenizeOptions{TokenizerDir: qwen3TokenizerDir, ChatFile: filepath.Join(dir, "nope.json")}, "nope.json"},
		{"bad chat json", TokenizeOptions{TokenizerDir: qwen3TokenizerDir, ChatFile: write("bad.json", "{")}, "parse"},
		{"no messages", TokenizeOptions{TokenizerDir: qwen3TokenizerDir, ChatFile: write("empty.json", `{"messages":[]}`)}, "no messages"},
		{"no role", TokenizeOptions{TokenizerDir: qwen3TokenizerDir, ChatFile: write("norole.json", `{"messages":[{"content":"x"}]}`)}, "role"},
		{"image part", TokenizeOptions{TokenizerDir: qwen3TokenizerDir, ChatFile: write("img.json",
			`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`)}, "image_url"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Tokenize(t.Context(), c.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestParseChatMessageParts(t *testing.T) {
	m, err := ParseChatMessage(json.RawMessage(`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`))
	require.NoError(t, err)
	assert.Equal(t, "ab", m.Content)
	m, err = ParseChatMessage(json.RawMessage(`{"role":"assistant","content":null,"tool_calls":[]}`))
	require.NoError(t, err)
	assert.Empty(t, m.Content)
	assert.Equal(t, "assistant", m.Role)
}

func FuzzParseChatMessage(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"hi"}`))
	f.Add([]byte(`{"role":"user","content":[{"type":"text","text":"a"}]}`))
	f.Add([]byte(`{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}`))
	f.Add([]byte(`{"content":5}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := ParseChatMessage(raw)
		if err != nil {
			return
		}
		assert.NotEmpty(t, m.Role)
		assert.Equal(t, raw, []byte(m.Raw))
	})
}
