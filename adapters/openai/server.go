package openai

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

// Options configure the HTTP adapter.
type Options struct {
	// APIKey, when set, is required as "Authorization: Bearer <key>" on /v1/ routes.
	APIKey string
	// MaxBodyBytes bounds request bodies (default 4 MiB).
	MaxBodyBytes int64
	// BodyTimeout bounds the time a client may take to send a request body (default DefaultBodyTimeout);
	// a slower body is answered 408 and the connection closed.
	BodyTimeout time.Duration
	// RequestTimeout bounds a generation request (0: no limit).
	RequestTimeout time.Duration
	// Registry receives the metrics and is served on /metrics; nil means a fresh registry.
	Registry *prometheus.Registry
	Log      zerolog.Logger
	// Events, when set, is served as GET /v1/events and feeds the live view of the page at /.
	Events ports.EventSource
	// Now and NewID make responses reproducible in tests; nil means the clock and random ids.
	Now   func() time.Time
	NewID func() string
}

// Readier is an optional Generator ability: while Ready is false, /health answers 503 loading.
type Readier interface{ Ready() bool }

// Degrader is an optional Generator ability: a non-nil Degraded makes /health answer 503 degraded with
// its text (a lost rank of a model split across processes).
type Degrader interface{ Degraded() error }

// QueueDepther is an optional Generator ability: the number of queued requests, exported as a gauge.
type QueueDepther interface{ QueueDepth() int }

// PrefixCacheReporter is an optional Generator ability: the prefix cache's account, exported as the
// higgs_prefix_cache_* series (all zero while the cache is off).
type PrefixCacheReporter interface{ PrefixCacheStats() ports.PrefixCacheStats }

// Server is the OpenAI-compatible HTTP API over a ports.Generator.
type Server struct {
	gen     ports.Generator
	opts    Options
	log     zerolog.Logger
	metrics *metrics
	reg     *prometheus.Registry
	mux     *http.ServeMux
	handler http.Handler
	drain   *drainer
}

// DefaultMaxBodyBytes is the request body limit when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 4 << 20

// DefaultBodyTimeout is the body read limit when Options.BodyTimeout is 0.
const DefaultBodyTimeout = 30 * time.Second

// New builds the API's handler.
func New(gen ports.Generator, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = randomID
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var depth func() int
	if q, ok := gen.(QueueDepther); ok {
		depth = q.QueueDepth
	}
	prefix, _ := gen.(PrefixCacheReporter)
	s := &Server{gen: gen, opts: opts, log: opts.Log, reg: reg, metrics: newMetrics(reg, depth, prefix), drain: newDrainer()}
	mux := http.NewServeMux()
	s.mux = mux
	// Authentication is per route (it only guards /v1/ paths), so that a mounted API can answer its own way.
	handle := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.authenticate(h)) }
	handle("POST /v1/chat/completions", s.chat)
	handle("POST /v1/completions", s.completion)
	handle("GET /v1/models", s.models)
	handle("GET /v1/models/{id...}", s.model)
	handle("GET /health", s.health)
	handle("GET /v1/events", s.events)
	mux.HandleFunc("GET /{$}", s.page)
	mux.Handle("GET /ui/", pageAssets())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// The mux answers a wrong method with a plain-text 405; these catch-alls answer in OpenAI's shape.
	for path, allow := range map[string]string{"/v1/chat/completions": "POST", "/v1/completions": "POST",
		"/v1/models": "GET", "/v1/models/{id...}": "GET", "/health": "GET", "/metrics": "GET", "/v1/events": "GET"} {
		handle(path, methodNotAllowed(allow))
	}
	handle("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	// instrument is outermost so that it records the 500 the recoverer writes after a panic.
	s.handler = s.instrument(s.recoverer(mux))
	return s
}

// Mount serves another API's handler (the Anthropic Messages API) on pattern beside this one's routes, so
// that it shares the listener, the request metrics and the panic recovery. The mounted handler
// authenticates requests itself. Mount before serving.
func (s *Server) Mount(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ObserveTTFT records a mounted API's time to first token for endpoint (its route pattern).
func (s *Server) ObserveTTFT(endpoint string, d time.Duration) {
	s.metrics.ttft.WithLabelValues(endpoint).Observe(d.Seconds())
}

// ObserveResult accounts a mounted API's finished generation in the token and speculation counters.
func (s *Server) ObserveResult(res ports.GenerateResult) { s.metrics.observeResult(res) }

// Registry returns the registry the metrics are registered in.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

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

// writeJSON sends v with status. The Content-Type matters: OpenAI's SDKs refuse JSON sent as text/plain.
func writeJSON(w http.ResponseWriter, status int, v any) {
	WriteJSON(w, status, v, []byte(`{"error":{"message":"internal server error","type":"server_error","param":null,"code":"internal_error"}}`))
}

// WriteJSON sends v as JSON (MarshalJSON) with status, or fallback with a 500 when v cannot be encoded:
// what every HTTP API of higgsd answers with.
func WriteJSON(w http.ResponseWriter, status int, v any, fallback []byte) {
	b, err := MarshalJSON(v)
	if err != nil {
		b, status = fallback, http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func marshal(v any) ([]byte, error) { return MarshalJSON(v) }

// MarshalJSON is json.Marshal without HTML escaping: model output is full of <think> and <|im_end|>, which
// clients should read as written.
func MarshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, e.body())
}

// fail maps err, logs server-side failures, and answers.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := ErrorFor(err)
	if e.Status >= 500 {
		s.log.Error().Err(err).Str("path", r.URL.Path).Int("status", e.Status).Msg("request failed")
	}
	writeError(w, e)
}

// statusWriter records the status for metrics and keeps Flush reachable through Unwrap.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// StatusCancelled is the status recorded (in higgs_requests_total) for a request cancelled before its
// response ended: the client went away, or shutdown cancelled it. 499 is nginx's "client closed request".
const StatusCancelled = 499

// markStatus makes every statusWriter around w record code, whatever was written before (a stream that
// started with 200 and was then cancelled counts as cancelled).
func markStatus(w http.ResponseWriter, code int) {
	for {
		if sw, ok := w.(*statusWriter); ok {
			sw.status = code
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// cancelled accounts for a generation whose request context ended before its response did.
func (s *Server) cancelled(w http.ResponseWriter, r *http.Request, err error, start time.Time, streamed bool) {
	markStatus(w, StatusCancelled)
	s.log.Debug().Err(err).Str("path", r.URL.Path).Bool("streamed", streamed).Dur("after", time.Since(start)).
		Msg("generation cancelled: the client went away or the server is shutting down")
}

func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			endpoint := r.Pattern
			if endpoint == "" || endpoint == "/" {
				endpoint = "other"
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			s.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
			s.metrics.latency.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(sw, r)
	})
}

// recoverer turns a panic into a logged 500 so that none reaches a client as a dropped connection.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		defer RecoverPanic(s.log, r, func() {
			if sw.status == 0 {
				writeError(sw, &Error{Status: http.StatusInternalServerError, Type: "server_error",
					Code: "internal_error", Message: "internal server error"})
			}
		})
		next.ServeHTTP(sw, r)
	})
}

// RecoverPanic, deferred by a handler, turns a panic into a logged error and calls answer (which writes the
// API's 500 unless the response has begun), so that no panic reaches a client as a dropped connection;
// http.ErrAbortHandler, the deliberate abort, is re-raised. Both APIs' recoverers defer it.
func RecoverPanic(log zerolog.Logger, r *http.Request, answer func()) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	log.Error().Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Str("path", r.URL.Path).
		Msg("handler panicked")
	answer()
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.drain.isDraining() {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
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
		if c.ID == id {
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
	if !s.drain.enter() {
		s.fail(w, r, errShuttingDown)
		return
	}
	defer s.drain.leave()
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
	var firstOnce sync.Once
	first := func() {
		firstOnce.Do(func() { s.metrics.ttft.WithLabelValues(r.Pattern).Observe(time.Since(start).Seconds()) })
	}
	if !req.Stream {
		res, err := s.gen.Generate(ctx, req.Gen, func(ports.GenerateEvent) error { first(); return nil })
		s.metrics.observeResult(res)
		if err != nil {
			if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
				s.cancelled(w, r, err, start, false)
			}
			s.fail(w, r, err)
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
	s.metrics.observeResult(res)
	if err != nil {
		gone := r.Context().Err() != nil && errors.Is(err, context.Canceled)
		if gone || st.sse != nil && st.sse.Err() != nil {
			s.cancelled(w, r, err, start, true)
		}
		if !st.started {
			s.fail(w, r, err)
			return
		}
		if st.sse.Err() != nil {
			// The client went away: nothing more can reach it, and its leaving is no server failure.
			return
		}
		// Headers are gone: report in the stream (as vLLM does), then end it.
		e := ErrorFor(err)
		if e.Status >= 500 && !errors.Is(err, context.Canceled) {
			s.log.Error().Err(err).Str("path", r.URL.Path).Msg("stream failed")
		}
		_ = st.sse.Event(e.body())
		_ = st.sse.done()
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
	sse     *SSEWriter
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
	st.sse = StartSSE(st.w)
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
		return st.sse.Event(completionTextChunk(st.id, st.created, st.model, ev.Content, nil))
	}
	if st.tools == nil {
		return st.sse.Event(chatDeltaChunk(st.id, st.created, st.model, ev, ""))
	}
	content, calls := st.tools.Feed(ev.Content)
	ev.Content = content
	return st.sendParsed(ev, calls)
}

// sendParsed sends the content and reasoning that are final, then the calls that are complete.
func (st *stream) sendParsed(ev ports.GenerateEvent, calls []toolcall.Call) error {
	if ev.Content != "" || ev.Reasoning != "" {
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
		fr = toolFinish(fr, st.calls > 0)
	}
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
	return st.sse.done()
}
