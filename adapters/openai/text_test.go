package openai

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Text that is not UTF-8 (or a lone surrogate escape) is a 400 naming the field, not U+FFFD for the model;
// an empty array of content parts is a 400 where OpenAI's schema asks for at least one part.
func TestParseChatRefusesBrokenText(t *testing.T) {
	for _, c := range []struct{ name, body, param string }{
		{"invalid UTF-8 in content", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi \xff\"}]}", "messages[0].content"},
		{"invalid UTF-8 in a part", "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xc3\"}]}]}", "messages[0].content[0].text"},
		{"lone surrogate", `{"messages":[{"role":"system","content":"a"},{"role":"user","content":"\udc00"}]}`, "messages[1].content"},
		{"invalid UTF-8 in a stop string", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"\xfe\"]}", "stop[1]"},
		{"invalid UTF-8 in a tool", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"\xff\"}}]}", "tools[0].function.description"},
		{"empty user content", `{"messages":[{"role":"user","content":[]}]}`, "messages[0].content"},
		{"empty system content", `{"messages":[{"role":"system","content":[ ]},{"role":"user","content":"x"}]}`, "messages[0].content"},
		{"empty tool content", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":[]}]}`, "messages[2].content"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseChat([]byte(c.body))
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, 400, e.Status)
			assert.Equal(t, c.param, e.Param)
			assert.Contains(t, e.Message, c.param)
		})
	}
	_, err := ParseCompletion([]byte("{\"prompt\":\"\xff\"}"))
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "prompt", e.Param)
	assert.Contains(t, e.Message, "not valid UTF-8")

	// Text that is UTF-8, escapes of whole characters, and an assistant turn without content parts stay fine.
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"é \ud83d\ude00 \u00e9 �"}]}`,
		`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[],"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`,
		`{"messages":[{"role":"user","content":""}]}`,
	} {
		_, err := ParseChat([]byte(body))
		assert.NoError(t, err, body)
	}
}
