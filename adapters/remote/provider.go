package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/higgs-go/higgs/ports"
)

// Options name a provider and how to reach it.
type Options struct {
	// Name is the provider's name in the configuration; errors and logs name it.
	Name string
	// BaseURL is the provider's address: scheme, host and an optional path prefix, with or without a final
	// "/v1" (https://api.anthropic.com, http://127.0.0.1:8001/v1…).
	BaseURL string
	// Key, when set, is sent to the provider (OpenAI: Authorization: Bearer; Anthropic: x-api-key). It is
	// never logged nor put in an error.
	Key string
	// Client sends the requests; nil means a client of its own without a timeout (a generation may take
	// long; the request's context bounds it).
	Client *http.Client
	// MaxAnswerBytes bounds what one answer may make higgsd hold (its text, reasoning and tool calls
	// together); 0 means DefaultMaxAnswerBytes.
	MaxAnswerBytes int
}

// DefaultMaxAnswerBytes is the default bound on one answer: far above any real model's output (it is not a
// length limit, max_tokens is), it stops a provider that streams without end from growing higgsd's memory
// until the request's timeout.
const DefaultMaxAnswerBytes = 64 << 20

// callBytes is what one streamed tool call holds before its name and arguments, counted against the bound
// so that a stream of empty calls at ever new indices is bounded too.
const callBytes = 64

// answer gathers a streamed answer's text and reasoning (in builders: appending each delta to the result's
// strings would copy the whole answer again at every delta) and counts every byte the answer holds,
// tool calls included, against the bound.
type answer struct {
	name               string
	limit, held        int
	content, reasoning strings.Builder
}

func (o Options) answer() *answer {
	limit := o.MaxAnswerBytes
	if limit <= 0 {
		limit = DefaultMaxAnswerBytes
	}
	return &answer{name: o.Name, limit: limit}
}

// hold counts n more bytes of the answer; over the bound it is the provider's failure (a 502).
func (a *answer) hold(n int) error {
	if a.held += n; a.held > a.limit {
		return fmt.Errorf("%w: provider %s sent an answer of more than %d bytes", ports.ErrProvider, a.name, a.limit)
	}
	return nil
}

// text appends an event's text and reasoning.
func (a *answer) text(content, reasoning string) error {
	if err := a.hold(len(content) + len(reasoning)); err != nil {
		return err
	}
	a.content.WriteString(content)
	a.reasoning.WriteString(reasoning)
	return nil
}

// into sets res's text and reasoning to the answer's.
func (a *answer) into(res *ports.GenerateResult) {
	res.Content, res.Reasoning = a.content.String(), a.reasoning.String()
}

// maxErrorBody bounds how much of a provider's error answer is read for its message.
const maxErrorBody = 64 << 10

// defaultMaxTokens is the output limit sent to an Anthropic-format provider for a request that sets none
// (Messages requires one; an OpenAI client may leave it out).
const defaultMaxTokens = 4096

// endpoint joins the base URL and an API path such as "/v1/messages": a base ending in "/v1" is not doubled.
func (o Options) endpoint(path string) string {
	base := strings.TrimRight(o.BaseURL, "/")
	base = strings.TrimSuffix(base, "/v1")
	return base + path
}

func (o Options) client() *http.Client {
	if o.Client != nil {
		return o.Client
	}
	return http.DefaultClient
}

// post sends body to path and returns the open response of a 2xx answer; any other status is read and
// turned into the port's error by describe (the format's error shape).
func (o Options) post(ctx context.Context, path string, body any, headers map[string]string,
	describe func(body []byte) (msg, param string)) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encode the request: %w", o.Name, err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, o.endpoint(path), bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: provider %s: bad URL %q: %v", ports.ErrProvider, o.Name, o.BaseURL, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	for k, v := range headers {
		hr.Header.Set(k, v)
	}
	resp, err := o.client().Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("provider %s: %w", o.Name, ctx.Err())
		}
		return nil, fmt.Errorf("%w: provider %s at %s could not be reached: %v", ports.ErrProvider, o.Name, o.BaseURL, unwrapURL(err))
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody)) // what arrived is the message; a cut one still says something
	msg, param := describe(raw)
	return nil, statusError(o.Name, resp.StatusCode, msg, param)
}

// unwrapURL drops net/http's "Post "URL": " prefix: the error names the provider's address already.
func unwrapURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// statusError maps a provider's non-2xx answer to the port's error of the same class: the client's fault
// (400, 404, 413, 422…) stays the client's with the provider's message; a full provider is ErrBusy; a key the
// provider refuses (without its message), or a 5xx, is the gateway's failure (ErrProvider, 502), which the
// client cannot fix.
func statusError(name string, status int, msg, param string) error {
	if msg == "" {
		msg = http.StatusText(status)
	}
	switch {
	case status == http.StatusNotFound:
		return fmt.Errorf("%w: provider %s: %s", ports.ErrUnknownModel, name, msg)
	case status == http.StatusTooManyRequests || status == 529:
		return fmt.Errorf("%w: provider %s: %s", ports.ErrBusy, name, msg)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The provider's message stays out: it may quote the key ("Incorrect API key provided: sk-…wxyz"),
		// and this error reaches every client, not only the operator who configured the key.
		return fmt.Errorf("%w: provider %s refused the configured key (status %d); check the provider's key_env variable", ports.ErrProvider, name, status)
	case status/100 == 4:
		return &ports.RequestError{Param: param, Message: fmt.Sprintf("%s (provider %s)", msg, name)}
	}
	return fmt.Errorf("%w: provider %s answered %d: %s", ports.ErrProvider, name, status, msg)
}

// streamError maps an error a provider reports inside a stream (an error event), by its type.
func streamError(name, typ, msg string) error {
	switch typ {
	case "invalid_request_error":
		return &ports.RequestError{Message: fmt.Sprintf("%s (provider %s)", msg, name)}
	case "overloaded_error", "rate_limit_error":
		return fmt.Errorf("%w: provider %s: %s", ports.ErrBusy, name, msg)
	case "not_found_error":
		return fmt.Errorf("%w: provider %s: %s", ports.ErrUnknownModel, name, msg)
	}
	return fmt.Errorf("%w: provider %s failed during the answer (%s): %s", ports.ErrProvider, name, typ, msg)
}

// readError turns a failure to read the provider's stream into the port's error: the request's own
// cancellation stays a cancellation, anything else is the provider's failure.
func readError(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("provider %s: %w", name, ctx.Err())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: provider %s ended its answer early", ports.ErrProvider, name)
	}
	return fmt.Errorf("%w: provider %s: reading the answer: %v", ports.ErrProvider, name, err)
}

// badAnswer is the error of an answer this package cannot read.
func badAnswer(name, what string, err error) error {
	return fmt.Errorf("%w: provider %s sent an unreadable %s: %v", ports.ErrProvider, name, what, err)
}

// refuse is the error of a request this format cannot express.
func refuse(param, format string, args ...any) error {
	return &ports.RequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// chatMessage is the part of a ports.ChatMessage's Raw object a provider needs beyond Role and Content.
type chatMessage struct {
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

// parseRaw reads a message's tool calls and tool_call_id (the inbound adapters checked them).
func parseRaw(m ports.ChatMessage) (chatMessage, error) {
	var cm chatMessage
	if len(m.Raw) == 0 {
		return cm, nil
	}
	if err := json.Unmarshal(m.Raw, &cm); err != nil {
		return cm, refuse("messages", "a %s message could not be read for the provider: %v", m.Role, err)
	}
	return cm, nil
}

// argsObject returns a call's arguments as a JSON object: the inbound adapters pass an object, OpenAI's wire
// a string holding one; anything that is not a JSON object (empty, null, a number, an array, broken JSON) is {},
// since Anthropic's tool_use.input must be an object and both APIs' clients parse the arguments as one.
func argsObject(raw json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if json.Unmarshal(t, &s) == nil {
			t = bytes.TrimSpace([]byte(s))
		}
	}
	if len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return json.RawMessage("{}")
	}
	return json.RawMessage(t)
}

// openAITool is one tool of ports.ChatOptions.Tools (the OpenAI shape both inbound adapters produce).
type openAITool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	} `json:"function"`
}
