package chattemplate_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/chattemplate"
	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/ports"
)

// qwen3Dir is the Qwen3 tokenizer checked in for the tokenizer package's tests.
var qwen3Dir = filepath.Join("..", "tokenizer", "testdata", "qwen3")

type chatGolden struct {
	Versions map[string]string `json:"versions"`
	Cases    []struct {
		Name                string            `json:"name"`
		Messages            []json.RawMessage `json:"messages"`
		Tools               json.RawMessage   `json:"tools"`
		AddGenerationPrompt bool              `json:"add_generation_prompt"`
		EnableThinking      *bool             `json:"enable_thinking"`
		Text                *string           `json:"text"`
		IDs                 []int32           `json:"ids"`
		Error               string            `json:"error"`
	} `json:"cases"`
}

// messagesFromJSON builds ports.ChatMessage values the way the HTTP adapter does: role and string content
// from the object, the object itself as Raw.
func messagesFromJSON(t *testing.T, raws []json.RawMessage) []ports.ChatMessage {
	t.Helper()
	out := make([]ports.ChatMessage, len(raws))
	for i, raw := range raws {
		var m struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		require.NoError(t, json.Unmarshal(raw, &m))
		out[i] = ports.ChatMessage{Role: m.Role, Content: m.Content, Raw: raw}
	}
	return out
}

func TestRenderMatchesTransformers(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "qwen3_chat.json"))
	require.NoError(t, err)
	var g chatGolden
	require.NoError(t, json.Unmarshal(data, &g))
	require.GreaterOrEqual(t, len(g.Cases), 40)

	tmpl, err := chattemplate.Load(qwen3Dir)
	require.NoError(t, err)
	tok, err := tokenizer.Load(qwen3Dir)
	require.NoError(t, err)

	for _, c := range g.Cases {
		name := c.Name
		if c.AddGenerationPrompt {
			name += "/gen"
		}
		if c.EnableThinking != nil {
			name += map[bool]string{true: "/think", false: "/nothink"}[*c.EnableThinking]
		}
		t.Run(name, func(t *testing.T) {
			var tools []byte
			if len(c.Tools) > 0 && string(c.Tools) != "null" {
				tools = c.Tools
			}
			got, err := tmpl.Render(messagesFromJSON(t, c.Messages), ports.ChatOptions{
				AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking, Tools: tools})
			if c.Error != "" {
				assert.Error(t, err, "transformers failed with %s", c.Error)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, c.Text)
			assert.Equal(t, *c.Text, got)
			assert.Equal(t, c.IDs, tok.EncodeWith(got, false))
		})
	}
}
