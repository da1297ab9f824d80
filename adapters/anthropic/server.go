package anthropic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

// Options configure the adapter.
type Options struct {
	// Host is the server this API registers its routes on, beside the other APIs mounted there (whose metrics
	// it feeds); nil means a server of its own, serving this API alone.
	Host *httpapi.Server
	// Keys, when any is set, are required as "x-api-key: KEY" or "Authorization: Bearer KEY"; each tenant
	// key is a tenant of its own (ports.GenerateRequest.Tenant). nil: no keys, one tenant.
	Keys *httpapi.Keys
	// MaxBodyBytes bounds request bodies (default httpapi.DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// BodyTimeout bounds the time a client may take to send a body (default httpapi.DefaultBodyTimeout).
	BodyTimeout time.Duration
	// RequestTimeout bounds a generation request (0: no limit).
	RequestTimeout time.Duration
	Log            zerolog.Logger
	// NewID makes responses reproducible in tests; nil means random ids.
	NewID func() string
}

// Server is the Messages API over a ports.Generator.
type Server struct {
	gen     ports.Generator
	opts    Options
	log     zerolog.Logger
	host    *httpapi.Server
	metrics *httpapi.Metrics
}

// New builds the adapter and registers its routes on opts.Host (or a server of its own), wrong methods
// included (answered 405 in this API's shape).
func New(gen ports.Generator, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = httpapi.DefaultMaxBodyBytes
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = httpapi.DefaultBodyTimeout
	}
	if opts.NewID == nil {
		opts.NewID = randomID
	}
	host := opts.Host
	if host == nil {
		host = httpapi.New(gen, httpapi.Options{Log: opts.Log})
	}
	s := &Server{gen: gen, opts: opts, log: opts.Log, host: host, metrics: host.Metrics()}
	// The browser checks come before authentication: a CORS preflight carries no key.
	wrap := func(h http.HandlerFunc) http.Handler { return s.recoverer(host.Guard(s.authenticate(h), refuse)) }
	post := func(h http.HandlerFunc) http.Handler { return s.recoverer(host.GuardJSON(s.authenticate(h), refuse)) }
	// Generations are the host's work: drained with every API's, refused in this API's shape.
	host.Handle("POST /v1/messages", post(host.Work(http.HandlerFunc(s.messages), refuseDraining).ServeHTTP))
	host.Handle("POST /v1/messages/count_tokens", post(s.countTokens))
	host.Handle("/v1/messages", wrap(methodNotAllowed))
	host.Handle("/v1/messages/count_tokens", wrap(methodNotAllowed))
	return s
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ServeHTTP serves the host this API is registered on: its routes and those of every API beside it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.host.ServeHTTP(w, r) }

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "POST")
	writeError(w, &Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
		Message: fmt.Sprintf("method %s is not allowed on %s; use POST", r.Method, r.URL.Path)})
}

// refuse answers a request the browser checks refuse (httpapi.Guard) in this API's shape: a Host not
// answered to is a permission_error, as Anthropic types its 403s.
func refuse(w http.ResponseWriter, status int, _, message string) {
	typ := "invalid_request_error"
	if status == http.StatusForbidden {
		typ = "permission_error"
	}
	writeError(w, &Error{Status: status, Type: typ, Message: message})
}

// writeJSON sends v with status, without HTML escaping (model output is full of <think> and <tool_call>).
func writeJSON(w http.ResponseWriter, status int, v any) {
	httpapi.WriteJSON(w, status, v, []byte(`{"type":"error","error":{"type":"api_error","message":"internal server error"}}`))
}

func marshal(v any) ([]byte, error) { return httpapi.Marshal(v) }

func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, e.body(w.Header().Get("request-id")))
}

// fail maps err, logs server-side failures, and answers. A full queue, a model loading and a request cut by
// shutdown are no failures.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := ErrorFor(err)
	if e.Status >= 500 && e.Status != 529 && e.Status != http.StatusServiceUnavailable {
		s.log.Error().Err(err).Str("path", r.URL.Path).Int("status", e.Status).Msg("request failed")
	}
	writeError(w, e)
}

// recoverer gives every answer its request-id header (errors repeat it in their body) and answers a panic
// with a logged 500 in this API's shape.
func (s *Server) recoverer(next http.Handler) http.Handler {
	rec := httpapi.Recover(s.log, next, func(w http.ResponseWriter) {
		writeError(w, &Error{Status: http.StatusInternalServerError, Type: "api_error", Message: "internal server error"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("request-id", "req_"+s.opts.NewID())
		rec.ServeHTTP(w, r)
	})
}

// authenticate takes the key as Anthropic's SDKs send it (x-api-key) or as a Bearer token (what
// ANTHROPIC_AUTH_TOKEN clients send), compared in constant time, before the body is read, and hands the
// handler the caller's identity (httpapi.IdentityOf).
func (s *Server) authenticate(next http.HandlerFunc) http.HandlerFunc {
	if !s.opts.Keys.Required() {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("x-api-key")
		if key == "" {
			key = httpapi.BearerToken(r.Header.Get("Authorization"))
		}
		id, ok := s.opts.Keys.Identify(key)
		if !ok {
			httpapi.RefuseUnread(w, r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="higgs"`)
			writeError(w, &Error{Status: http.StatusUnauthorized, Type: "authentication_error",
				Message: "missing or incorrect API key: send x-api-key: <key> (or Authorization: Bearer <key>)"})
			return
		}
		next(w, r.WithContext(httpapi.WithIdentity(r.Context(), id)))
	}
}

func (s *Server) read(w http.ResponseWriter, r *http.Request, parse func([]byte) (Request, error)) (Request, bool) {
	body, err := httpapi.ReadBody(w, r, s.opts.MaxBodyBytes, s.opts.BodyTimeout)
	var mbe *http.MaxBytesError
	if err != nil && !errors.As(err, &mbe) && !errors.Is(err, httpapi.ErrBodyTimeout) {
		err = invalid("", "could not read the request body: %v", err)
	}
	if err != nil {
		s.fail(w, r, err)
		return Request{}, false
	}
	req, err := parse(body)
	if err != nil {
		s.fail(w, r, err)
		return Request{}, false
	}
	return req, true
}

func (s *Server) counter() (ports.TokenCounter, error) {
	tc, ok := s.gen.(ports.TokenCounter)
	if !ok {
		return nil, &Error{Status: http.StatusNotImplemented, Type: "api_error", Message: "this server cannot count tokens"}
	}
	return tc, nil
}

type tokenCount struct {
	InputTokens int `json:"input_tokens"`
}

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	req, ok := s.read(w, r, ParseCountTokens)
	if !ok {
		return
	}
	tc, err := s.counter()
	if err == nil {
		var n int
		if n, err = tc.CountTokens(r.Context(), req.Gen); err == nil {
			writeJSON(w, http.StatusOK, tokenCount{InputTokens: n})
			return
		}
	}
	s.fail(w, r, err)
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	req, ok := s.read(w, r, ParseMessages)
	if !ok {
		return
	}
	req.Gen.Tenant = httpapi.IdentityOf(r.Context()).Tenant
	ctx := r.Context()
	if s.opts.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
		defer cancel()
	}
	id := "msg_" + s.opts.NewID()
	req.Gen.ID = id // the live view names the generation as the answer does
	var firstOnce sync.Once
	first := func() { firstOnce.Do(func() { s.metrics.ObserveTTFT(r.Pattern, time.Since(start)) }) }
	observe := s.metrics.ObserveResult
	if !req.Stream {
		res, err := s.gen.Generate(ctx, req.Gen, func(ports.GenerateEvent) error { first(); return nil })
		observe(res)
		if err != nil {
			s.failGeneration(w, r, ctx, nil, err, start)
			return
		}
		writeJSON(w, http.StatusOK, MessageOf(id, req, res, s.opts.NewID))
		return
	}
	// message_start carries the prompt's token count, known before the first token only by counting. A
	// generator that cannot count this request (errors.ErrUnsupported: a model routed to a remote provider)
	// leaves it 0 there; message_delta's usage carries the count the generation reports.
	st := &stream{w: w, id: id, model: req.Gen.Model, newID: s.opts.NewID, parallel: req.Parallel}
	if tc, err := s.counter(); err == nil {
		if st.inputTokens, err = tc.CountTokens(ctx, req.Gen); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			s.failGeneration(w, r, ctx, st, err, start)
			return
		}
	}
	if ms := s.gen.Models(); st.model == "" && len(ms) > 0 {
		st.model = ms[0].ID // the default model; a named one (local or routed) is the one asked for
	}
	if req.ParseTools {
		st.tools = &toolcall.Parser{Types: toolcall.ParamTypesOf(req.Gen.Chat.Tools)}
	}
	res, err := s.gen.Generate(ctx, req.Gen, func(ev ports.GenerateEvent) error {
		first()
		return st.send(ev)
	})
	observe(res)
	if err != nil {
		s.failGeneration(w, r, ctx, st, err, start)
		return
	}
	if err := st.finish(res); err != nil {
		httpapi.Cancelled(s.log, w, r, err, start, true)
	}
}

// failGeneration ends a generation that failed (st is its stream, nil when not streamed). A client that went
// away is only accounted for (499, debug): nothing more can reach it, and its leaving is no failure.
// Otherwise the error is answered: with its status before the stream began, as Anthropic's terminal `error`
// event after; a request cut by shutdown counts as the 503 it would have been answered.
func (s *Server) failGeneration(w http.ResponseWriter, r *http.Request, ctx context.Context, st *stream, err error, start time.Time) {
	if httpapi.ClientGone(r) && errors.Is(err, context.Canceled) || st != nil && st.started && st.sse.Err() != nil {
		httpapi.Cancelled(s.log, w, r, err, start, st != nil)
		return
	}
	err = httpapi.Cause(ctx, err)
	if st == nil || !st.started {
		s.fail(w, r, err)
		return
	}
	e := ErrorFor(err)
	if errors.Is(err, httpapi.ErrShutdown) {
		httpapi.MarkStatus(w, e.Status)
	} else if e.Status >= 500 && !errors.Is(err, context.Canceled) {
		s.log.Error().Err(err).Str("path", r.URL.Path).Msg("stream failed")
	}
	_ = st.fail(e, w.Header().Get("request-id"))
}
