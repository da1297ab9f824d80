package serve

import (
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/grammar"
)

// forcedMaxTokens is the budget of the forced-call tests: a forced answer must end well before it.
const forcedMaxTokens = 400

func forcedTools() []openai.ChatCompletionToolUnionParam {
	return []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: weatherSchema, Strict: openai.Bool(true)}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time"}),
	}
}

// noPartialTag fails when content holds the start of a tool-call tag.
func noPartialTag(t *testing.T, content string) {
	t.Helper()
	assert.NotContains(t, content, "<tool", "content %q", content)
	assert.False(t, strings.HasSuffix(content, "<t"), "content %q", content)
}

type oaiCall struct{ Name, Arguments string }

func oaiCalls(cs []openai.ChatCompletionMessageToolCallUnion) []oaiCall {
	out := make([]oaiCall, len(cs))
	for i, c := range cs {
		out[i] = oaiCall{c.Function.Name, c.Function.Arguments}
	}
	return out
}

// openaiBoth runs p non-streamed and streamed and returns both answers (the streamed one accumulated).
func openaiBoth(t *testing.T, oc openai.Client, p openai.ChatCompletionNewParams) (whole, streamed openai.ChatCompletion) {
	t.Helper()
	r, err := oc.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	require.Len(t, r.Choices, 1)
	st := oc.Chat.Completions.NewStreaming(t.Context(), p, option.WithJSONSet("stream_options", map[string]any{"include_usage": true}))
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	require.NoError(t, st.Err())
	require.Len(t, acc.Choices, 1)
	return *r, acc.ChatCompletion
}

// TestForcedToolCallsEndOpenAI: tool_choice "required" ends once the call (or the parallel calls) is complete,
// with finish_reason tool_calls, well before max_tokens; streamed and non-streamed answers agree; a budget
// that cuts the call short leaves no partial tag in the content.
func TestForcedToolCallsEndOpenAI(t *testing.T) {
	_, oc, _ := demoServer(t)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")}
	required := openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	for _, parallel := range []bool{false, true} {
		t.Run(map[bool]string{false: "parallel_tool_calls false", true: "parallel_tool_calls true"}[parallel], func(t *testing.T) {
			p := openai.ChatCompletionNewParams{Messages: msgs, MaxTokens: openai.Int(forcedMaxTokens), Temperature: openai.Float(0),
				Tools: forcedTools(), ToolChoice: required, ParallelToolCalls: openai.Bool(parallel)}
			whole, streamed := openaiBoth(t, oc, p)
			for _, r := range []openai.ChatCompletion{whole, streamed} {
				c := r.Choices[0]
				require.Equal(t, "tool_calls", c.FinishReason, "%+v", c.Message)
				assert.Empty(t, c.Message.Content)
				if parallel {
					assert.NotEmpty(t, c.Message.ToolCalls)
					assert.LessOrEqual(t, len(c.Message.ToolCalls), grammar.MaxParallelCalls)
					assert.Less(t, r.Usage.CompletionTokens, int64(forcedMaxTokens), "the answer ends before max_tokens")
					continue
				}
				assert.Len(t, c.Message.ToolCalls, 1)
				assert.Less(t, r.Usage.CompletionTokens, int64(forcedMaxTokens/2), "the answer ends well before max_tokens")
			}
			assert.Equal(t, oaiCalls(whole.Choices[0].Message.ToolCalls), oaiCalls(streamed.Choices[0].Message.ToolCalls))
		})
	}
	t.Run("max_tokens inside the call", func(t *testing.T) {
		for _, n := range []int64{1, 2, 3, 5, 8, 12} {
			p := openai.ChatCompletionNewParams{Messages: msgs, MaxTokens: openai.Int(n), Temperature: openai.Float(0),
				Tools: forcedTools(), ToolChoice: required}
			whole, streamed := openaiBoth(t, oc, p)
			for _, r := range []openai.ChatCompletion{whole, streamed} {
				c := r.Choices[0]
				assert.Equal(t, "length", c.FinishReason, "max_tokens %d", n)
				assert.Empty(t, c.Message.ToolCalls, "max_tokens %d", n)
				noPartialTag(t, c.Message.Content)
				assert.Empty(t, c.Message.Content, "max_tokens %d", n)
			}
		}
	})
}

// TestToolLoopOpenAI runs the loop an agent runs with the OpenAI Go SDK: a forced call, the tool's result
// sent back, then the model's answer.
func TestToolLoopOpenAI(t *testing.T) {
	_, oc, _ := demoServer(t)
	p := openai.ChatCompletionNewParams{MaxTokens: openai.Int(forcedMaxTokens), Temperature: openai.Float(0), Tools: forcedTools(),
		Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}}
	r, err := oc.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, "tool_calls", r.Choices[0].FinishReason, "%s", r.RawJSON())
	calls := r.Choices[0].Message.ToolCalls
	require.NotEmpty(t, calls)
	p.Messages = append(p.Messages, r.Choices[0].Message.ToParam())
	for _, c := range calls {
		require.NotEmpty(t, c.ID)
		var args map[string]any
		require.NoError(t, json.Unmarshal([]byte(c.Function.Arguments), &args), c.Function.Arguments)
		p.Messages = append(p.Messages, openai.ToolMessage(`{"temperature": 21, "unit": "celsius"}`, c.ID))
	}
	// The loop's last turn: the model may now answer in text (tool_choice auto).
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
	p.MaxTokens = openai.Int(60)
	r2, err := oc.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	c := r2.Choices[0]
	assert.Contains(t, []string{"stop", "length", "tool_calls"}, c.FinishReason)
	noPartialTag(t, c.Message.Content)
	if c.FinishReason != "tool_calls" {
		assert.NotEmpty(t, c.Message.Content)
	}
	// And a forced turn again after the tool result ends like the first.
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	p.MaxTokens = openai.Int(forcedMaxTokens)
	r3, err := oc.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	assert.Equal(t, "tool_calls", r3.Choices[0].FinishReason, "%s", r3.RawJSON())
	assert.LessOrEqual(t, len(r3.Choices[0].Message.ToolCalls), grammar.MaxParallelCalls)
	assert.Less(t, r3.Usage.CompletionTokens, int64(forcedMaxTokens))
}

type block struct{ Type, Text, Name, Input string }

func blocksOf(m sdk.Message) []block {
	out := make([]block, len(m.Content))
	for i, b := range m.Content {
		out[i] = block{Type: b.Type, Text: b.Text + b.Thinking, Name: b.Name}
		if b.Type == "tool_use" {
			var v any
			_ = json.Unmarshal(b.Input, &v)
			in, _ := json.Marshal(v) // the streamed input is re-assembled from deltas: compare as JSON
			out[i].Input = string(in)
		}
	}
	return out
}

// TestForcedToolUseEndsAnthropic: tool_choice any ends with stop_reason tool_use well before max_tokens,
// disable_parallel_tool_use is honoured, and the streamed message has the same blocks in the same order as
// the non-streamed one.
func TestForcedToolUseEndsAnthropic(t *testing.T) {
	_, _, ac := demoServer(t)
	greedy := aoption.WithJSONSet("temperature", 0)
	tools := []sdk.ToolUnionParam{
		{OfTool: &sdk.ToolParam{Name: "get_weather", Strict: sdk.Bool(true), InputSchema: sdk.ToolInputSchemaParam{
			Properties: weatherSchema["properties"], Required: []string{"city", "unit"}, ExtraFields: map[string]any{"additionalProperties": false}}}},
		// Closed, as OpenAI's parameter-less get_time is: an open object lets a small model write keys until
		// max_tokens, which no constraint can stop.
		{OfTool: &sdk.ToolParam{Name: "get_time", InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{},
			ExtraFields: map[string]any{"additionalProperties": false}}}},
	}
	both := func(t *testing.T, p sdk.MessageNewParams) (whole, streamed sdk.Message) {
		t.Helper()
		m, err := ac.Messages.New(t.Context(), p, greedy)
		require.NoError(t, err)
		st := ac.Messages.NewStreaming(t.Context(), p, greedy)
		var acc sdk.Message
		for st.Next() {
			require.NoError(t, acc.Accumulate(st.Current()))
		}
		require.NoError(t, st.Err())
		return *m, acc
	}
	for _, disable := range []bool{true, false} {
		t.Run(map[bool]string{true: "disable_parallel_tool_use", false: "parallel"}[disable], func(t *testing.T) {
			p := sdk.MessageNewParams{Model: "demo", MaxTokens: forcedMaxTokens, Tools: tools,
				Messages:   []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Weather in Paris?"))},
				ToolChoice: sdk.ToolChoiceUnionParam{OfAny: &sdk.ToolChoiceAnyParam{DisableParallelToolUse: sdk.Bool(disable)}}}
			whole, streamed := both(t, p)
			assert.Equal(t, blocksOf(whole), blocksOf(streamed))
			for _, m := range []sdk.Message{whole, streamed} {
				require.Equal(t, sdk.StopReasonToolUse, m.StopReason, "%s", m.RawJSON())
				var uses int
				for _, b := range m.Content {
					if b.Type == "tool_use" {
						uses++
					} else {
						noPartialTag(t, b.Text)
					}
				}
				if disable {
					assert.Equal(t, 1, uses)
				} else {
					assert.Positive(t, uses)
					assert.LessOrEqual(t, uses, grammar.MaxParallelCalls)
					assert.Less(t, m.Usage.OutputTokens, int64(forcedMaxTokens))
					continue
				}
				assert.Less(t, m.Usage.OutputTokens, int64(forcedMaxTokens/2))
			}
		})
	}
	t.Run("max_tokens inside the call", func(t *testing.T) {
		for _, n := range []int64{1, 3, 8} {
			p := sdk.MessageNewParams{Model: "demo", MaxTokens: n, Tools: tools,
				Messages:   []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Weather in Paris?"))},
				ToolChoice: sdk.ToolChoiceUnionParam{OfAny: &sdk.ToolChoiceAnyParam{}}}
			whole, streamed := both(t, p)
			assert.Equal(t, blocksOf(whole), blocksOf(streamed))
			for _, m := range []sdk.Message{whole, streamed} {
				assert.Equal(t, sdk.StopReasonMaxTokens, m.StopReason)
				for _, b := range m.Content {
					noPartialTag(t, b.Text)
				}
			}
		}
	})
	t.Run("text and calls, streamed and not", func(t *testing.T) {
		// auto: the model writes what it likes; whatever it writes, both forms carry the same blocks.
		p := sdk.MessageNewParams{Model: "demo", MaxTokens: 120, Tools: tools,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Call get_time, then tell me the weather."))}}
		whole, streamed := both(t, p)
		assert.Equal(t, blocksOf(whole), blocksOf(streamed))
	})
}
