package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/higgs-go/higgs/ports"
)

// OpenAI runs requests on an OpenAI-format provider: chat completions (/v1/chat/completions) for Messages,
// completions (/v1/completions) for a raw Prompt, always streamed with the usage asked for.
type OpenAI struct{ opts Options }

var _ ports.Generator = (*OpenAI)(nil)

// NewOpenAI returns the outbound adapter of an OpenAI-format provider. Safe for concurrent use.
func NewOpenAI(opts Options) *OpenAI { return &OpenAI{opts: opts} }

// Models lists nothing: the provider's models are its own (a router sends it the names its routes match).
func (p *OpenAI) Models() []ports.ModelCard { return nil }

// openAIRequest is the body sent: chat completions' or completions' fields, only those the request sets.
type openAIRequest struct {
	Model          string          `json:"model"`
	Messages       []openAIMessage `json:"messages,omitempty"`
	Prompt         *string         `json:"prompt,omitempty"`
	MaxTokens      int             `json:"max_tokens,omitempty"`
	Temperature    float64         `json:"temperature"`
	TopP           float64         `json:"top_p,omitempty"`
	TopK           int             `json:"top_k,omitempty"`
	MinP           float64         `json:"min_p,omitempty"`
	Seed           *uint64         `json:"seed,omitempty"`
	Stop           []string        `json:"stop,omitempty"`
	Stream         bool            `json:"stream"`
	StreamOptions  map[string]bool `json:"stream_options"`
	Tools          json.RawMessage `json:"tools,omitempty"`
	ToolChoice     any             `json:"tool_choice,omitempty"`
	Parallel       *bool           `json:"parallel_tool_calls,omitempty"`
	ResponseFormat any             `json:"response_format,omitempty"`
	BlockSize      int             `json:"block_size,omitempty"`
	CachePrompt    *bool           `json:"cache_prompt,omitempty"`
	Kwargs         map[string]bool `json:"chat_template_kwargs,omitempty"`
}

type openAIMessage struct {
	Role       string           `json:"role"`
	Content    *string          `json:"content"`
	ToolCalls  []openAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

type openAIToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// openAIBody translates req into the provider's request body.
func openAIBody(req ports.GenerateRequest) (openAIRequest, string, error) {
	if req.Logprobs {
		return openAIRequest{}, "", refuse("logprobs", "log-probabilities are not forwarded to a remote provider")
	}
	b := openAIRequest{Model: req.Model, MaxTokens: req.MaxTokens, Temperature: req.Sampling.Temperature,
		TopK: req.Sampling.TopK, MinP: req.Sampling.MinP, Seed: req.Seed, Stop: req.Stop, Stream: true,
		StreamOptions: map[string]bool{"include_usage": true}, BlockSize: req.BlockSize}
	if req.Sampling.TopP > 0 && req.Sampling.TopP < 1 {
		b.TopP = req.Sampling.TopP
	}
	if req.NoCache {
		f := false
		b.CachePrompt = &f // higgs' extension, sent only when the client opted out
	}
	if req.Messages == nil {
		p := req.Prompt
		b.Prompt = &p
		return b, "/v1/completions", nil
	}
	for _, m := range req.Messages {
		cm, err := parseRaw(m)
		if err != nil {
			return b, "", err
		}
		content := m.Content
		om := openAIMessage{Role: m.Role, Content: &content, ToolCallID: cm.ToolCallID}
		for _, c := range cm.ToolCalls {
			tc := openAIToolCall{ID: c.ID, Type: "function"}
			tc.Function.Name, tc.Function.Arguments = c.Function.Name, string(argsObject(c.Function.Arguments))
			om.ToolCalls = append(om.ToolCalls, tc)
		}
		if m.Role == "assistant" && content == "" && len(om.ToolCalls) > 0 {
			om.Content = nil // OpenAI's shape of an answer that only calls
		}
		b.Messages = append(b.Messages, om)
	}
	if len(req.Chat.Tools) > 0 {
		b.Tools = json.RawMessage(req.Chat.Tools)
	}
	if req.Chat.EnableThinking != nil {
		b.Kwargs = map[string]bool{"enable_thinking": *req.Chat.EnableThinking}
	}
	if c := req.Constraint; c != nil {
		switch c.Kind {
		case ports.ConstrainJSONObject:
			b.ResponseFormat = map[string]string{"type": "json_object"}
		case ports.ConstrainJSONSchema:
			b.ResponseFormat = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": "response", "schema": json.RawMessage(c.Schema)}}
		case ports.ConstrainToolCall:
			b.ToolChoice = "required"
			if len(c.Tools) == 1 {
				b.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": c.Tools[0].Name}}
			}
			if !c.Parallel {
				f := false
				b.Parallel = &f
			}
		case ports.ConstrainStrictTools:
			// The tools carry "strict": true as the client wrote them; tool_choice stays auto.
		}
	}
	return b, "/v1/chat/completions", nil
}

// openAIChunk is one streamed chunk of chat completions or completions (or an error object).
type openAIChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *openAIError `json:"error"`
}

type openAIError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   json.RawMessage `json:"param"`
}

// describeOpenAI reads OpenAI's error shape {"error": {"message", "type", "param"}}; any other body is the
// message as it stands.
func describeOpenAI(body []byte) (msg, param string) {
	var e struct {
		Error *openAIError `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		_ = json.Unmarshal(e.Error.Param, &param) // a param that is not a string names nothing
		return e.Error.Message, param
	}
	return plainMessage(body), ""
}

// Generate runs req on the provider, streaming its answer into emit.
func (p *OpenAI) Generate(ctx context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	res := ports.GenerateResult{Model: req.Model}
	body, path, err := openAIBody(req)
	if err != nil {
		return res, err
	}
	var headers map[string]string
	if p.opts.Key != "" {
		headers = map[string]string{"Authorization": "Bearer " + p.opts.Key}
	}
	resp, err := p.opts.post(ctx, path, body, headers, describeOpenAI)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	return p.read(ctx, newSSEReader(resp.Body), res, emit)
}

// pendingCall is a streamed tool call not yet complete.
type pendingCall struct {
	id, name string
	args     []byte
}

// read folds the provider's chunks into events and the result: text as it comes, tool calls whole when
// the choice finishes (their arguments arrive in pieces), the usage from the last chunk.
func (p *OpenAI) read(ctx context.Context, sse *sseReader, res ports.GenerateResult, emit func(ports.GenerateEvent) error) (out ports.GenerateResult, _ error) {
	name := p.opts.Name
	ans := p.opts.answer()
	defer func() { ans.into(&out) }()
	calls := map[int]*pendingCall{}
	finished := false
	flush := func() error {
		if len(calls) == 0 {
			return nil
		}
		idx := make([]int, 0, len(calls))
		for i := range calls {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		ev := ports.GenerateEvent{}
		for _, i := range idx {
			c := calls[i]
			args := string(argsObject(c.args))
			ev.ToolCalls = append(ev.ToolCalls, ports.ToolCall{ID: c.id, Name: c.name, Arguments: args})
		}
		clear(calls)
		res.ToolCalls = append(res.ToolCalls, ev.ToolCalls...)
		return send(emit, ev)
	}
	for {
		e, err := sse.Next()
		if err != nil {
			if errors.Is(err, io.EOF) && finished {
				err := flush() // before res is read: flush adds the calls to it
				return res, err
			}
			return res, readError(ctx, name, err)
		}
		if string(e.Data) == "[DONE]" {
			if !finished {
				return res, fmt.Errorf("%w: provider %s ended its answer without a finish reason", ports.ErrProvider, name)
			}
			err := flush()
			return res, err
		}
		var c openAIChunk
		if err := json.Unmarshal(e.Data, &c); err != nil {
			return res, badAnswer(name, "stream chunk", err)
		}
		if c.Error != nil {
			return res, streamError(name, c.Error.Type, c.Error.Message)
		}
		if c.Model != "" {
			res.Model = c.Model
		}
		if u := c.Usage; u != nil {
			res.PromptTokens, res.CompletionTokens = u.PromptTokens, u.CompletionTokens
			if u.PromptTokensDetails != nil {
				res.CachedTokens = u.PromptTokensDetails.CachedTokens
			}
		}
		if len(c.Choices) == 0 {
			continue
		}
		ch := c.Choices[0]
		ev := ports.GenerateEvent{Content: ch.Text + ch.Delta.Content, Reasoning: ch.Delta.ReasoningContent + ch.Delta.Reasoning}
		for _, tc := range ch.Delta.ToolCalls {
			pc := calls[tc.Index]
			if pc == nil {
				if err := ans.hold(callBytes); err != nil {
					return res, err
				}
				pc = &pendingCall{}
				calls[tc.Index] = pc
			}
			if err := ans.hold(len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)); err != nil {
				return res, err
			}
			if tc.ID != "" {
				pc.id = tc.ID
			}
			pc.name += tc.Function.Name
			pc.args = append(pc.args, tc.Function.Arguments...)
		}
		if ev.Content != "" || ev.Reasoning != "" {
			if err := ans.text(ev.Content, ev.Reasoning); err != nil {
				return res, err
			}
			if err := send(emit, ev); err != nil {
				return res, err
			}
		}
		if ch.FinishReason != nil {
			finished = true
			res.FinishReason = "stop"
			if *ch.FinishReason == "length" {
				res.FinishReason = "length"
			}
			if err := flush(); err != nil {
				return res, err
			}
		}
	}
}

// send passes ev to emit (nil: nobody listens).
func send(emit func(ports.GenerateEvent) error, ev ports.GenerateEvent) error {
	if emit == nil {
		return nil
	}
	return emit(ev)
}

// plainMessage is a non-JSON error body as a message: trimmed, at most 500 bytes.
func plainMessage(body []byte) string {
	s := string(body)
	if len(s) > 500 {
		s = strings.ToValidUTF8(s[:500], "") + "…"
	}
	return strings.TrimSpace(s)
}
