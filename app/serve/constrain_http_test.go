package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/anthropic"
	"github.com/higgs-go/higgs/adapters/httpapi"
	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	oairesp "github.com/higgs-go/higgs/adapters/openai/responses"
)

// demoServer serves the demo models over both APIs (speculating in fixed blocks of the drafter's size) and
// returns its URL with official SDK clients of both.
func demoServer(t *testing.T) (string, openai.Client, sdk.Client) {
	t.Helper()
	serve := constrainedServe(t, loadDemo(t, 0))
	host := httpapi.New(serve, httpapi.Options{Log: zerolog.Nop()})
	oairesp.New(oaiapi.New(serve, oaiapi.Options{Host: host, Log: zerolog.Nop()}))
	anthropic.New(serve, anthropic.Options{Host: host, Log: zerolog.Nop()})
	srv := httptest.NewServer(host)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	oc := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0), option.WithHTTPClient(hc))
	ac := sdk.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("x"), aoption.WithMaxRetries(0), aoption.WithHTTPClient(hc))
	return srv.URL, oc, ac
}

var weatherSchema = map[string]any{"type": "object", "additionalProperties": false, "required": []string{"city", "unit"},
	"properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12},
		"unit": map[string]any{"enum": []string{"celsius", "fahrenheit"}}}}

func TestHTTPStructuredOutputsOpenAI(t *testing.T) {
	url, oc, _ := demoServer(t)
	raw, err := json.Marshal(weatherSchema)
	require.NoError(t, err)
	check := validator(t, raw)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Complete this Go code:\n\nfunc weather() string {")}

	t.Run("json_schema strict, speculation on and off", func(t *testing.T) {
		var outs []string
		for _, bs := range []int{16, 1} {
			r, err := oc.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "", Messages: msgs,
				MaxTokens: openai.Int(120), Temperature: openai.Float(0),
				ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
					JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Strict: openai.Bool(true), Schema: weatherSchema}}},
			}, option.WithJSONSet("block_size", bs))
			require.NoError(t, err)
			require.Equal(t, "stop", r.Choices[0].FinishReason)
			outs = append(outs, r.Choices[0].Message.Content)
		}
		assert.Equal(t, outs[0], outs[1])
		assert.NoError(t, check(outs[0]), outs[0])
	})
	t.Run("json_object", func(t *testing.T) {
		r, err := oc.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Messages: msgs, MaxTokens: openai.Int(200),
			Temperature:    openai.Float(0),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}})
		require.NoError(t, err)
		if r.Choices[0].FinishReason == "stop" {
			var obj map[string]any
			assert.NoError(t, json.Unmarshal([]byte(r.Choices[0].Message.Content), &obj), r.Choices[0].Message.Content)
		} else {
			assert.True(t, strings.HasPrefix(r.Choices[0].Message.Content, "{"), r.Choices[0].Message.Content)
		}
	})
	tools := []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: weatherSchema, Strict: openai.Bool(true)}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time"}),
	}
	t.Run("tool_choice required", func(t *testing.T) {
		r, err := oc.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Messages: msgs, MaxTokens: openai.Int(150),
			Temperature: openai.Float(0), Tools: tools, ParallelToolCalls: openai.Bool(false),
			ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}})
		require.NoError(t, err)
		require.Equal(t, "tool_calls", r.Choices[0].FinishReason, "%+v", r.Choices[0].Message)
		require.NotEmpty(t, r.Choices[0].Message.ToolCalls)
		for _, c := range r.Choices[0].Message.ToolCalls {
			if c.Function.Name == "get_weather" {
				assert.NoError(t, check(c.Function.Arguments))
			} else {
				assert.Equal(t, "get_time", c.Function.Name)
			}
		}
	})
	t.Run("named function, streamed", func(t *testing.T) {
		st := oc.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{Messages: msgs, MaxTokens: openai.Int(150),
			Temperature: openai.Float(0), Tools: tools, ParallelToolCalls: openai.Bool(false),
			ToolChoice: openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})})
		var acc openai.ChatCompletionAccumulator
		for st.Next() {
			acc.AddChunk(st.Current())
		}
		require.NoError(t, st.Err())
		require.Len(t, acc.Choices, 1)
		calls := acc.Choices[0].Message.ToolCalls
		require.NotEmpty(t, calls)
		assert.Equal(t, "get_weather", calls[0].Function.Name)
		assert.NoError(t, check(calls[0].Function.Arguments))
		assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	})
	t.Run("unsupported keyword is a 400 naming it", func(t *testing.T) {
		body := `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"string","pattern":"^a+$"}}}}`
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, 400, resp.StatusCode)
		var e struct {
			Error struct{ Message, Param string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(b, &e), "%s", b)
		assert.Equal(t, "response_format", e.Error.Param)
		assert.Contains(t, e.Error.Message, "pattern")
	})
}

func TestHTTPStructuredOutputsAnthropic(t *testing.T) {
	url, _, ac := demoServer(t)
	raw, err := json.Marshal(weatherSchema)
	require.NoError(t, err)
	check := validator(t, raw)
	greedy := aoption.WithJSONSet("temperature", 0) // the SDK's params no longer carry temperature
	tools := []sdk.ToolUnionParam{
		{OfTool: &sdk.ToolParam{Name: "get_weather", Strict: sdk.Bool(true), InputSchema: sdk.ToolInputSchemaParam{
			Properties: weatherSchema["properties"], Required: []string{"city", "unit"}, ExtraFields: map[string]any{"additionalProperties": false}}}},
		{OfTool: &sdk.ToolParam{Name: "get_time", InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{}, ExtraFields: map[string]any{"additionalProperties": false}}}},
	}
	base := sdk.MessageNewParams{Model: "demo", MaxTokens: 150, Tools: tools,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Weather in Paris?"))}}
	for name, choice := range map[string]sdk.ToolChoiceUnionParam{
		"any":  {OfAny: &sdk.ToolChoiceAnyParam{DisableParallelToolUse: sdk.Bool(true)}},
		"tool": {OfTool: &sdk.ToolChoiceToolParam{Name: "get_weather", DisableParallelToolUse: sdk.Bool(true)}},
	} {
		t.Run(name, func(t *testing.T) {
			p := base
			p.ToolChoice = choice
			msg, err := ac.Messages.New(t.Context(), p, greedy)
			require.NoError(t, err)
			require.Equal(t, sdk.StopReasonToolUse, msg.StopReason, "%s", msg.RawJSON())
			var uses int
			for _, b := range msg.Content {
				if b.Type != "tool_use" {
					continue
				}
				uses++
				if b.Name == "get_weather" {
					assert.NoError(t, check(string(b.Input)))
				} else {
					assert.Equal(t, "get_time", b.Name)
					assert.NotEqual(t, "tool", name, "tool_choice tool names get_weather")
				}
			}
			assert.Positive(t, uses)
		})
	}
	t.Run("output_config json_schema", func(t *testing.T) {
		p := sdk.MessageNewParams{Model: "demo", MaxTokens: 150,
			Messages:     []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Weather in Paris?"))},
			OutputConfig: sdk.OutputConfigParam{Format: sdk.JSONOutputFormatParam{Schema: weatherSchema}}}
		msg, err := ac.Messages.New(t.Context(), p, greedy)
		require.NoError(t, err)
		require.Equal(t, sdk.StopReasonEndTurn, msg.StopReason)
		require.Len(t, msg.Content, 1)
		assert.NoError(t, check(msg.Content[0].Text), msg.Content[0].Text)
	})
	t.Run("unsupported keyword is a 400 naming it", func(t *testing.T) {
		body := `{"model":"demo","max_tokens":8,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","strict":true,"input_schema":{"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}}}],"tool_choice":{"type":"any"}}`
		resp, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, 400, resp.StatusCode)
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		require.NoError(t, json.Unmarshal(b, &e), "%s", b)
		assert.Equal(t, "invalid_request_error", e.Error.Type)
		assert.Contains(t, e.Error.Message, "uniqueItems")
		assert.True(t, strings.HasPrefix(e.Error.Message, "tool_choice: "), e.Error.Message)
	})
}
