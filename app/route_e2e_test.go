package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/serve"
	"github.com/higgs-go/higgs/ports"
)

// startHiggsd runs a higgsd as cmd/higgsd wires it (wire_gen.go's order), from args and env, with load as
// its loader (nil: the configured models), and returns its base URL once /health answers 200.
func startHiggsd(t *testing.T, args []string, environ map[string]string, load LoadFunc) string {
	t.Helper()
	cfg, err := LoadConfig(append([]string{"--port", "0"}, args...), env(environ), io.Discard)
	require.NoError(t, err)
	log := zerolog.Nop()
	loader := ProvideLoader(cfg, log)
	if load != nil {
		loader = func(ModelSpec) LoadFunc { return load }
	}
	f, err := ProvideFleet(cfg, loader, log)
	require.NoError(t, err)
	routing, err := ProvideRouting(cfg, f, log)
	require.NoError(t, err)
	gen := ProvideGenerator(routing)
	host := ProvideHTTP(cfg, gen, log)
	keys, err := ProvideKeys(cfg)
	require.NoError(t, err)
	api := ProvideAPI(cfg, gen, ProvideRoutedEvents(routing), f, host, keys, log)
	srv := NewServer(cfg, f, host, api, ProvideResponses(api), ProvideMessages(cfg, gen, host, keys, log), log)
	addr := make(chan net.Addr, 1)
	srv.OnListen = func(a net.Addr) { addr <- a }
	srv.Progress = func(int64, int64) {}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var url string
	select {
	case a := <-addr:
		url = "http://" + a.String()
	case <-time.After(10 * time.Second):
		t.Fatal("higgsd did not listen")
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 20*time.Millisecond, "higgsd did not load")
	return url
}

// toyLoader is the front's local model: the fake engine, served as "toy".
func toyLoader(context.Context, func(done, total int64)) (serve.Engine, func() error, error) {
	eng, _ := srvEngine(4096, 0, false)
	return eng, func() error { return nil }, nil
}

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a := ln.Addr().String()
	require.NoError(t, ln.Close())
	return a
}

// routed is the end-to-end set-up: a remote higgsd serving the bundled demo model as "demo" on both APIs
// behind a key, and two fronts (higgsd with the toy model locally and tenant keys) routing "demo" to it, one
// in the Anthropic format, one in the OpenAI format; both also route gpt-.* to the remote in the OpenAI
// format and down-.* to a provider that is not there.
type routed struct {
	remote, viaAnthropic, viaOpenAI string
}

func newRouted(t *testing.T) routed {
	t.Helper()
	if testing.Short() {
		t.Skip("loads the real demo models; skipped with -short")
	}
	remote := startHiggsd(t, []string{"--model", filepath.Join("..", models.DemoTargetDir), "--draft", filepath.Join("..", models.DemoDrafterDir),
		"--served-model-name", "demo", "--api-key", "remote-secret", "--max-concurrency", "2"}, nil, nil)
	front := func(format string) string {
		return startHiggsd(t, []string{"--api-key", "tenant-1", "--api-key", "tenant-2",
			"--provider", "up=" + format + "," + remote + ",key_env=UP_KEY",
			"--provider", "oai=openai," + remote + "/v1,key_env=UP_KEY",
			"--provider", "gone=openai,http://" + closedPort(t),
			"--route", "demo=up", "--route", "gpt-.*=oai", "--route", "down-.*=gone"},
			map[string]string{"UP_KEY": "remote-secret"}, toyLoader)
	}
	return routed{remote: remote, viaAnthropic: front("anthropic"), viaOpenAI: front("openai")}
}

func oaiClient(url, key string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	return &c
}

func antClient(url, key string) *sdk.Client {
	c := sdk.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey(key), aoption.WithMaxRetries(0))
	return &c
}

// oaiBoth runs p non-streamed and streamed (usage included) and returns both answers.
func oaiBoth(t *testing.T, c *openai.Client, p openai.ChatCompletionNewParams) (whole, streamed openai.ChatCompletion) {
	t.Helper()
	r, err := c.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	st := c.Chat.Completions.NewStreaming(t.Context(), p, option.WithJSONSet("stream_options", map[string]any{"include_usage": true}))
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	require.NoError(t, st.Err())
	require.Len(t, r.Choices, 1)
	require.Len(t, acc.Choices, 1)
	return *r, acc.ChatCompletion
}

// greedy asks the Messages API for temperature 0.
var greedy = aoption.WithJSONSet("temperature", 0)

// antBoth runs p non-streamed and streamed and returns both messages.
func antBoth(t *testing.T, c *sdk.Client, p sdk.MessageNewParams) (whole, streamed sdk.Message) {
	t.Helper()
	m, err := c.Messages.New(t.Context(), p, greedy)
	require.NoError(t, err)
	st := c.Messages.NewStreaming(t.Context(), p, greedy)
	var acc sdk.Message
	for st.Next() {
		require.NoError(t, acc.Accumulate(st.Current()))
	}
	require.NoError(t, st.Err())
	return *m, acc
}

// TestRouteE2E: an OpenAI client through a front routing to the remote in the Anthropic format, and an
// Anthropic client through one routing in the OpenAI format, get what the remote answers its own clients
// directly — text, finish, usage — streamed and not; a tool call makes the round trip both ways; the
// remote's errors come back in their class, an unreachable provider is a 502.
func TestRouteE2E(t *testing.T) {
	r := newRouted(t)
	direct := oaiClient(r.remote, "remote-secret")
	directAnt := antClient(r.remote, "remote-secret")
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Complete this Go code:\n\nfunc add(a, b int) int {")}

	t.Run("openai client, anthropic provider: text, finish, usage", func(t *testing.T) {
		p := openai.ChatCompletionNewParams{Model: "demo", Messages: msgs, MaxTokens: openai.Int(24), Temperature: openai.Float(0)}
		want, err := direct.Chat.Completions.New(t.Context(), p)
		require.NoError(t, err)
		for _, tenant := range []string{"tenant-1", "tenant-2"} {
			whole, streamed := oaiBoth(t, oaiClient(r.viaAnthropic, tenant), p)
			for _, got := range []openai.ChatCompletion{whole, streamed} {
				assert.Equal(t, want.Choices[0].Message.Content, got.Choices[0].Message.Content)
				assert.Equal(t, want.Choices[0].FinishReason, got.Choices[0].FinishReason)
				assert.Equal(t, want.Usage.PromptTokens, got.Usage.PromptTokens)
				assert.Equal(t, want.Usage.CompletionTokens, got.Usage.CompletionTokens)
				assert.Equal(t, "demo", got.Model)
			}
		}
		assert.NotEmpty(t, want.Choices[0].Message.Content)
	})

	t.Run("anthropic client, openai provider: text, stop reason, usage", func(t *testing.T) {
		p := sdk.MessageNewParams{Model: "demo", MaxTokens: 24,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Complete this Go code:\n\nfunc add(a, b int) int {"))}}
		want, err := directAnt.Messages.New(t.Context(), p, greedy)
		require.NoError(t, err)
		whole, streamed := antBoth(t, antClient(r.viaOpenAI, "tenant-1"), p)
		for _, got := range []sdk.Message{whole, streamed} {
			assert.Equal(t, blocksOf(*want), blocksOf(got))
			assert.Equal(t, want.StopReason, got.StopReason)
			assert.Equal(t, want.Usage.InputTokens, got.Usage.InputTokens)
			assert.Equal(t, want.Usage.OutputTokens, got.Usage.OutputTokens)
			assert.Equal(t, sdk.Model("demo"), got.Model)
		}
	})

	t.Run("stop string", func(t *testing.T) {
		p := sdk.MessageNewParams{Model: "demo", MaxTokens: 24,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Complete this Go code:\n\nfunc add(a, b int) int {"))}}
		first, err := directAnt.Messages.New(t.Context(), p, greedy)
		require.NoError(t, err)
		text := blocksOf(*first)[0].Text
		require.GreaterOrEqual(t, len(text), 6)
		p.StopSequences = []string{text[3:6]}
		// Anthropic → Anthropic keeps the stop sequence; through the OpenAI format it is a plain stop.
		got, err := antClient(r.viaAnthropic, "tenant-1").Messages.New(t.Context(), sdk.MessageNewParams{Model: "demo", MaxTokens: 24,
			Messages: p.Messages, StopSequences: p.StopSequences}, greedy)
		require.NoError(t, err)
		assert.Equal(t, sdk.StopReasonStopSequence, got.StopReason)
		assert.Equal(t, text[:3], blocksOf(*got)[0].Text)
		got, err = antClient(r.viaOpenAI, "tenant-1").Messages.New(t.Context(), p, greedy)
		require.NoError(t, err)
		assert.Equal(t, sdk.StopReasonEndTurn, got.StopReason)
		assert.Equal(t, text[:3], blocksOf(*got)[0].Text)
	})

	t.Run("tool call round trip, openai client, anthropic provider", func(t *testing.T) {
		c := oaiClient(r.viaAnthropic, "tenant-1")
		tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Parameters: weatherParams})}
		p := openai.ChatCompletionNewParams{Model: "demo", MaxTokens: openai.Int(200), Temperature: openai.Float(0), Tools: tools,
			Messages:          []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
			ToolChoice:        openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}),
			ParallelToolCalls: openai.Bool(false)}
		whole, streamed := oaiBoth(t, c, p)
		for _, got := range []openai.ChatCompletion{whole, streamed} {
			ch := got.Choices[0]
			require.Equal(t, "tool_calls", ch.FinishReason, "%s", got.RawJSON())
			require.Len(t, ch.Message.ToolCalls, 1)
			call := ch.Message.ToolCalls[0]
			assert.Equal(t, "get_weather", call.Function.Name)
			assert.True(t, json.Valid([]byte(call.Function.Arguments)), call.Function.Arguments)
			assert.NotEmpty(t, call.ID)
			assert.Positive(t, got.Usage.CompletionTokens)
		}
		assert.JSONEq(t, whole.Choices[0].Message.ToolCalls[0].Function.Arguments, streamed.Choices[0].Message.ToolCalls[0].Function.Arguments)
		call := whole.Choices[0].Message.ToolCalls[0]
		p.Messages = append(p.Messages, whole.Choices[0].Message.ToParam(), openai.ToolMessage(`{"temperature": 21}`, call.ID))
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
		p.MaxTokens = openai.Int(16)
		after, err := c.Chat.Completions.New(t.Context(), p)
		require.NoError(t, err, "the call and its result go back to the provider as tool_use and tool_result")
		assert.Empty(t, after.Choices[0].Message.ToolCalls)
		assert.Positive(t, after.Usage.PromptTokens)
	})

	t.Run("tool call round trip, anthropic client, openai provider", func(t *testing.T) {
		c := antClient(r.viaOpenAI, "tenant-2")
		tools := []sdk.ToolUnionParam{{OfTool: &sdk.ToolParam{Name: "get_weather", InputSchema: sdk.ToolInputSchemaParam{
			Properties: weatherParams["properties"], Required: []string{"city"}, ExtraFields: map[string]any{"additionalProperties": false}}}}}
		p := sdk.MessageNewParams{Model: "demo", MaxTokens: 200, Tools: tools,
			Messages:   []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("What is the weather in Paris?"))},
			ToolChoice: sdk.ToolChoiceUnionParam{OfTool: &sdk.ToolChoiceToolParam{Name: "get_weather", DisableParallelToolUse: sdk.Bool(true)}}}
		whole, streamed := antBoth(t, c, p)
		assert.Equal(t, blocksOf(whole), blocksOf(streamed))
		var use sdk.ContentBlockUnion
		for _, m := range []sdk.Message{whole, streamed} {
			require.Equal(t, sdk.StopReasonToolUse, m.StopReason, "%s", m.RawJSON())
			require.Len(t, m.Content, 1)
			use = m.Content[0]
			assert.Equal(t, "tool_use", use.Type)
			assert.Equal(t, "get_weather", use.Name)
			assert.True(t, json.Valid(use.Input))
		}
		use = whole.Content[0]
		p.Messages = append(p.Messages, whole.ToParam(), sdk.NewUserMessage(sdk.NewToolResultBlock(use.ID, `{"temperature": 21}`, false)))
		p.ToolChoice = sdk.ToolChoiceUnionParam{OfNone: &sdk.ToolChoiceNoneParam{}}
		p.MaxTokens = 16
		after, err := c.Messages.New(t.Context(), p, greedy)
		require.NoError(t, err, "the call and its result go back to the provider as tool_calls and a tool message")
		assert.NotEqual(t, sdk.StopReasonToolUse, after.StopReason)
		assert.Positive(t, after.Usage.InputTokens)
	})

	t.Run("responses client, anthropic provider: a function call", func(t *testing.T) {
		body := `{"model":"demo","input":"What is the weather in Paris?","max_output_tokens":200,"temperature":0,
			"parallel_tool_calls":false,"tool_choice":{"type":"function","name":"get_weather"},
			"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","additionalProperties":false,
			"required":["city"],"properties":{"city":{"type":"string","maxLength":12}}}}]`
		for _, stream := range []bool{false, true} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.viaAnthropic+"/v1/responses",
				strings.NewReader(body+`,"stream":`+strconv.FormatBool(stream)+`}`))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer tenant-1")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
			if stream {
				assert.Contains(t, string(raw), "event: response.function_call_arguments.done")
				assert.Contains(t, string(raw), `"name":"get_weather"`)
				continue
			}
			var got struct {
				Output []struct{ Type, Name, Arguments string } `json:"output"`
			}
			require.NoError(t, json.Unmarshal(raw, &got))
			require.Len(t, got.Output, 1, "%s", raw)
			assert.Equal(t, "function_call", got.Output[0].Type)
			assert.Equal(t, "get_weather", got.Output[0].Name)
			assert.True(t, json.Valid([]byte(got.Output[0].Arguments)))
		}
	})

	t.Run("the remote's errors keep their class and message", func(t *testing.T) {
		_, err := oaiClient(r.viaAnthropic, "tenant-1").Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "demo",
			Messages: msgs, MaxTokens: openai.Int(4), Temperature: openai.Float(1.5)})
		var oe *openai.Error
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, http.StatusBadRequest, oe.StatusCode)
		assert.Contains(t, oe.Message, "must be between 0 and 1, not 1.5 (provider up)", "Anthropic's temperature range, said by the remote")

		_, err = oaiClient(r.viaAnthropic, "tenant-1").Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "gpt-x",
			Messages: msgs, MaxTokens: openai.Int(4)})
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, http.StatusNotFound, oe.StatusCode)
		assert.Contains(t, oe.Message, `the model "gpt-x" does not exist; this server serves "demo"`)

		_, err = antClient(r.viaOpenAI, "tenant-1").Messages.New(t.Context(), sdk.MessageNewParams{Model: "gpt-x", MaxTokens: 4,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))}})
		var ae *sdk.Error
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, http.StatusNotFound, ae.StatusCode)
		assert.Contains(t, string(ae.RawJSON()), `does not exist`)
	})

	t.Run("an unreachable provider is a 502", func(t *testing.T) {
		_, err := oaiClient(r.viaAnthropic, "tenant-1").Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "down-1",
			Messages: msgs, MaxTokens: openai.Int(4)})
		var oe *openai.Error
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, http.StatusBadGateway, oe.StatusCode)
		assert.Contains(t, oe.Message, "provider gone at http://")
		assert.Contains(t, oe.Message, "could not be reached")
		st := antClient(r.viaOpenAI, "tenant-1").Messages.NewStreaming(t.Context(), sdk.MessageNewParams{Model: "down-1", MaxTokens: 4,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))}})
		for st.Next() {
		}
		var ae *sdk.Error
		require.True(t, errors.As(st.Err(), &ae), "%v", st.Err())
		assert.Equal(t, http.StatusBadGateway, ae.StatusCode)
	})

	t.Run("counting a routed model's tokens is refused; the local model still counts", func(t *testing.T) {
		c := antClient(r.viaAnthropic, "tenant-1")
		_, err := c.Messages.CountTokens(t.Context(), sdk.MessageCountTokensParams{Model: "demo",
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))}})
		var ae *sdk.Error
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, http.StatusBadRequest, ae.StatusCode)
		assert.Contains(t, string(ae.RawJSON()), `model \"demo\" is routed to provider up`)
		n, err := c.Messages.CountTokens(t.Context(), sdk.MessageCountTokensParams{Model: "toy",
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))}})
		require.NoError(t, err)
		assert.Positive(t, n.InputTokens)
	})

	t.Run("a routed request is in its tenant's event stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.viaAnthropic+"/v1/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer tenant-2")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		events := make(chan ports.Event, 16)
		go func() {
			defer close(events)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					var ev ports.Event
					if json.Unmarshal([]byte(d), &ev) == nil {
						events <- ev
					}
				}
			}
		}()
		require.Equal(t, "hello", (<-events).Type)
		got, err := oaiClient(r.viaAnthropic, "tenant-2").Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "demo",
			Messages: msgs, MaxTokens: openai.Int(4)})
		require.NoError(t, err)
		var seen []string
		deadline := time.After(30 * time.Second)
		for len(seen) < 2 {
			select {
			case ev, ok := <-events:
				require.True(t, ok, "the event stream ended")
				if ev.ID != got.ID {
					continue
				}
				seen = append(seen, ev.Type)
				if ev.Type == "end" {
					assert.Equal(t, int(got.Usage.CompletionTokens), ev.End.CompletionTokens)
				}
			case <-deadline:
				t.Fatalf("the routed request's events did not come; saw %v", seen)
			}
		}
		assert.Equal(t, []string{"start", "end"}, seen)
	})

	t.Run("the local model is still served", func(t *testing.T) {
		got, err := oaiClient(r.viaAnthropic, "tenant-1").Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "toy",
			Messages: msgs, MaxTokens: openai.Int(4)})
		require.NoError(t, err)
		assert.Equal(t, "toy", got.Model)
	})
}

var weatherParams = map[string]any{"type": "object", "additionalProperties": false, "required": []string{"city"},
	"properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}}}

type block struct{ Type, Text, Name, Input string }

// blocksOf is a message's content in comparable form (tool inputs compared as JSON).
func blocksOf(m sdk.Message) []block {
	out := make([]block, len(m.Content))
	for i, b := range m.Content {
		out[i] = block{Type: b.Type, Text: b.Text + b.Thinking, Name: b.Name}
		if b.Type == "tool_use" {
			var v any
			_ = json.Unmarshal(b.Input, &v)
			in, _ := json.Marshal(v)
			out[i].Input = string(in)
		}
	}
	return out
}
