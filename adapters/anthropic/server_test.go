package anthropic

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// scripted is a ports.Generator (and TokenCounter) that emits fixed events and returns a fixed result or
// error; got records the last request.
type scripted struct {
	events []ports.GenerateEvent
	res    ports.GenerateResult
	err    error
	count  int
	got    ports.GenerateRequest
}

func (s *scripted) Models() []ports.ModelCard {
	return []ports.ModelCard{{ID: "toy", OwnedBy: "higgs"}}
}

func (s *scripted) Generate(_ context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	s.got = req
	for _, ev := range s.events {
		if err := emit(ev); err != nil {
			return s.res, err
		}
	}
	return s.res, s.err
}

func (s *scripted) CountTokens(context.Context, ports.GenerateRequest) (int, error) {
	return s.count, nil
}

// reasoned is an answer of a reasoning model that calls two tools; the app splits reasoning off, the
// adapter parses the calls.
var reasoned = []ports.GenerateEvent{{Reasoning: "I should "}, {Reasoning: "look it up."},
	{Content: "Checking.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\": \"go\"}}\n</tool_call>"},
	{Content: "\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\": \"rust\"}}\n</tool_call>"}}

func reasonedResult() ports.GenerateResult {
	var c, r strings.Builder
	for _, ev := range reasoned {
		c.WriteString(ev.Content)
		r.WriteString(ev.Reasoning)
	}
	return ports.GenerateResult{Model: "toy", PromptTokens: 11, CompletionTokens: 30, FinishReason: "stop",
		Content: c.String(), Reasoning: r.String(), Spec: ports.SpecUsage{Rounds: 4, Drafted: 12, Accepted: 5, Tau: 2.25}}
}

func newTestServer(t *testing.T, gen ports.Generator, opts Options) (*httptest.Server, sdk.Client) {
	t.Helper()
	opts.Log = zerolog.Nop()
	n := 0
	opts.NewID = func() string { n++; return fmt.Sprintf("id%d", n) }
	srv := httptest.NewServer(New(gen, opts))
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	key := "unused"
	if opts.Keys.Required() {
		key = "k"
	}
	return srv, sdk.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey(key), option.WithMaxRetries(0), option.WithHTTPClient(hc))
}

var lookupTool = []sdk.ToolUnionParam{{OfTool: &sdk.ToolParam{Name: "lookup",
	InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}}}}}

func params() sdk.MessageNewParams {
	return sdk.MessageNewParams{Model: "toy", MaxTokens: 64, Tools: lookupTool,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("find go and rust"))}}
}

// TestSDKThinkingAndToolUse reads a reasoning model's tool calls through the official Go SDK, whole and
// streamed: a thinking block, a text block, one tool_use block per call, stop_reason tool_use, and the
// streamed message accumulated by the SDK equal to the whole one.
func TestSDKThinkingAndToolUse(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the server and client are closed
	gen := &scripted{events: reasoned, res: reasonedResult(), count: 11}
	_, client := newTestServer(t, gen, Options{})
	msg, err := client.Messages.New(t.Context(), params())
	require.NoError(t, err)
	require.Len(t, msg.Content, 4, msg.RawJSON())
	assert.Equal(t, "thinking", msg.Content[0].Type)
	assert.Equal(t, "I should look it up.", msg.Content[0].Thinking)
	assert.Equal(t, "text", msg.Content[1].Type)
	assert.Equal(t, "Checking.", strings.TrimSpace(msg.Content[1].Text))
	for i, q := range []string{"go", "rust"} {
		b := msg.Content[2+i]
		assert.Equal(t, "tool_use", b.Type)
		assert.Equal(t, "lookup", b.Name)
		assert.JSONEq(t, `{"q":"`+q+`"}`, string(b.Input))
		assert.True(t, strings.HasPrefix(b.ID, "toolu_"))
	}
	assert.Equal(t, sdk.StopReasonToolUse, msg.StopReason)
	assert.Equal(t, int64(11), msg.Usage.InputTokens)
	assert.Equal(t, int64(30), msg.Usage.OutputTokens)
	assert.Contains(t, msg.Usage.RawJSON(), `"speculative":{"rounds":4,"plain_steps":0,"draft_tokens":12,"accepted_tokens":5,"tau":2.25`)
	require.NotNil(t, gen.got.Chat.Tools, "the tools reach the template")
	assert.Equal(t, msg.ID, gen.got.ID, "the generation (and so its live events) carries the answer's id")

	stream := client.Messages.NewStreaming(t.Context(), params())
	var acc sdk.Message
	var kinds []string
	for stream.Next() {
		ev := stream.Current()
		kinds = append(kinds, ev.Type)
		require.NoError(t, acc.Accumulate(ev))
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Len(t, acc.Content, 4)
	assert.Equal(t, msg.Content[0].Thinking, acc.Content[0].Thinking)
	assert.Equal(t, "Checking.", strings.TrimSpace(acc.Content[1].Text))
	for i := range 2 {
		assert.Equal(t, msg.Content[2+i].Name, acc.Content[2+i].Name)
		assert.JSONEq(t, string(msg.Content[2+i].Input), string(acc.Content[2+i].Input))
	}
	assert.Equal(t, sdk.StopReasonToolUse, acc.StopReason)
	assert.Equal(t, int64(11), acc.Usage.InputTokens, "message_start carries the counted prompt")
	assert.Equal(t, int64(30), acc.Usage.OutputTokens)
	assert.Equal(t, "message_start", kinds[0])
	assert.Equal(t, "message_stop", kinds[len(kinds)-1])

	// disable_parallel_tool_use keeps the first call.
	p := params()
	p.ToolChoice = sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{DisableParallelToolUse: sdk.Bool(true)}}
	one, err := client.Messages.New(t.Context(), p)
	require.NoError(t, err)
	assert.Len(t, one.Content, 3)
}

// TestStreamEvents checks the wire: Anthropic's event names, block indices and the ping after
// message_start.
func TestStreamEvents(t *testing.T) {
	gen := &scripted{events: reasoned, res: reasonedResult(), count: 11}
	srv, _ := newTestServer(t, gen, Options{})
	resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(
		`{"model":"toy","max_tokens":9,"stream":true,"tools":[{"name":"lookup","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var names []string
	var data []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, name)
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
	assert.Equal(t, []string{"message_start", "ping",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", // thinking
		"content_block_start", "content_block_delta", "content_block_stop", // text
		"content_block_start", "content_block_delta", "content_block_stop", // tool_use
		"content_block_start", "content_block_delta", "content_block_stop", // tool_use
		"message_delta", "message_stop"}, names)
	assert.JSONEq(t, `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`, data[2])
	assert.JSONEq(t, `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"I should "}}`, data[3])
	assert.JSONEq(t, `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`, data[6])
	assert.JSONEq(t, `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_id3","name":"lookup","input":{}}}`, data[9])
	assert.JSONEq(t, `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"q\": \"go\"}"}}`, data[10])
	assert.JSONEq(t, `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":11,"output_tokens":30,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"speculative":{"rounds":4,"plain_steps":0,"draft_tokens":12,"accepted_tokens":5,"tau":2.25,"accepted_per_position":[],"block_size":0,"block_sizes":null}}}`, data[15])
}

func TestStopReasons(t *testing.T) {
	cases := []struct {
		res    ports.GenerateResult
		reason sdk.StopReason
		seq    string
	}{
		{ports.GenerateResult{FinishReason: "stop", Content: "a"}, sdk.StopReasonEndTurn, ""},
		{ports.GenerateResult{FinishReason: "length", Content: "a"}, sdk.StopReasonMaxTokens, ""},
		{ports.GenerateResult{FinishReason: "stop", StopSequence: "END", Content: "a"}, sdk.StopReasonStopSequence, "END"},
	}
	for _, c := range cases {
		_, client := newTestServer(t, &scripted{res: c.res}, Options{})
		msg, err := client.Messages.New(t.Context(), sdk.MessageNewParams{Model: "toy", MaxTokens: 4,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("q"))}})
		require.NoError(t, err)
		assert.Equal(t, c.reason, msg.StopReason)
		assert.Equal(t, c.seq, msg.StopSequence)
	}
}

func TestErrorsThroughSDK(t *testing.T) {
	cases := []struct {
		err    error
		status int
		typ    string
		msg    string
	}{
		{&ports.RequestError{Param: "max_tokens", Message: "max_tokens 9000 is too large"}, 400, "invalid_request_error", "max_tokens: max_tokens 9000 is too large"},
		{&ports.RequestError{Param: "stop", Message: "stop[0] must not be empty"}, 400, "invalid_request_error", "stop_sequences: stop[0]"},
		{fmt.Errorf("%w: no such model", ports.ErrUnknownModel), 404, "not_found_error", "no such model"},
		{ports.ErrBusy, 529, "overloaded_error", "queue is full"},
		{ports.ErrNotReady, 503, "overloaded_error", "loading"},
		{context.DeadlineExceeded, 504, "timeout_error", "timeout"},
		{errors.New("disk on fire"), 500, "api_error", "internal server error"},
	}
	for _, c := range cases {
		t.Run(c.typ+c.msg, func(t *testing.T) {
			_, client := newTestServer(t, &scripted{err: c.err}, Options{})
			_, err := client.Messages.New(t.Context(), sdk.MessageNewParams{Model: "toy", MaxTokens: 4,
				Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("q"))}})
			var apiErr *sdk.Error
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, c.status, apiErr.StatusCode)
			assert.Contains(t, apiErr.Message, c.msg)
			assert.Contains(t, apiErr.RawJSON(), `"type":"`+c.typ+`"`)
			assert.True(t, strings.HasPrefix(apiErr.RequestID, "req_"), apiErr.RequestID)
		})
	}
}

// An error after the stream began is an error event that ends the stream.
func TestStreamErrorMidway(t *testing.T) {
	gen := &scripted{events: []ports.GenerateEvent{{Content: "par"}}, err: errors.New("boom")}
	_, client := newTestServer(t, gen, Options{})
	stream := client.Messages.NewStreaming(t.Context(), params())
	for stream.Next() {
	}
	require.Error(t, stream.Err())
	assert.Contains(t, stream.Err().Error(), "internal server error")
	_ = stream.Close()
}

func TestAuth(t *testing.T) {
	srv, _ := newTestServer(t, &scripted{res: ports.GenerateResult{FinishReason: "stop"}}, Options{Keys: testKeys(t, "k")})
	body := `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"q"}]}`
	for _, c := range []struct {
		hdr  map[string]string
		code int
	}{
		{map[string]string{"x-api-key": "k"}, 200},
		{map[string]string{"Authorization": "Bearer k"}, 200},
		{map[string]string{"Authorization": "bearer k"}, 200},
		{map[string]string{"x-api-key": "nope"}, 401},
		{map[string]string{"Authorization": "Basic k"}, 401},
		{nil, 401},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, c.code, resp.StatusCode, "%v: %s", c.hdr, b)
		if c.code == 401 {
			assert.Regexp(t, `^\{"type":"error","error":\{"type":"authentication_error","message":"missing or incorrect API key: send x-api-key: <key> \(or Authorization: Bearer <key>\)"\},"request_id":"req_id\d+"\}\n$`, string(b))
			assert.NotEmpty(t, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

// rawRequest writes head and then body on a fresh connection and returns the status line the server
// answers with before deadline.
func rawRequest(t *testing.T, addr, head, body string, deadline time.Duration) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, head+"\r\n"+body)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(deadline)))
	// The server closes the connection after answering: all of it arrives before the deadline.
	resp, err := io.ReadAll(conn)
	require.NoError(t, err, "no answer within %v, or the connection was held open; got %q", deadline, resp)
	line, _, _ := strings.Cut(string(resp), "\r\n")
	return line
}

// A client that declares a body and sends one byte gets its 401 at once, and behind no key its 408 once
// the body timeout passes, rather than holding the connection for good.
func TestWithheldBody(t *testing.T) {
	srv, _ := newTestServer(t, &scripted{}, Options{Keys: testKeys(t, "k"), BodyTimeout: 200 * time.Millisecond})
	addr := strings.TrimPrefix(srv.URL, "http://")
	head := "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
	assert.Equal(t, "HTTP/1.1 401 Unauthorized", rawRequest(t, addr, head, "{", 2*time.Second))
	assert.Equal(t, "HTTP/1.1 408 Request Timeout", rawRequest(t, addr, head+"x-api-key: k\r\n", "{", 2*time.Second))
}

func TestCountTokensAndMethods(t *testing.T) {
	gen := &scripted{count: 42}
	srv, client := newTestServer(t, gen, Options{})
	n, err := client.Messages.CountTokens(t.Context(), sdk.MessageCountTokensParams{Model: "toy",
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("q"))}})
	require.NoError(t, err)
	assert.Equal(t, int64(42), n.InputTokens)
	resp, err := http.Get(srv.URL + "/v1/messages")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 405, resp.StatusCode)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
	assert.Contains(t, string(b), `"type":"invalid_request_error"`)
}

// Streamed and whole answers hold the same text, whitespace included, when tools are parsed.
func TestStreamedTextMatchesWhole(t *testing.T) {
	for _, events := range [][]ports.GenerateEvent{
		{{Content: "\n"}, {Content: "Hello"}, {Content: " world\n"}},
		{{Content: "  "}},
		{{Content: "\n"}, {Content: "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {}}\n</tool_call>"}},
		// Text after a call stays after it, streamed or not (one piece or several).
		{{Content: "Let me see.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {}}\n</tool_call>\nDone, and"}, {Content: " more."}},
		{{Content: "A"}, {Content: "\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>"},
			{Content: "\nB\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n"}},
		// A call or a tag cut short (max_tokens) reaches neither.
		{{Content: "Hm.\n<tool_call>\n{\"name\": \"lo"}},
		{{Content: "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_"}},
	} {
		var whole strings.Builder
		for _, ev := range events {
			whole.WriteString(ev.Content)
		}
		gen := &scripted{events: events, res: ports.GenerateResult{FinishReason: "stop", Content: whole.String()}}
		_, client := newTestServer(t, gen, Options{})
		msg, err := client.Messages.New(t.Context(), params())
		require.NoError(t, err)
		stream := client.Messages.NewStreaming(t.Context(), params())
		var acc sdk.Message
		for stream.Next() {
			require.NoError(t, acc.Accumulate(stream.Current()))
		}
		require.NoError(t, stream.Err())
		_ = stream.Close()
		require.Equal(t, len(msg.Content), len(acc.Content), "%q", whole.String())
		for i := range msg.Content {
			assert.Equal(t, msg.Content[i].Type, acc.Content[i].Type)
			assert.Equal(t, msg.Content[i].Text, acc.Content[i].Text)
			assert.Equal(t, msg.Content[i].Name, acc.Content[i].Name)
			assert.NotContains(t, msg.Content[i].Text, "<tool")
			if msg.Content[i].Type == "tool_use" {
				assert.JSONEq(t, string(msg.Content[i].Input), string(acc.Content[i].Input))
			}
		}
	}
}

// testKeys are tenant keys (tenant-1, tenant-2… in order).
func testKeys(t *testing.T, keys ...string) *httpapi.Keys {
	t.Helper()
	named := make([]httpapi.NamedKey, len(keys))
	for i, k := range keys {
		named[i] = httpapi.NamedKey{Key: k, From: "test"}
	}
	k, err := httpapi.NewKeys(named, "")
	require.NoError(t, err)
	return k
}

// Each key's Messages requests reach the generator as its own tenant, whichever header carries the key;
// without keys every request is the one tenant "".
func TestTenantOfEachKey(t *testing.T) {
	gen := &scripted{res: ports.GenerateResult{FinishReason: "stop"}}
	srv, _ := newTestServer(t, gen, Options{Keys: testKeys(t, "key-a", "key-b")})
	for _, c := range []struct {
		header, value string
		want          ports.Tenant
	}{
		{"x-api-key", "key-a", "tenant-1"}, {"x-api-key", "key-b", "tenant-2"}, {"Authorization", "Bearer key-b", "tenant-2"},
	} {
		req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/messages",
			strings.NewReader(`{"model":"toy","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(c.header, c.value)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, c.want, gen.got.Tenant, "%s: %s", c.header, c.value)
	}
	_, client := newTestServer(t, gen, Options{})
	_, err := client.Messages.New(t.Context(), params())
	require.NoError(t, err)
	assert.Equal(t, ports.Tenant(""), gen.got.Tenant)
}
