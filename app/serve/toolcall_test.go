package serve

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/higgs-go/higgs/adapters/toolcall"
)

// TestReasoningThenToolCalls runs a Qwen3 answer through the text pipe (stop strings, <think> split) and the
// content it streams through the HTTP adapter's tool-call parser, the order of a real request: reasoning is
// split off first, so a <tool_call> written while thinking stays reasoning, and the calls after </think> are
// found whatever the token boundaries.
func TestReasoningThenToolCalls(t *testing.T) {
	text := "<think>\nMaybe <tool_call>{\"name\": \"draft\"}</tool_call>? No, ask.\n</think>\n\n" +
		"Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>"
	for _, sizes := range [][]int{nil, {2}, {3, 7}, {11}, {len(text)}} {
		evs, content, reasoning, _ := runPipe(t, text, sizes, []string{"<|im_end|>"}, true, false)
		assert.Equal(t, "Maybe <tool_call>{\"name\": \"draft\"}</tool_call>? No, ask.\n", reasoning, "sizes %v", sizes)
		var p toolcall.Parser
		var got strings.Builder
		var calls []toolcall.Call
		for _, ev := range evs {
			c, k := p.Feed(ev.Content)
			got.WriteString(c)
			calls = append(calls, k...)
		}
		c, k := p.Flush()
		got.WriteString(c)
		calls = append(calls, k...)
		assert.Equal(t, "Checking.", got.String(), "sizes %v", sizes)
		assert.Equal(t, []toolcall.Call{{Name: "get_weather", Arguments: `{"location": "Paris"}`}}, calls, "sizes %v", sizes)
		wholeContent, wholeCalls := toolcall.Parse(content, nil)
		assert.Equal(t, got.String(), wholeContent)
		assert.Equal(t, calls, wholeCalls)
	}
}
