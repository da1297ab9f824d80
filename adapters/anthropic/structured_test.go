package anthropic

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// structured is a remote provider's answer: text, then two complete calls as structured calls (one without an
// id), never as text.
var structured = []ports.GenerateEvent{{Content: "Checking."},
	{ToolCalls: []ports.ToolCall{{ID: "toolu_remote", Name: "lookup", Arguments: `{"q":"go"}`}}},
	{ToolCalls: []ports.ToolCall{{Name: "lookup", Arguments: ""}}}}

func structuredResult() ports.GenerateResult {
	return ports.GenerateResult{Model: "claude-x", PromptTokens: 3, CompletionTokens: 9, FinishReason: "stop", Content: "Checking.",
		ToolCalls: []ports.ToolCall{structured[1].ToolCalls[0], structured[2].ToolCalls[0]}}
}

// TestStructuredToolCalls: a generator's structured calls become tool_use blocks with the provider's ids
// (a fresh one where it gave none), whole and streamed alike, and end the message with tool_use;
// disable_parallel_tool_use keeps the first.
func TestStructuredToolCalls(t *testing.T) {
	for _, parallel := range []bool{true, false} {
		gen := &scripted{events: structured, res: structuredResult(), count: 3}
		_, c := newTestServer(t, gen, Options{})
		p := params()
		p.Model = "claude-x"
		if !parallel {
			p.ToolChoice = sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{DisableParallelToolUse: sdk.Bool(true)}}
		}
		whole, err := c.Messages.New(t.Context(), p)
		require.NoError(t, err)
		st := c.Messages.NewStreaming(t.Context(), p)
		var acc sdk.Message
		for st.Next() {
			require.NoError(t, acc.Accumulate(st.Current()))
		}
		require.NoError(t, st.Err())
		for _, m := range [][]string{blockSummary(whole.Content), blockSummary(acc.Content)} {
			want := []string{"text Checking.", `tool_use toolu_remote lookup {"q":"go"}`, "tool_use toolu_id lookup {}"}
			if !parallel {
				want = want[:2]
			}
			assert.Equal(t, want, m)
		}
		assert.Equal(t, "tool_use", string(whole.StopReason))
		assert.Equal(t, "tool_use", string(acc.StopReason))
		assert.Equal(t, "claude-x", string(acc.Model), "the stream names the model asked for")
	}
}

// blockSummary is each block as "type text" or "tool_use id name input" (a fresh id as toolu_id, the input
// compacted).
func blockSummary(blocks []sdk.ContentBlockUnion) []string {
	out := make([]string, len(blocks))
	for i, b := range blocks {
		if b.Type != "tool_use" {
			out[i] = b.Type + " " + b.Text
			continue
		}
		id := b.ID
		if strings.HasPrefix(id, "toolu_id") {
			id = "toolu_id"
		}
		var in bytes.Buffer
		_ = json.Compact(&in, b.Input)
		out[i] = "tool_use " + id + " " + b.Name + " " + in.String()
	}
	return out
}
