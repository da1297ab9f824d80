package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

// Options configure the HTTP adapter.
type Options struct {
	// Host is the server this API registers its routes on, beside the other APIs mounted there; nil means a
	// server of its own (serving this API alone, with a fresh metrics registry).
	Host *httpapi.Server
	// Keys, when any is set, are required as "Authorization: Bearer <key>" on /v1/ routes; each tenant key
	// is a tenant of its own (ports.GenerateRequest.Tenant), the operator key sees every tenant's events.
	// nil: no keys, one tenant.
	Keys *httpapi.Keys
	// MaxBodyBytes bounds request bodies (default httpapi.DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// BodyTimeout bounds the time a client may take to send a request body (default
	// httpapi.DefaultBodyTimeout); a slower body is answered 408 and the connection closed.
	BodyTimeout time.Duration
	// RequestTimeout bounds a generation request (0: no limit).
	RequestTimeout time.Duration
	Log            zerolog.Logger
	// Events, when set, is served as GET /v1/events and feeds the live view of the page at /.
	Events ports.EventSource
	// System, when set, is served as GET /v1/system (version, uptime, memory, loaded models).
	System ports.SystemReporter
	// Now and NewID make responses reproducible in tests; nil means the clock and random ids.
	Now   func() time.Time
	NewID func() string
}

// Readier is an optional Generator ability: while Ready is false, /health answers 503 loading.
type Readier interface{ Ready() bool }

// Degrader is an optional Generator ability: a non-nil Degraded makes /health answer 503 degraded with
// its text (a lost rank of a model split across processes).
type Degrader interface{ Degraded() error }

// Server is the OpenAI-compatible HTTP API over a ports.Generator.
type Server struct {
	gen     ports.Generator
	opts    Options
	log     zerolog.Logger
	host    *httpapi.Server
	metrics *httpapi.Metrics
}

// New builds the API and registers its routes on opts.Host (or a server of its own). It also answers, in
// OpenAI's shape, every path no API on the host routes (404) and a wrong method on its own routes and on
// /metrics (405): it is higgsd's default API.
func New(gen ports.Generator, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = httpapi.DefaultMaxBodyBytes
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = httpapi.DefaultBodyTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = randomID
	}
	host := opts.Host
	if host == nil {
		host = httpapi.New(gen, httpapi.Options{Log: opts.Log})
	}
	s := &Server{gen: gen, opts: opts, log: opts.Log, host: host, metrics: host.Metrics()}
	// Authentication is per route (it only guards /v1/ paths), so that an API beside this one can answer its
	// own way; so are the recovery and the browser checks, which answer in this API's shape.
	route := func(pattern string, h http.Handler) { host.Handle(pattern, s.recoverer(host.Guard(h, refuse))) }
	handle := func(pattern string, h http.HandlerFunc) { route(pattern, s.authenticate(h)) }
	// Generations (work). POST /v1/responses is adapters/openai/responses', registered with Work; its 405 is
	// answered here.
	s.work("POST /v1/chat/completions", s.chat)
	s.work("POST /v1/completions", s.completion)
	s.work("POST /v1/embeddings", s.embeddings)
	handle("GET /v1/models", s.models)
	handle("GET /v1/models/{id...}", s.model)
	handle("GET /health", s.health)
	handle("GET /v1/events", s.events)
	handle("GET /v1/system", s.system)
	s.registerTokenize(route)
	route("GET /{$}", http.HandlerFunc(s.page))
	route("GET /ui/", pageAssets())
	// The mux answers a wrong method with a plain-text 405; these catch-alls answer in OpenAI's shape.
	for path, allow := range map[string]string{"/v1/chat/completions": "POST", "/v1/completions": "POST", "/v1/responses": "POST", "/v1/embeddings": "POST",
		"/v1/models": "GET", "/v1/models/{id...}": "GET", "/health": "GET", "/metrics": "GET", "/v1/events": "GET", "/v1/system": "GET"} {
		handle(path, methodNotAllowed(allow))
	}
	handle("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	return s
}

// ServeHTTP serves the host this API is registered on: its routes and those of every API beside it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.host.ServeHTTP(w, r) }

// work registers a generation: the host's work, drained with every API's and refused in this API's shape;
// its body must be JSON (GuardJSON).
func (s *Server) work(pattern string, h http.HandlerFunc) {
	s.host.Handle(pattern, s.recoverer(s.host.GuardJSON(s.authenticate(s.host.Work(h, refuseDraining)), refuse)))
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, &Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
			Code: "method_not_allowed", Message: fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, allow)})
	}
}

// refuse answers a request the browser checks refuse (httpapi.Guard) in OpenAI's shape.
func refuse(w http.ResponseWriter, status int, code, message string) {
	writeError(w, &Error{Status: status, Type: "invalid_request_error", Code: code, Message: message})
}

// writeJSON sends v with status, or OpenAI's 500 when v cannot be encoded.
func writeJSON(w http.ResponseWriter, status int, v any) {
	httpapi.WriteJSON(w, status, v, []byte(`{"error":{"message":"internal server error","type":"server_error","param":null,"code":"internal_error"}}`))
}

func marshal(v any) ([]byte, error) { return httpapi.Marshal(v) }

func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, e.body())
}

// fail maps err, logs server-side failures, and answers. A request cut by shutdown is no failure (the host
// logs it).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := ErrorFor(err)
	if e.Status >= 500 && !errors.Is(err, httpapi.ErrShutdown) {
		s.log.Error().Err(err).Str("path", r.URL.Path).Int("status", e.Status).Msg("request failed")
	}
	writeError(w, e)
}

// cancelled accounts for a generation whose client went away before its response ended (499, debug).
func (s *Server) cancelled(w http.ResponseWriter, r *http.Request, err error, start time.Time, streamed bool) {
	httpapi.Cancelled(s.log, w, r, err, start, streamed)
}

// recoverer turns a panic into a logged 500 in OpenAI's shape.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return httpapi.Recover(s.log, next, func(w http.ResponseWriter) {
		writeError(w, &Error{Status: http.StatusInternalServerError, Type: "server_error",
			Code: "internal_error", Message: "internal server error"})
	})
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-s.host.Draining():
		w.Header().Set("Retry-After", strconv.Itoa(httpapi.DrainRetryAfter))
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	default:
	}
	if rd, ok := s.gen.(Readier); ok && !rd.Ready() {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
		return
	}
	if dg, ok := s.gen.(Degrader); ok {
		if err := dg.Degraded(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "degraded", "error": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	list := ModelList{Object: "list", Data: []Model{}}
	for _, c := range s.gen.Models() {
		list.Data = append(list.Data, ModelOf(c))
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, c := range s.gen.Models() {
		if c.ID == id || slices.Contains(c.Aliases, id) {
			writeJSON(w, http.StatusOK, ModelOf(c))
			return
		}
	}
	writeError(w, &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model",
		Code: "model_not_found", Message: fmt.Sprintf("the model %q does not exist", id)})
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, ParseChat, true)
}

func (s *Server) completion(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, ParseCompletion, false)
}

// generate runs one chat or completion request, streamed or not.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, parse func([]byte) (Request, error), chat bool) {
	start := time.Now()
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, err := parse(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx := r.Context()
	if s.opts.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
		defer cancel()
	}
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	id, created := prefix+s.opts.NewID(), s.opts.Now().Unix()
	req.Gen.ID = id
	req.Gen.Tenant = httpapi.IdentityOf(r.Context()).Tenant
	var firstOnce sync.Once
	first := func() {
		firstOnce.Do(func() { s.metrics.ObserveTTFT(r.Pattern, time.Since(start)) })
	}
	if !req.Stream {
		res, err := s.gen.Generate(ctx, req.Gen, func(ports.GenerateEvent) error { first(); return nil })
		s.metrics.ObserveResult(res)
		if err != nil {
			if httpapi.ClientGone(r) && errors.Is(err, context.Canceled) {
				s.cancelled(w, r, err, start, false)
				return
			}
			s.fail(w, r, httpapi.Cause(ctx, err))
			return
		}
		if chat {
			var calls []ToolCall
			if req.ParseTools {
				var found []toolcall.Call
				res.Content, found = toolcall.Parse(res.Content, toolcall.ParamTypesOf(req.Gen.Chat.Tools))
				if !req.ParallelToolCalls && len(found) > 1 {
					found = found[:1]
				}
				calls = toolCallsOf(found, s.opts.NewID, false, 0)
			}
			calls = append(calls, structuredCallsOf(res.ToolCalls, s.opts.NewID, false, 0)...)
			if !req.ParallelToolCalls && len(calls) > 1 {
				calls = calls[:1]
			}
			writeJSON(w, http.StatusOK, ChatCompletionOf(id, created, res, calls))
		} else {
			writeJSON(w, http.StatusOK, CompletionOf(id, created, res))
		}
		return
	}
	model := req.Gen.Model
	if ms := s.gen.Models(); model == "" && len(ms) > 0 {
		model = ms[0].ID
	}
	st := &stream{w: w, id: id, created: created, chat: chat, model: model, newID: s.opts.NewID,
		parallel: req.ParallelToolCalls}
	if chat && req.ParseTools {
		st.tools = &toolcall.Parser{Types: toolcall.ParamTypesOf(req.Gen.Chat.Tools)}
	}
	res, err := s.gen.Generate(ctx, req.Gen, func(ev ports.GenerateEvent) error {
		first()
		return st.send(ev)
	})
	s.metrics.ObserveResult(res)
	if err != nil {
		if httpapi.ClientGone(r) && errors.Is(err, context.Canceled) || st.sse != nil && st.sse.Err() != nil {
			// The client went away: nothing more can reach it, and its leaving is no server failure.
			s.cancelled(w, r, err, start, true)
			return
		}
		err = httpapi.Cause(ctx, err)
		if !st.started {
			s.fail(w, r, err)
			return
		}
		// Headers are gone: report in the stream (as vLLM does), then end it; a request cut by shutdown
		// counts as the 503 it would have been answered.
		e := ErrorFor(err)
		if errors.Is(err, httpapi.ErrShutdown) {
			httpapi.MarkStatus(w, e.Status)
		} else if e.Status >= 500 && !errors.Is(err, context.Canceled) {
			s.log.Error().Err(err).Str("path", r.URL.Path).Msg("stream failed")
		}
		_ = st.sse.Event(e.body())
		_ = st.sse.Data("[DONE]")
		return
	}
	if err := st.finish(res, req.IncludeUsage); err != nil {
		s.cancelled(w, r, err, start, true)
	}
}

// stream writes one request's SSE events; headers go out with the first event, so that errors found before
// any output (validation, a full queue) still get a proper status.
type stream struct {
	w       http.ResponseWriter
	sse     *httpapi.SSE
	id      string
	created int64
	model   string
	chat    bool
	started bool
	// tools parses the answer for tool calls (nil when the model was not offered tools); calls counts the
	// calls sent, parallel false keeps only the first.
	tools    *toolcall.Parser
	calls    int
	parallel bool
	newID    func() string
}

func (st *stream) start() error {
	if st.started {
		return nil
	}
	st.started = true
	st.sse = httpapi.StartSSE(st.w)
	if st.chat {
		return st.sse.Event(chatDeltaChunk(st.id, st.created, st.model, ports.GenerateEvent{}, "assistant"))
	}
	return nil
}

func (st *stream) send(ev ports.GenerateEvent) error {
	if err := st.start(); err != nil {
		return err
	}
	if !st.chat {
		c := completionTextChunk(st.id, st.created, st.model, ev.Content, nil)
		if len(ev.Logprobs) > 0 {
			c.Choices[0].Logprobs = completionLogprobsOf(ev.Logprobs)
		}
		return st.sse.Event(c)
	}
	if st.tools == nil {
		if len(ev.ToolCalls) == 0 || ev.Content != "" || ev.Reasoning != "" || len(ev.Logprobs) > 0 {
			if err := st.sse.Event(chatDeltaChunk(st.id, st.created, st.model, ev, "")); err != nil {
				return err
			}
		}
		return st.sendStructured(ev.ToolCalls)
	}
	content, calls := st.tools.Feed(ev.Content)
	ev.Content = content
	if err := st.sendParsed(ev, calls); err != nil {
		return err
	}
	return st.sendStructured(ev.ToolCalls)
}

// sendStructured sends a Generator's structured calls (a remote provider's), keeping their ids.
func (st *stream) sendStructured(calls []ports.ToolCall) error {
	if !st.parallel && st.calls+len(calls) > 1 {
		calls = calls[:max(0, 1-st.calls)]
	}
	if len(calls) == 0 {
		return nil
	}
	err := st.sse.Event(chatToolCallsChunk(st.id, st.created, st.model, structuredCallsOf(calls, st.newID, true, st.calls)))
	st.calls += len(calls)
	return err
}

// sendParsed sends the content and reasoning that are final (and the tokens' logprobs, even when the parser
// holds their text), then the calls that are complete.
func (st *stream) sendParsed(ev ports.GenerateEvent, calls []toolcall.Call) error {
	if ev.Content != "" || ev.Reasoning != "" || len(ev.Logprobs) > 0 {
		if err := st.sse.Event(chatDeltaChunk(st.id, st.created, st.model, ev, "")); err != nil {
			return err
		}
	}
	if !st.parallel && st.calls+len(calls) > 1 {
		calls = calls[:max(0, 1-st.calls)]
	}
	if len(calls) == 0 {
		return nil
	}
	err := st.sse.Event(chatToolCallsChunk(st.id, st.created, st.model, toolCallsOf(calls, st.newID, true, st.calls)))
	st.calls += len(calls)
	return err
}

func (st *stream) finish(res ports.GenerateResult, includeUsage bool) error {
	if err := st.start(); err != nil {
		return err
	}
	fr := res.FinishReason
	if st.tools != nil {
		// The answer has ended: a block still open, or whitespace held back, is settled now.
		content, calls := st.tools.Flush()
		if err := st.sendParsed(ports.GenerateEvent{Content: content}, calls); err != nil {
			return err
		}
	}
	fr = toolFinish(fr, st.calls > 0)
	var err error
	if st.chat {
		err = st.sse.Event(chatFinishChunk(st.id, st.created, st.model, fr))
	} else {
		err = st.sse.Event(completionTextChunk(st.id, st.created, st.model, "", &fr))
	}
	if err != nil {
		return err
	}
	if includeUsage {
		if st.chat {
			err = st.sse.Event(chatUsageChunk(st.id, st.created, res))
		} else {
			err = st.sse.Event(completionUsageChunk(st.id, st.created, res))
		}
		if err != nil {
			return err
		}
	}
	return st.sse.Data("[DONE]")
}

// Work registers h as a generation route on the host, behind the guards of this API's own generations:
// recovery, the browser checks and a JSON body (415), authentication, and the drain — all refused in
// OpenAI's shape. An API built on this one (adapters/openai/responses) registers its route with it.
func (s *Server) Work(pattern string, h http.HandlerFunc) { s.work(pattern, h) }

// Generator is the generator this API serves.
func (s *Server) Generator() ports.Generator { return s.gen }

// Options are this API's options, defaults filled in (Now, NewID, MaxBodyBytes, BodyTimeout).
func (s *Server) Options() Options { return s.opts }

// Metrics are the host's metrics.
func (s *Server) Metrics() *httpapi.Metrics { return s.metrics }

// ReadBody reads a request body within the configured size and time limits (see readBody).
func (s *Server) ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return s.readBody(w, r)
}

// Fail maps err to its API error, logs a server-side failure, and answers in OpenAI's shape.
func (s *Server) Fail(w http.ResponseWriter, r *http.Request, err error) { s.fail(w, r, err) }

// Cancelled accounts for a generation whose client went away before its response ended (499).
func (s *Server) Cancelled(w http.ResponseWriter, r *http.Request, err error, start time.Time, streamed bool) {
	s.cancelled(w, r, err, start, streamed)
}

// WriteJSON sends v with status, or OpenAI's 500 when v cannot be encoded.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// DecodeJSON unmarshals a request body into v, with the errors (400) that name the offending field.
func DecodeJSON(body []byte, v any) error { return decodeJSON(body, v) }

// BadRequest is a 400 naming the offending parameter.
func BadRequest(param, format string, args ...any) *Error { return badRequest(param, format, args...) }

// Unsupported is a 400 (unsupported_parameter) for a value higgs cannot honour.
func Unsupported(param, why string) *Error { return unsupported(param, why) }

// ChatLogprobsOf is the chat completions logprobs of lps (nil when there are none).
func ChatLogprobsOf(lps []ports.TokenLogprob) *ChatLogprobs { return chatLogprobsOf(lps) }
