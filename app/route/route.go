// Package route is higgsd's router: a ports.Generator that sends a request whose model a route matches to
// that route's provider (a remote generator, adapters/remote) and every other request to the local
// generator it wraps. The inbound HTTP adapters call it as they call the local one, so a request in one wire
// format is answered by a provider of either format.
package route

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/ports"
)

// Route sends the models Pattern matches (the whole name) to Provider.
type Route struct {
	// Pattern is the route's regular expression as configured; New anchors it at both ends.
	Pattern string
	// Provider names the provider in logs and errors; Gen runs the requests.
	Provider string
	Gen      ports.Generator
}

type compiled struct {
	re *regexp.Regexp
	Route
}

// Router is a ports.Generator over a local generator and routes to providers, first match wins. It forwards
// the local generator's optional abilities (token counting, tokenize, embeddings, readiness, health, queue
// depth, prefix cache figures) for the models it serves; a routed model's tokens are the provider's, so
// counting, tokenizing and embedding them is refused. Safe for concurrent use.
type Router struct {
	local  ports.Generator
	routes []compiled
	log    zerolog.Logger
	events *events
	now    func() time.Time
}

var (
	_ ports.Generator       = (*Router)(nil)
	_ ports.TokenCounter    = (*Router)(nil)
	_ ports.PromptTokenizer = (*Router)(nil)
	_ ports.TextEmbedder    = (*Router)(nil)
)

// New builds the router. localEvents (may be nil) is the local generator's event stream, which the router's
// Events merges with the start and end events of routed requests. A pattern that does not compile is an
// error naming it.
func New(local ports.Generator, localEvents ports.EventSource, routes []Route, log zerolog.Logger) (*Router, error) {
	r := &Router{local: local, log: log, events: newEvents(localEvents), now: time.Now}
	var errs []error
	for _, rt := range routes {
		re, err := regexp.Compile(`^(?:` + rt.Pattern + `)$`)
		if err != nil {
			errs = append(errs, fmt.Errorf("route %q: %w", rt.Pattern, err))
			continue
		}
		r.routes = append(r.routes, compiled{re: re, Route: rt})
	}
	return r, errors.Join(errs...)
}

// match returns the first route whose pattern matches model.
func (r *Router) match(model string) (Route, bool) {
	for _, c := range r.routes {
		if c.re.MatchString(model) {
			return c.Route, true
		}
	}
	return Route{}, false
}

// Models lists the local models: a route matches names, it does not list them.
func (r *Router) Models() []ports.ModelCard { return r.local.Models() }

// Generate runs req on the provider its model routes to, else on the local generator. A routed request is
// logged (one info line) and shown to the tenant's event subscribers as a start and an end event.
func (r *Router) Generate(ctx context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	rt, ok := r.match(req.Model)
	if !ok {
		return r.local.Generate(ctx, req, emit)
	}
	start := r.now()
	r.events.publish(req.Tenant, ports.Event{Type: "start", ID: req.ID, TimeMS: start.UnixMilli(),
		Start: &ports.StartEvent{Chat: req.Messages != nil, MaxTokens: req.MaxTokens, BlockSize: 1}})
	res, err := rt.Gen.Generate(ctx, req, emit)
	took := r.now().Sub(start)
	finish := res.FinishReason
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		finish = "cancelled"
	case err != nil:
		finish = "error"
	}
	end := &ports.EndEvent{Finish: finish, CompletionTokens: res.CompletionTokens, DurationMS: float64(took.Microseconds()) / 1e3}
	if took > 0 {
		end.TokensPerS = float64(res.CompletionTokens) / took.Seconds()
	}
	r.events.publish(req.Tenant, ports.Event{Type: "end", ID: req.ID, TimeMS: r.now().UnixMilli(), End: end})
	ev := r.log.Info()
	if err != nil {
		ev = r.log.Warn().Err(err)
	}
	ev.Str("id", req.ID).Str("model", req.Model).Str("provider", rt.Provider).Int("prompt_tokens", res.PromptTokens).
		Int("cached_tokens", res.CachedTokens).Int("completion_tokens", res.CompletionTokens).Str("finish", finish).Dur("duration", took).Msg("routed request")
	return res, err
}

// routedError refuses an operation on a routed model: a 400 naming the model (a *ports.RequestError) that
// also matches errors.ErrUnsupported, so that a caller that can do without (the Messages stream's opening
// token count) goes on.
type routedError struct{ req *ports.RequestError }

func (e *routedError) Error() string   { return e.req.Error() }
func (e *routedError) Unwrap() []error { return []error{e.req, errors.ErrUnsupported} }

func (r *Router) refuseRouted(op, model string, rt Route) error {
	return &routedError{req: &ports.RequestError{Param: "model", Message: fmt.Sprintf(
		"model %q is routed to provider %s: %s is not available for it here", model, rt.Provider, op)}}
}

// CountTokens counts with the local generator; a routed model's count is refused (see routedError).
func (r *Router) CountTokens(ctx context.Context, req ports.GenerateRequest) (int, error) {
	if rt, ok := r.match(req.Model); ok {
		return 0, r.refuseRouted("counting tokens", req.Model, rt)
	}
	tc, ok := r.local.(ports.TokenCounter)
	if !ok {
		return 0, fmt.Errorf("count tokens: %w", errors.ErrUnsupported)
	}
	return tc.CountTokens(ctx, req)
}

// Tokenize tokenizes with the local generator; a routed model is refused.
func (r *Router) Tokenize(ctx context.Context, req ports.GenerateRequest, addSpecial bool) (ports.Tokenized, error) {
	if rt, ok := r.match(req.Model); ok {
		return ports.Tokenized{}, r.refuseRouted("tokenize", req.Model, rt)
	}
	pt, ok := r.local.(ports.PromptTokenizer)
	if !ok {
		return ports.Tokenized{}, fmt.Errorf("tokenize: %w", errors.ErrUnsupported)
	}
	return pt.Tokenize(ctx, req, addSpecial)
}

// Detokenize detokenizes with the local generator; a routed model is refused.
func (r *Router) Detokenize(ctx context.Context, model string, ids []ports.Token) (string, error) {
	if rt, ok := r.match(model); ok {
		return "", r.refuseRouted("detokenize", model, rt)
	}
	pt, ok := r.local.(ports.PromptTokenizer)
	if !ok {
		return "", fmt.Errorf("detokenize: %w", errors.ErrUnsupported)
	}
	return pt.Detokenize(ctx, model, ids)
}

// Embed embeds with the local generator; a routed model is refused (embeddings are not forwarded).
func (r *Router) Embed(ctx context.Context, req ports.EmbedRequest) (ports.EmbedResult, error) {
	if rt, ok := r.match(req.Model); ok {
		return ports.EmbedResult{}, r.refuseRouted("embeddings", req.Model, rt)
	}
	em, ok := r.local.(ports.TextEmbedder)
	if !ok {
		return ports.EmbedResult{}, fmt.Errorf("embed: %w", errors.ErrUnsupported)
	}
	return em.Embed(ctx, req)
}

// Ready is the local generator's readiness (true when it has no such ability).
func (r *Router) Ready() bool {
	if rd, ok := r.local.(interface{ Ready() bool }); ok {
		return rd.Ready()
	}
	return true
}

// Degraded is the local generator's degradation (nil when it has no such ability).
func (r *Router) Degraded() error {
	if dg, ok := r.local.(interface{ Degraded() error }); ok {
		return dg.Degraded()
	}
	return nil
}

// QueueDepth is the local generator's queue depth (0 when it has no such ability).
func (r *Router) QueueDepth() int {
	if q, ok := r.local.(interface{ QueueDepth() int }); ok {
		return q.QueueDepth()
	}
	return 0
}

// PrefixCacheStats is the local generator's prefix cache account (zero when it has no such ability).
func (r *Router) PrefixCacheStats() ports.PrefixCacheStats {
	if p, ok := r.local.(interface{ PrefixCacheStats() ports.PrefixCacheStats }); ok {
		return p.PrefixCacheStats()
	}
	return ports.PrefixCacheStats{}
}

// Events is the event stream of the local generator merged with the routed requests' start and end events.
func (r *Router) Events() ports.EventSource { return r.events }
