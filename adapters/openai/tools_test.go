package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/higgs-go/higgs/adapters/chattemplate"
	"github.com/higgs-go/higgs/ports"
)

// toolGen is a ports.Generator standing in for a Qwen3 model that calls tools: it renders each request
// through a chat template (when it has one) and records the prompt, then answers with a scripted output cut
// into pieces the way a stream decoder would hand them out.
type toolGen struct {
	tmpl      ports.ChatTemplate
	reasoning string
	output    string
	piece     int // bytes per streamed piece (0: the whole output at once)
	finish    string

	mu      sync.Mutex
	prompts []string
	reqs    []ports.GenerateRequest
}

func (g *toolGen) Models() []ports.ModelCard {
	return []ports.ModelCard{{ID: "toy", Created: 1700000000, OwnedBy: "higgs"}}
}

func (g *toolGen) Generate(_ context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	var prompt string
	if g.tmpl != nil {
		opts := req.Chat
		opts.AddGenerationPrompt = true
		var err error
		if prompt, err = g.tmpl.Render(req.Messages, opts); err != nil {
			return ports.GenerateResult{}, fmt.Errorf("%w: chat template: %w", ports.ErrInvalidRequest, err)
		}
	}
	g.mu.Lock()
	g.prompts = append(g.prompts, prompt)
	g.reqs = append(g.reqs, req)
	g.mu.Unlock()
	if g.reasoning != "" {
		if err := emit(ports.GenerateEvent{Reasoning: g.reasoning}); err != nil {
			return ports.GenerateResult{}, err
		}
	}
	for _, p := range pieces(g.output, g.piece) {
		if err := emit(ports.GenerateEvent{Content: p}); err != nil {
			return ports.GenerateResult{}, err
		}
	}
	finish := g.finish
	if finish == "" {
		finish = "stop"
	}
	return ports.GenerateResult{Model: "toy", PromptTokens: 3, CompletionTokens: 9, FinishReason: finish,
		Content: g.output, Reasoning: g.reasoning}, nil
}

// pieces cuts s into n-byte pieces (n 0: one piece).
func pieces(s string, n int) []string {
	if n <= 0 || len(s) <= n {
		return []string{s}
	}
	// Cut only between characters, as a real Generator emits text (its streaming decoder holds back an
	// incomplete UTF-8 sequence); an invalid byte counts as a character of its own.
	var out []string
	for len(s) > 0 {
		k := 0
		for k < len(s) {
			_, size := utf8.DecodeRuneInString(s[k:])
			if k > 0 && k+size > n {
				break
			}
			k += size
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

// countingIDs numbers ids 1, 2, 3… so that every call gets its own.
func countingIDs() func() string {
	var mu sync.Mutex
	n := 0
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return strconv.Itoa(n)
	}
}

func newToolServer(gen ports.Generator) *Server {
	return New(gen, Options{Log: zerolog.Nop(), Now: func() time.Time { return time.Unix(1700000000, 0) },
		NewID: countingIDs()})
}

func post(t *testing.T, s *Server, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("POST", "/v1/chat/completions", strings.NewReader(body)))
	return rec
}

const (
	weatherTool  = `{"type":"function","function":{"name":"get_weather","description":"Weather at a place","parameters":{"type":"object","properties":{"location":{"type":"string"},"days":{"type":"integer"}},"required":["location"]}}}`
	timeTool     = `{"type":"function","function":{"name":"get_time"}}`
	toolsBody    = `"tools":[` + weatherTool + `,` + timeTool + `]`
	askWeather   = `"messages":[{"role":"user","content":"Weather in Paris, and the time?"}]`
	twoCalls     = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"
	weatherArgs  = `{"location": "Paris"}`
	oneCallNoTxt = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>"
)

func TestToolCallTranscripts(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cases := []struct {
		name string
		body string
		gen  *toolGen
	}{
		{"chat_tools", `{` + askWeather + `,` + toolsBody + `}`, &toolGen{reasoning: "need two tools", output: twoCalls}},
		{"chat_tools_only_calls", `{` + askWeather + `,` + toolsBody + `}`, &toolGen{output: oneCallNoTxt}},
		{"chat_tools_stream", `{` + askWeather + `,` + toolsBody + `,"stream":true}`, &toolGen{reasoning: "need two tools", output: twoCalls, piece: 7}},
		{"chat_tools_stream_not_parallel", `{` + askWeather + `,` + toolsBody + `,"stream":true,"parallel_tool_calls":false}`, &toolGen{output: twoCalls, piece: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := post(t, newToolServer(c.gen), c.body)
			var buf bytes.Buffer
			buf.WriteString(rec.Result().Status + "\n\n")
			buf.Write(rec.Body.Bytes())
			golden(t, c.name, buf.Bytes())
		})
	}
}

// answer is what a client reads from a response, streamed or not.
type answer struct {
	content   string
	reasoning string
	calls     []FunctionCall
	finish    string
}

func readWhole(t *testing.T, body []byte) answer {
	t.Helper()
	var cc ChatCompletion
	require.NoError(t, json.Unmarshal(body, &cc), "%s", body)
	require.Len(t, cc.Choices, 1)
	m := cc.Choices[0].Message
	var a answer
	if m.Content != nil {
		a.content = *m.Content
	} else {
		assert.NotEmpty(t, m.ToolCalls, "content may be null only when the message is tool calls")
	}
	if m.ReasoningContent != nil {
		a.reasoning = *m.ReasoningContent
	}
	for _, c := range m.ToolCalls {
		assert.Nil(t, c.Index, "a whole message's calls carry no index")
		assert.Equal(t, "function", c.Type)
		assert.True(t, strings.HasPrefix(c.ID, "call_"), c.ID)
		a.calls = append(a.calls, c.Function)
	}
	a.finish = cc.Choices[0].FinishReason
	return a
}

func readStream(t *testing.T, body []byte) answer {
	t.Helper()
	data := parseSSE(t, body)
	require.NotEmpty(t, data)
	require.Equal(t, "[DONE]", data[len(data)-1])
	var a answer
	ids := map[string]bool{}
	for _, d := range data[:len(data)-1] {
		var ch ChatChunk
		require.NoError(t, json.Unmarshal([]byte(d), &ch), d)
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				a.content += *c.Delta.Content
			}
			if c.Delta.ReasoningContent != nil {
				a.reasoning += *c.Delta.ReasoningContent
			}
			for _, tc := range c.Delta.ToolCalls {
				require.NotNil(t, tc.Index)
				assert.Equal(t, len(a.calls), *tc.Index, "calls are numbered in order")
				assert.Equal(t, "function", tc.Type)
				assert.True(t, strings.HasPrefix(tc.ID, "call_") && !ids[tc.ID], "fresh call id %q", tc.ID)
				ids[tc.ID] = true
				a.calls = append(a.calls, tc.Function)
			}
			if c.FinishReason != nil {
				a.finish = *c.FinishReason
			}
		}
	}
	return a
}

// TestToolCallsStreamMatchesWhole streams the same outputs cut into pieces of every size from 1 byte up and
// checks the client reads the same content, reasoning, calls and finish reason as from the whole response.
func TestToolCallsStreamMatchesWhole(t *testing.T) {
	outputs := []struct {
		name   string
		output string
		finish string
		want   answer
	}{
		{"two calls after text", twoCalls, "", answer{content: "Let me check.", reasoning: "r",
			calls: []FunctionCall{{"get_weather", weatherArgs}, {"get_time", "{}"}}, finish: "tool_calls"}},
		{"only a call", oneCallNoTxt + "\n", "", answer{reasoning: "r", calls: []FunctionCall{{"get_weather", weatherArgs}}, finish: "tool_calls"}},
		{"no call", "It is sunny <b>today</b>.\n", "", answer{content: "It is sunny <b>today</b>.\n", reasoning: "r", finish: "stop"}},
		{"malformed block stays content", "Hm.\n<tool_call>\n{\"name\": get_weather}\n</tool_call>", "",
			answer{content: "Hm.\n<tool_call>\n{\"name\": get_weather}\n</tool_call>", reasoning: "r", finish: "stop"}},
		// A call cut short is no content: no partial tag reaches the client; the finish reason says length.
		{"block cut by max_tokens", "Ok.\n<tool_call>\n{\"name\": \"get_wea", "length",
			answer{content: "Ok.", reasoning: "r", finish: "length"}},
		{"tag cut by max_tokens", "Ok.\n<tool_", "length", answer{content: "Ok.", reasoning: "r", finish: "length"}},
		{"call then max_tokens keeps length", oneCallNoTxt + "\nAnd", "length",
			answer{content: "And", reasoning: "r", calls: []FunctionCall{{"get_weather", weatherArgs}}, finish: "length"}},
		// Qwen3.5's XML body: values are read by the request's parameter schemas.
		{"XML call", "Looking.\n<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", "",
			answer{content: "Looking.", reasoning: "r", calls: []FunctionCall{{"get_weather", `{"location": "Paris", "days": 3}`}}, finish: "tool_calls"}},
		{"unclosed complete block ended by a stop token", "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n", "",
			answer{reasoning: "r", calls: []FunctionCall{{"get_time", "{}"}}, finish: "tool_calls"}},
	}
	for _, o := range outputs {
		t.Run(o.name, func(t *testing.T) {
			gen := &toolGen{reasoning: "r", output: o.output, finish: o.finish}
			s := newToolServer(gen)
			whole := readWhole(t, post(t, s, `{`+askWeather+`,`+toolsBody+`}`).Body.Bytes())
			assert.Equal(t, o.want, whole)
			for n := 1; n <= len(o.output); n++ {
				gen.piece = n
				streamed := readStream(t, post(t, s, `{`+askWeather+`,`+toolsBody+`,"stream":true}`).Body.Bytes())
				require.Equal(t, o.want, streamed, "pieces of %d bytes", n)
			}
		})
	}
}

func TestParallelToolCallsFalseKeepsTheFirst(t *testing.T) {
	gen := &toolGen{output: twoCalls, piece: 3}
	s := newToolServer(gen)
	want := answer{content: "Let me check.", calls: []FunctionCall{{"get_weather", weatherArgs}}, finish: "tool_calls"}
	assert.Equal(t, want, readWhole(t, post(t, s, `{`+askWeather+`,`+toolsBody+`,"parallel_tool_calls":false}`).Body.Bytes()))
	assert.Equal(t, want, readStream(t, post(t, s, `{`+askWeather+`,`+toolsBody+`,"parallel_tool_calls":false,"stream":true}`).Body.Bytes()))
}

// Without tools, or with tool_choice "none", the output is not parsed: the client gets the text as written.
func TestNoParsingWithoutTools(t *testing.T) {
	for _, body := range []string{`{` + askWeather + `}`, `{` + askWeather + `,` + toolsBody + `,"tool_choice":"none"}`, `{` + askWeather + `,"tools":[]}`} {
		gen := &toolGen{output: twoCalls, piece: 4}
		s := newToolServer(gen)
		want := answer{content: twoCalls, finish: "stop"}
		assert.Equal(t, want, readWhole(t, post(t, s, body).Body.Bytes()), body)
		assert.Equal(t, want, readStream(t, post(t, s, strings.TrimSuffix(body, "}")+`,"stream":true}`).Body.Bytes()), body)
		for _, r := range gen.reqs {
			assert.Nil(t, r.Chat.Tools, "the model is not offered tools: %s", body)
		}
	}
}

// qwen3Template is the Qwen3 chat template checked in for the tokenizer's tests.
func qwen3Template(t *testing.T) *chattemplate.Template {
	t.Helper()
	tmpl, err := chattemplate.Load(filepath.Join("..", "tokenizer", "testdata", "qwen3"))
	require.NoError(t, err)
	return tmpl
}

// TestToolCallsWithOpenAISDK is the end-to-end path with OpenAI's Go SDK over a loopback server and the real
// Qwen3 template: the tools reach the prompt, the calls come back (whole and streamed, read with the SDK's
// accumulator), and sending the call and a tool reply back re-renders exactly what the model generated.
func TestToolCallsWithOpenAISDK(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	gen := &toolGen{tmpl: qwen3Template(t), output: twoCalls, piece: 3}
	srv := httptest.NewServer(newToolServer(gen))
	hc := &http.Client{Transport: &http.Transport{}}
	defer func() {
		hc.CloseIdleConnections()
		srv.Close()
	}()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
	ctx := t.Context()
	params := openai.ChatCompletionNewParams{
		Model:    "toy",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris, and the time?")},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
				Description: openai.String("Weather at a place"),
				Parameters: openai.FunctionParameters{"type": "object",
					"properties": map[string]any{"location": map[string]any{"type": "string"}}, "required": []string{"location"}}}),
			openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_time"}),
		},
	}

	resp, err := client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	msg := resp.Choices[0].Message
	assert.Equal(t, "tool_calls", resp.Choices[0].FinishReason)
	assert.Equal(t, "Let me check.", msg.Content)
	require.Len(t, msg.ToolCalls, 2)
	assert.Equal(t, "get_weather", msg.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"location":"Paris"}`, msg.ToolCalls[0].Function.Arguments)
	assert.Equal(t, "get_time", msg.ToolCalls[1].Function.Name)
	assert.NotEqual(t, msg.ToolCalls[0].ID, msg.ToolCalls[1].ID)
	first := gen.prompts[0]
	// The SDK writes map keys sorted; the template prints each tool as it arrived.
	assert.Contains(t, first, "<tools>\n{\"function\": {\"name\": \"get_weather\", \"description\": \"Weather at a place\"", "the tools reach the prompt")
	assert.Contains(t, first, "{\"function\": {\"name\": \"get_time\"}, \"type\": \"function\"}\n</tools>")
	assert.True(t, strings.HasSuffix(first, "<|im_start|>assistant\n"), first)

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var finished []string
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc.Name)
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	assert.Equal(t, "Let me check.", acc.Choices[0].Message.Content)
	require.Len(t, acc.Choices[0].Message.ToolCalls, 2)
	assert.Equal(t, "get_weather", acc.Choices[0].Message.ToolCalls[0].Function.Name)
	assert.Equal(t, weatherArgs, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)
	assert.Equal(t, "get_time", acc.Choices[0].Message.ToolCalls[1].Function.Name)
	assert.Equal(t, []string{"get_weather", "get_time"}, finished, "the SDK sees each call finish")

	// Round trip: the assistant's calls and the tools' replies go back; the template renders the calls as
	// the model wrote them.
	params.Messages = append(params.Messages, msg.ToParam(),
		openai.ToolMessage("18C", msg.ToolCalls[0].ID), openai.ToolMessage("12:00", msg.ToolCalls[1].ID))
	gen.output = "It is 18C in Paris at noon."
	resp, err = client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, "It is 18C in Paris at noon.", resp.Choices[0].Message.Content)
	assert.Equal(t, "stop", resp.Choices[0].FinishReason)
	assert.Empty(t, resp.Choices[0].Message.ToolCalls)
	second := gen.prompts[len(gen.prompts)-1]
	want := first + twoCalls + "<|im_end|>\n<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\n12:00\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	assert.Equal(t, want, second)
}

// FuzzToolCallStream checks, for any model output cut into pieces of any size, with parallel calls on or
// off, that the streamed answer reads the same as the whole one and that every call is well-formed.
func FuzzToolCallStream(f *testing.F) {
	f.Add(twoCalls, uint8(3), true)
	f.Add(twoCalls, uint8(1), false)
	f.Add("a <tool_call>{\"name\": \"f\"}</tool_call> b <tool_c", uint8(2), true)
	f.Add("<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}", uint8(5), false)
	f.Fuzz(func(t *testing.T, output string, piece uint8, parallel bool) {
		// A Generator only emits whole UTF-8 characters, and pieces() cuts only between them (an input with
		// invalid bytes is still streamed, but JSON turns those into U+FFFD, so only valid text is compared).
		gen := &toolGen{output: output}
		s := newToolServer(gen)
		body := `{` + askWeather + `,` + toolsBody + `,"parallel_tool_calls":` + strconv.FormatBool(parallel)
		whole := readWhole(t, post(t, s, body+`}`).Body.Bytes())
		gen.piece = int(piece%16) + 1
		streamed := readStream(t, post(t, s, body+`,"stream":true}`).Body.Bytes())
		if !utf8.ValidString(output) {
			// JSON turns invalid bytes into U+FFFD per piece; only compare valid text.
			return
		}
		require.Equal(t, whole, streamed)
		if !parallel {
			require.LessOrEqual(t, len(whole.calls), 1)
		}
		for _, c := range whole.calls {
			require.NotEmpty(t, c.Name)
			require.True(t, json.Valid([]byte(c.Arguments)), c.Arguments)
		}
	})
}

// TestTemplateGoldensThroughRequests sends every conversation of the chat template's transformers goldens
// that has tools or tool calls through ParseChat and renders it with the real Qwen3 template: the request
// path (tools validated and passed on, tool_calls arguments turned into objects, tool replies) must give
// the prompt transformers gives.
func TestTemplateGoldensThroughRequests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "chattemplate", "testdata", "qwen3_chat.json"))
	require.NoError(t, err)
	var g struct {
		Cases []struct {
			Name                string            `json:"name"`
			Messages            []json.RawMessage `json:"messages"`
			Tools               json.RawMessage   `json:"tools"`
			AddGenerationPrompt bool              `json:"add_generation_prompt"`
			EnableThinking      *bool             `json:"enable_thinking"`
			Text                *string           `json:"text"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &g))
	tmpl := qwen3Template(t)
	n := 0
	for _, c := range g.Cases {
		hasCalls := false
		for _, m := range c.Messages {
			hasCalls = hasCalls || bytes.Contains(m, []byte(`"tool_calls"`)) || bytes.Contains(m, []byte(`"role": "tool"`))
		}
		if c.Text == nil || (isNull(c.Tools) && !hasCalls) {
			continue
		}
		n++
		msgs, err := json.Marshal(withCallIDs(t, c.Messages))
		require.NoError(t, err)
		body := `{"messages":` + string(msgs)
		if !isNull(c.Tools) {
			body += `,"tools":` + string(c.Tools)
		}
		if c.EnableThinking != nil {
			body += `,"chat_template_kwargs":{"enable_thinking":` + strconv.FormatBool(*c.EnableThinking) + `}`
		}
		req, err := ParseChat([]byte(body + `}`))
		require.NoError(t, err, c.Name)
		opts := req.Gen.Chat
		opts.AddGenerationPrompt = c.AddGenerationPrompt
		got, err := tmpl.Render(req.Gen.Messages, opts)
		require.NoError(t, err, c.Name)
		assert.Equal(t, *c.Text, got, c.Name)
	}
	require.GreaterOrEqual(t, n, 8, "the goldens have tool cases")
}

// withCallIDs gives the goldens' tool calls and replies the ids OpenAI requires (transformers' test
// conversations have none, and Qwen3's template does not print them): each assistant call gets an id, and
// the tool messages after it answer those ids in order. Key order is kept: the template prints arguments.
func withCallIDs(t *testing.T, msgs []json.RawMessage) []json.RawMessage {
	t.Helper()
	out := make([]json.RawMessage, len(msgs))
	var pending []string
	n := 0
	for i, m := range msgs {
		var obj struct {
			Role       string            `json:"role"`
			ToolCalls  []json.RawMessage `json:"tool_calls"`
			ToolCallID *string           `json:"tool_call_id"`
		}
		require.NoError(t, json.Unmarshal(m, &obj))
		if len(obj.ToolCalls) > 0 {
			pending = pending[:0]
			for j, c := range obj.ToolCalls {
				n++
				id := "call_" + strconv.Itoa(n)
				var err error
				obj.ToolCalls[j], err = setKey(c, "id", id)
				require.NoError(t, err)
				pending = append(pending, id)
			}
			calls, err := json.Marshal(obj.ToolCalls)
			require.NoError(t, err)
			m, err = setKeyRaw(m, "tool_calls", calls)
			require.NoError(t, err)
		}
		if obj.Role == "tool" && obj.ToolCallID == nil && len(pending) > 0 {
			var err error
			m, err = setKey(m, "tool_call_id", pending[0])
			require.NoError(t, err)
			pending = pending[1:]
		}
		out[i] = m
	}
	return out
}
