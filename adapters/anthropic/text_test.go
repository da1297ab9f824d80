package anthropic

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Text that is not UTF-8 (or a lone surrogate escape) is a 400 naming the field; a message with empty
// content is a 400 in Anthropic's words.
func TestParseMessagesRefusesBrokenText(t *testing.T) {
	for _, c := range []struct{ name, body, msg string }{
		{"invalid UTF-8 in content", "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi \xff\"}]}", "messages.0.content: is not valid UTF-8"},
		{"invalid UTF-8 in a block", "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xc3\"}]}]}", "messages.0.content.0.text: is not valid UTF-8"},
		{"lone surrogate in system", `{"model":"m","max_tokens":1,"system":"\ud800","messages":[{"role":"user","content":"x"}]}`, "system: is not valid UTF-8"},
		{"invalid UTF-8 in a tool schema", "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\",\"description\":\"\xff\"}}]}", "tools.0.input_schema.description: is not valid UTF-8"},
		{"empty content array", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[]}]}`, "messages.0: all messages must have non-empty content except for the optional final assistant message"},
		{"empty content string", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":""},{"role":"user","content":"y"}]}`, "messages.1: all messages must have non-empty content"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMessages([]byte(c.body))
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, 400, e.Status)
			assert.Contains(t, e.Message, c.msg)
			_, err = ParseCountTokens([]byte(strings.Replace(c.body, `"max_tokens":1,`, "", 1)))
			require.ErrorAs(t, err, &e, "count_tokens refuses it too")
			assert.Contains(t, e.Message, c.msg)
		})
	}
	_, err := ParseMessages([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"é \ud83d\ude00 \u00e9"}]}`))
	assert.NoError(t, err)
}
