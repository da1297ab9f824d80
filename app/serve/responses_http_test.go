package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Responses API (POST /v1/responses) with the official openai-go SDK against the demo models, and with
// request bodies in Codex's shape.

const codeTask = "Complete this Go code:\n\nfunc weather() string {"

func TestHTTPResponsesPlain(t *testing.T) {
	_, oc, _ := demoServer(t)
	r, err := oc.Responses.New(t.Context(), responses.ResponseNewParams{
		Instructions: openai.String("Answer with Go code."), MaxOutputTokens: openai.Int(16), Temperature: openai.Float(0),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(codeTask)}})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(r.ID, "resp_"), r.ID)
	assert.Equal(t, "response", string(r.Object))
	assert.Equal(t, responses.ResponseStatusIncomplete, r.Status)
	assert.Equal(t, "max_output_tokens", string(r.IncompleteDetails.Reason))
	assert.NotEmpty(t, r.OutputText())
	require.Len(t, r.Output, 1)
	assert.Equal(t, "message", r.Output[0].Type)
	assert.Equal(t, int64(16), r.Usage.OutputTokens)
	assert.Positive(t, r.Usage.InputTokens)
	assert.Equal(t, r.Usage.InputTokens+r.Usage.OutputTokens, r.Usage.TotalTokens)
	var u struct {
		Speculative *struct {
			Rounds int `json:"rounds"`
		} `json:"speculative"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Usage.RawJSON()), &u), r.Usage.RawJSON())
	assert.NotNil(t, u.Speculative, r.Usage.RawJSON())
	assert.Equal(t, "Answer with Go code.", r.Instructions.OfString)

	t.Run("logprobs", func(t *testing.T) {
		r, err := oc.Responses.New(t.Context(), responses.ResponseNewParams{MaxOutputTokens: openai.Int(4), Temperature: openai.Float(0),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(codeTask)}, TopLogprobs: openai.Int(2),
			Include: []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs}})
		require.NoError(t, err)
		lps := r.Output[0].Content[0].Logprobs
		require.NotEmpty(t, lps)
		assert.Len(t, lps[0].TopLogprobs, 2)
	})
}

func TestHTTPResponsesStreaming(t *testing.T) {
	_, oc, _ := demoServer(t)
	p := responses.ResponseNewParams{MaxOutputTokens: openai.Int(12), Temperature: openai.Float(0),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(codeTask)}}
	whole, err := oc.Responses.New(t.Context(), p)
	require.NoError(t, err)
	st := oc.Responses.NewStreaming(t.Context(), p)
	var types []string
	var text strings.Builder
	var final responses.Response
	seq := int64(0)
	var acc responses.ResponseAccumulator // the SDK's accumulator checks the protocol as it goes
	for st.Next() {
		ev := st.Current()
		accumulate(t, &acc, ev)
		assert.Equal(t, seq, ev.SequenceNumber, ev.Type)
		seq++
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.output_text.done":
			assert.Equal(t, text.String(), ev.Text)
		case "response.completed", "response.incomplete":
			final = ev.Response
		}
	}
	require.NoError(t, st.Err())
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.incomplete"}, types)
	assert.Equal(t, whole.OutputText(), text.String())
	assert.Equal(t, whole.OutputText(), final.OutputText())
	assert.Equal(t, int64(12), final.Usage.OutputTokens)
	snap := acc.Snapshot()
	assert.Equal(t, "response.incomplete", snap.TerminalEvent)
	assert.Equal(t, whole.OutputText(), snap.OutputText())
	rebuilt, err := acc.ReconstructedResponse()
	require.NoError(t, err)
	assert.Equal(t, whole.OutputText(), rebuilt.OutputText())
}

// accumulate feeds a streamed event to the SDK's accumulator (which takes its server-event union).
func accumulate(t *testing.T, acc *responses.ResponseAccumulator, ev responses.ResponseStreamEventUnion) {
	t.Helper()
	var sev responses.ResponsesServerEventUnion
	require.NoError(t, json.Unmarshal([]byte(ev.RawJSON()), &sev))
	require.NoError(t, acc.AddEvent(sev), ev.RawJSON())
}

var weatherTool = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Parameters: weatherSchema,
	Strict: openai.Bool(true)}}

func TestHTTPResponsesToolLoop(t *testing.T) {
	_, oc, _ := demoServer(t)
	raw, err := json.Marshal(weatherSchema)
	require.NoError(t, err)
	check := validator(t, raw)
	input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(codeTask, responses.EasyInputMessageRoleUser)}
	forced := responses.ResponseNewParams{MaxOutputTokens: openai.Int(150), Temperature: openai.Float(0),
		Input:             responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Tools:             []responses.ToolUnionParam{weatherTool, responses.ToolParamOfWebSearch(responses.WebSearchToolTypeWebSearch)},
		ToolChoice:        responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}},
		ParallelToolCalls: openai.Bool(false)}
	r, err := oc.Responses.New(t.Context(), forced)
	require.NoError(t, err)
	var call *responses.ResponseOutputItemUnion
	for i := range r.Output {
		if r.Output[i].Type == "function_call" {
			call = &r.Output[i]
		}
	}
	require.NotNil(t, call, "%s", r.RawJSON())
	assert.Equal(t, "get_weather", call.Name)
	assert.True(t, strings.HasPrefix(call.CallID, "call_"), call.CallID)
	assert.NoError(t, check(call.Arguments.OfString))

	t.Run("streamed", func(t *testing.T) {
		st := oc.Responses.NewStreaming(t.Context(), forced)
		var args, done string
		var added bool
		var acc responses.ResponseAccumulator
		for st.Next() {
			ev := st.Current()
			accumulate(t, &acc, ev)
			switch ev.Type {
			case "response.output_item.added":
				added = added || ev.Item.Type == "function_call"
			case "response.function_call_arguments.delta":
				args += ev.Delta
			case "response.function_call_arguments.done":
				done = ev.Arguments
			}
		}
		require.NoError(t, st.Err())
		assert.True(t, added)
		assert.Equal(t, call.Arguments.OfString, args)
		assert.Equal(t, args, done)
		snap := acc.Snapshot()
		assert.Equal(t, "response.completed", snap.TerminalEvent)
		var calls []responses.ResponseAccumulatedOutput
		for _, o := range snap.Output {
			if o.Type == "function_call" {
				calls = append(calls, o)
			}
		}
		require.Len(t, calls, 1)
		assert.Equal(t, "get_weather", calls[0].Name)
		assert.Equal(t, args, calls[0].Arguments)
	})

	// The call's output goes back with the conversation; the answer is a message.
	out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temperature":21}`)
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	next := append(input, responses.ResponseInputItemParamOfFunctionCall(call.Arguments.OfString, call.CallID, call.Name), out)
	r, err = oc.Responses.New(t.Context(), responses.ResponseNewParams{MaxOutputTokens: openai.Int(16), Temperature: openai.Float(0),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: next}, Tools: []responses.ToolUnionParam{weatherTool},
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsNone)}})
	require.NoError(t, err)
	assert.NotEmpty(t, r.OutputText())
	assert.Greater(t, r.Usage.InputTokens, int64(20))
}

func TestHTTPResponsesJSONSchema(t *testing.T) {
	_, oc, _ := demoServer(t)
	raw, err := json.Marshal(weatherSchema)
	require.NoError(t, err)
	check := validator(t, raw)
	format := responses.ResponseFormatTextConfigParamOfJSONSchema("weather", weatherSchema)
	format.OfJSONSchema.Strict = openai.Bool(true)
	r, err := oc.Responses.New(t.Context(), responses.ResponseNewParams{MaxOutputTokens: openai.Int(120), Temperature: openai.Float(0),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(codeTask)},
		Text:  responses.ResponseTextConfigParam{Format: format}})
	require.NoError(t, err)
	assert.Equal(t, responses.ResponseStatusCompleted, r.Status)
	assert.NoError(t, check(r.OutputText()), r.OutputText())
}

func TestHTTPResponsesNoStore(t *testing.T) {
	_, oc, _ := demoServer(t)
	in := responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}
	for name, p := range map[string]responses.ResponseNewParams{
		"store":                {Input: in, Store: openai.Bool(true)},
		"previous_response_id": {Input: in, PreviousResponseID: openai.String("resp_1")},
	} {
		_, err := oc.Responses.New(t.Context(), p)
		var apiErr *openai.Error
		require.ErrorAs(t, err, &apiErr, name)
		assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode, name)
		assert.Equal(t, name, apiErr.Param, name)
		assert.Contains(t, apiErr.Message, "keeps no responses", name)
	}
}

// sseEvent is one event of a Responses stream read off the wire.
type sseEvent struct {
	Name string
	Data map[string]any
}

func readSSE(t *testing.T, body io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var name string
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d), line)
			out = append(out, sseEvent{name, d})
			name = ""
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// TestHTTPResponsesCodexFixtures posts request bodies in Codex's shape (built-in tools beside function
// tools, reasoning, include, store false, stream true) and checks each stream is well formed: named events,
// sequence numbers from 0, items opened and closed in order, one terminal event.
func TestHTTPResponsesCodexFixtures(t *testing.T) {
	url, oc, _ := demoServer(t)
	ms, err := oc.Models.List(t.Context())
	require.NoError(t, err)
	require.NotEmpty(t, ms.Data)
	files, err := filepath.Glob(filepath.Join("testdata", "codex", "*.json"))
	require.NoError(t, err)
	require.Len(t, files, 3)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			var body map[string]any
			require.NoError(t, json.Unmarshal(raw, &body))
			body["model"] = ms.Data[0].ID
			raw, err = json.Marshal(body)
			require.NoError(t, err)
			resp, err := http.Post(url+"/v1/responses", "application/json", bytes.NewReader(raw))
			require.NoError(t, err)
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			assert.Equal(t, "text/event-stream", strings.Split(resp.Header.Get("Content-Type"), ";")[0])
			evs := readSSE(t, resp.Body)
			require.GreaterOrEqual(t, len(evs), 4)
			assert.Equal(t, "response.created", evs[0].Name)
			assert.Equal(t, "response.in_progress", evs[1].Name)
			open := map[float64]string{}
			for i, ev := range evs {
				assert.Equal(t, ev.Name, ev.Data["type"])
				assert.Equal(t, float64(i), ev.Data["sequence_number"], ev.Name)
				switch ev.Name {
				case "response.output_item.added":
					open[ev.Data["output_index"].(float64)] = ev.Data["item"].(map[string]any)["type"].(string)
				case "response.output_item.done":
					idx := ev.Data["output_index"].(float64)
					assert.Equal(t, open[idx], ev.Data["item"].(map[string]any)["type"])
					delete(open, idx)
				}
			}
			assert.Empty(t, open, "every item added is done")
			last := evs[len(evs)-1]
			assert.Contains(t, []string{"response.completed", "response.incomplete"}, last.Name)
			r := last.Data["response"].(map[string]any)
			assert.Equal(t, false, r["store"])
			assert.NotNil(t, r["usage"].(map[string]any)["input_tokens_details"])
			if body["tool_choice"] != "auto" {
				out := r["output"].([]any)
				require.NotEmpty(t, out)
				call := out[len(out)-1].(map[string]any)
				assert.Equal(t, "function_call", call["type"])
				assert.Equal(t, "shell", call["name"])
				assert.Equal(t, "completed", last.Data["response"].(map[string]any)["status"])
			}
		})
	}
}
