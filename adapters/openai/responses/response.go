package responses

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

// Response is a /v1/responses response (also the payload of response.created, .in_progress, .completed).
type Response struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	CreatedAt         int64              `json:"created_at"`
	Status            string             `json:"status"`
	Error             *ResponseError     `json:"error"`
	IncompleteDetails *IncompleteDetails `json:"incomplete_details"`
	Instructions      *string            `json:"instructions"`
	MaxOutputTokens   *int               `json:"max_output_tokens"`
	Model             string             `json:"model"`
	Output            []OutputItem       `json:"output"`
	ParallelToolCalls bool               `json:"parallel_tool_calls"`
	PreviousResponse  *string            `json:"previous_response_id"`
	Store             bool               `json:"store"`
	Temperature       *float64           `json:"temperature"`
	TopP              *float64           `json:"top_p"`
	Text              json.RawMessage    `json:"text"`
	ToolChoice        json.RawMessage    `json:"tool_choice"`
	Tools             []json.RawMessage  `json:"tools"`
	Metadata          map[string]string  `json:"metadata"`
	Usage             *ResponseUsage     `json:"usage"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails says why a response is incomplete: "max_output_tokens".
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// ResponseUsage is a response's token account; Speculative is higgs' extension, as on chat (Usage).
type ResponseUsage struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int                 `json:"total_tokens"`
	Speculative         *ports.SpecUsage    `json:"speculative,omitempty"`
}

// InputTokensDetails counts the input tokens served from the prefix cache.
type InputTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// OutputTokensDetails counts reasoning tokens; higgs does not count them apart, so 0.
type OutputTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// OutputItem is an item of a response's output: a message, a function_call or a reasoning item.
type OutputItem struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Status string `json:"status,omitempty"`
	// message
	Role    string        `json:"role,omitempty"`
	Content []ContentPart `json:"content,omitempty"`
	// function_call
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
	// reasoning: summary is always an array (higgs writes no summaries); the thinking is in content.
	Summary []ContentPart `json:"summary,omitempty"`
}

// MarshalJSON writes the arrays each item type requires even when empty: a message's content (as in
// output_item.added), a reasoning item's summary and content; other items leave them out.
func (it OutputItem) MarshalJSON() ([]byte, error) {
	type plain OutputItem
	orEmpty := func(parts []ContentPart) []ContentPart {
		if parts == nil {
			return []ContentPart{}
		}
		return parts
	}
	switch it.Type {
	case "message":
		return json.Marshal(struct {
			plain
			Content []ContentPart `json:"content"`
		}{plain(it), orEmpty(it.Content)})
	case "reasoning":
		return json.Marshal(struct {
			plain
			Content []ContentPart `json:"content"`
			Summary []ContentPart `json:"summary"`
		}{plain(it), orEmpty(it.Content), orEmpty(it.Summary)})
	}
	return json.Marshal(plain(it))
}

// ContentPart is an output_text part of a message or a reasoning_text part of a reasoning item.
type ContentPart struct {
	Type        string                    `json:"type"`
	Text        string                    `json:"text"`
	Annotations json.RawMessage           `json:"annotations,omitempty"` // [] on output_text, absent on reasoning_text
	Logprobs    []openai.ChatTokenLogprob `json:"logprobs,omitempty"`
}

func responseUsageOf(res ports.GenerateResult) *ResponseUsage {
	u := openai.UsageOf(res)
	return &ResponseUsage{InputTokens: u.PromptTokens, InputTokensDetails: InputTokensDetails{CachedTokens: u.PromptTokensDetails.CachedTokens},
		OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens, Speculative: u.Speculative}
}

// responseShell is the response before its output: what response.created carries.
func responseShell(id string, created int64, model string, p responsesParams) Response {
	return Response{ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Instructions: p.Instructions,
		MaxOutputTokens: p.MaxOutputTokens, Model: model, Output: []OutputItem{}, ParallelToolCalls: p.ParallelToolCalls,
		Temperature: p.Temperature, TopP: p.TopP, Text: p.Text, ToolChoice: p.ToolChoice, Tools: p.Tools,
		Metadata: map[string]string{}}
}

// finishResponse sets a finished response's status and usage.
func finishResponse(r *Response, res ports.GenerateResult) {
	r.Status = "completed"
	if res.FinishReason == "length" {
		r.Status = "incomplete"
		r.IncompleteDetails = &IncompleteDetails{Reason: "max_output_tokens"}
	}
	r.Model = res.Model
	r.Usage = responseUsageOf(res)
}

func textPart(text string, lps []ports.TokenLogprob, logprobs bool) ContentPart {
	p := ContentPart{Type: "output_text", Text: text, Annotations: json.RawMessage("[]")}
	if logprobs {
		p.Logprobs = []openai.ChatTokenLogprob{}
		if l := openai.ChatLogprobsOf(lps); l != nil {
			p.Logprobs = l.Content
		}
	}
	return p
}

// ResponseOf builds the non-streamed response: reasoning, then the message, then the calls.
func ResponseOf(id string, created int64, p responsesParams, res ports.GenerateResult, calls []toolcall.Call, newID func() string) Response {
	r := responseShell(id, created, res.Model, p)
	if res.Reasoning != "" {
		r.Output = append(r.Output, OutputItem{ID: "rs_" + newID(), Type: "reasoning",
			Content: []ContentPart{{Type: "reasoning_text", Text: res.Reasoning}}})
	}
	if res.Content != "" || len(calls) == 0 {
		r.Output = append(r.Output, OutputItem{ID: "msg_" + newID(), Type: "message", Status: "completed", Role: "assistant",
			Content: []ContentPart{textPart(res.Content, res.Logprobs, p.Logprobs)}})
	}
	for _, c := range calls {
		args := c.Arguments
		r.Output = append(r.Output, OutputItem{ID: "fc_" + newID(), Type: "function_call", Status: "completed",
			CallID: "call_" + newID(), Name: c.Name, Arguments: &args})
	}
	finishResponse(&r, res)
	return r
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := s.api.ReadBody(w, r)
	if err != nil {
		s.api.Fail(w, r, err)
		return
	}
	req, p, err := Parse(body)
	if err != nil {
		s.api.Fail(w, r, err)
		return
	}
	ctx := r.Context()
	if s.opts.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
		defer cancel()
	}
	id, created := "resp_"+s.opts.NewID(), s.opts.Now().Unix()
	req.Gen.ID = id
	req.Gen.Tenant = httpapi.IdentityOf(r.Context()).Tenant
	var firstOnce sync.Once
	first := func() {
		firstOnce.Do(func() { s.metrics.ObserveTTFT(r.Pattern, time.Since(start)) })
	}
	types := toolcall.ParamTypesOf(req.Gen.Chat.Tools)
	if !req.Stream {
		res, err := s.gen.Generate(ctx, req.Gen, func(ports.GenerateEvent) error { first(); return nil })
		s.metrics.ObserveResult(res)
		if err != nil {
			if httpapi.ClientGone(r) && errors.Is(err, context.Canceled) {
				s.api.Cancelled(w, r, err, start, false)
				return
			}
			s.api.Fail(w, r, httpapi.Cause(ctx, err))
			return
		}
		var found []toolcall.Call
		if req.ParseTools {
			res.Content, found = toolcall.Parse(res.Content, types)
		}
		found = append(found, structuredCalls(res.ToolCalls)...)
		if !req.ParallelToolCalls && len(found) > 1 {
			found = found[:1]
		}
		openai.WriteJSON(w, http.StatusOK, ResponseOf(id, created, p, res, found, s.opts.NewID))
		return
	}
	model := req.Gen.Model
	if ms := s.gen.Models(); model == "" && len(ms) > 0 {
		model = ms[0].ID
	}
	st := &responseStream{w: w, resp: responseShell(id, created, model, p), newID: s.opts.NewID,
		parallel: req.ParallelToolCalls, logprobs: p.Logprobs}
	if req.ParseTools {
		st.tools = &toolcall.Parser{Types: types}
	}
	res, err := s.gen.Generate(ctx, req.Gen, func(ev ports.GenerateEvent) error {
		first()
		return st.send(ev)
	})
	s.metrics.ObserveResult(res)
	if err != nil {
		if httpapi.ClientGone(r) && errors.Is(err, context.Canceled) || st.sse != nil && st.sse.Err() != nil {
			s.api.Cancelled(w, r, err, start, true)
			return
		}
		err = httpapi.Cause(ctx, err)
		if !st.started {
			s.api.Fail(w, r, err)
			return
		}
		e := openai.ErrorFor(err)
		if errors.Is(err, httpapi.ErrShutdown) {
			httpapi.MarkStatus(w, e.Status)
		} else if e.Status >= 500 && !errors.Is(err, context.Canceled) {
			s.log.Error().Err(err).Str("path", r.URL.Path).Msg("stream failed")
		}
		_ = st.failed(e)
		return
	}
	if err := st.finish(res); err != nil {
		s.api.Cancelled(w, r, err, start, true)
	}
}

// structuredCalls are a Generator's structured calls (a remote provider's) as calls of the answer; each is
// named call_… as a parsed one is.
func structuredCalls(calls []ports.ToolCall) []toolcall.Call {
	out := make([]toolcall.Call, len(calls))
	for i, c := range calls {
		out[i] = toolcall.Call{Name: c.Name, Arguments: c.Arguments}
	}
	return out
}
