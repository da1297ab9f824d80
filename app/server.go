package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/wire"
	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/higgs-go/higgs/adapters/anthropic"
	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/adapters/openai/responses"
	"github.com/higgs-go/higgs/adapters/remote"
	"github.com/higgs-go/higgs/app/fleet"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/route"
	"github.com/higgs-go/higgs/app/serve"
	"github.com/higgs-go/higgs/ports"
)

// ServeSet is the wire provider set of higgsd.
var ServeSet = wire.NewSet(ProvideFleet, ProvideRouting, ProvideGenerator, ProvideRoutedEvents,
	wire.Bind(new(ports.SystemReporter), new(*fleet.Fleet)), ProvideHTTP,
	ProvideKeys, ProvideAPI, ProvideResponses, ProvideMessages,
	ProvideLoader, NewServer)

// LoadFunc loads one model's engine; progress (may be nil) receives work done and total (LoadModels counts
// steps). The returned close releases the model.
type LoadFunc func(ctx context.Context, progress func(done, total int64)) (serve.Engine, func() error, error)

// Loader gives each configured model its LoadFunc.
type Loader func(ModelSpec) LoadFunc

// ProvideFleet builds the models' fleet from the configuration: today's one model, or several loaded on
// demand under one memory budget.
func ProvideFleet(cfg Config, load Loader, log zerolog.Logger) (*fleet.Fleet, error) {
	specs := cfg.ModelSpecs()
	ms := make([]fleet.Model, len(specs))
	for i, s := range specs {
		ms[i] = fleet.Model{Name: s.Name, Aliases: s.Aliases, Serve: cfg.ServeConfig(), Sampling: s.Sampling,
			Load: fleet.LoadFunc(load(s))}
		if len(specs) > 1 {
			ms[i].KeepAlive = cfg.KeepAliveOf(s)
		}
	}
	return fleet.New(ms, fleet.Options{MemoryBudget: cfg.MemoryBudget}, log)
}

// Routing is what the APIs call: the local models' fleet, or, with routes configured, a route.Router over it
// and the providers, whose event stream adds the routed requests' to the fleet's.
type Routing struct {
	Generator ports.Generator
	Events    ports.EventSource
}

// ProvideRouting builds the router when --route is given, with one remote generator per --provider (its key
// from LoadConfig); without routes the APIs call f directly.
func ProvideRouting(cfg Config, f *fleet.Fleet, log zerolog.Logger) (*Routing, error) {
	providers, routes, err := cfg.Routing()
	if err != nil {
		return nil, err
	}
	if len(routes) == 0 {
		return &Routing{Generator: f, Events: f.Events()}, nil
	}
	gens := make(map[string]ports.Generator, len(providers))
	for _, p := range providers {
		opts := remote.Options{Name: p.Name, BaseURL: p.URL, Key: cfg.providerKeys[p.Name]}
		switch p.Format {
		case FormatAnthropic:
			gens[p.Name] = remote.NewAnthropic(opts)
		default:
			gens[p.Name] = remote.NewOpenAI(opts)
		}
		log.Info().Str("provider", p.Name).Str("format", p.Format).Str("url", p.URL).Bool("key", opts.Key != "").Msg("provider")
	}
	rs := make([]route.Route, len(routes))
	for i, r := range routes {
		rs[i] = route.Route{Pattern: r.Pattern, Provider: r.Provider, Gen: gens[r.Provider]}
		log.Info().Str("route", r.Pattern).Str("provider", r.Provider).Msg("route")
	}
	rt, err := route.New(f, f.Events(), rs, log)
	if err != nil {
		return nil, err
	}
	return &Routing{Generator: rt, Events: rt.Events()}, nil
}

// ProvideGenerator is the generator the APIs call.
func ProvideGenerator(r *Routing) ports.Generator { return r.Generator }

// ProvideRoutedEvents is the event stream the page and /v1/events serve.
func ProvideRoutedEvents(r *Routing) ports.EventSource { return r.Events }

// ProvideHTTP builds the HTTP server both APIs are registered on, side by side: one listener, one set of
// metrics, one browser policy (the Host names answered to, the CORS origins).
func ProvideHTTP(cfg Config, gen ports.Generator, log zerolog.Logger) *httpapi.Server {
	return httpapi.New(gen, httpapi.Options{Log: log, Browser: cfg.BrowserPolicy()})
}

// ProvideKeys builds the keys both APIs accept, one tenant each, and the operator's.
func ProvideKeys(cfg Config) (*httpapi.Keys, error) { return cfg.Keys() }

// ProvideAPI builds the OpenAI-compatible HTTP adapter over gen on host, with the page's event stream and
// the system report.
func ProvideAPI(cfg Config, gen ports.Generator, events ports.EventSource, system ports.SystemReporter, host *httpapi.Server, keys *httpapi.Keys, log zerolog.Logger) *openai.Server {
	return openai.New(gen, openai.Options{Host: host, Keys: keys, MaxBodyBytes: cfg.MaxBodyBytes,
		BodyTimeout: cfg.BodyTimeout, RequestTimeout: cfg.RequestTimeout, Log: log, Events: events, System: system})
}

// ProvideResponses builds the OpenAI Responses API (POST /v1/responses) beside api, on api's host.
func ProvideResponses(api *openai.Server) *responses.Server { return responses.New(api) }

// ProvideMessages builds the Anthropic Messages API adapter over gen on host.
func ProvideMessages(cfg Config, gen ports.Generator, host *httpapi.Server, keys *httpapi.Keys, log zerolog.Logger) *anthropic.Server {
	return anthropic.New(gen, anthropic.Options{Host: host, Keys: keys, MaxBodyBytes: cfg.MaxBodyBytes,
		BodyTimeout: cfg.BodyTimeout, RequestTimeout: cfg.RequestTimeout, Log: log})
}

// ProvideLoader loads each configured model with LoadModels.
func ProvideLoader(cfg Config, log zerolog.Logger) Loader {
	return func(spec ModelSpec) LoadFunc { return loadModel(cfg.modelConfig(spec), log) }
}

// loadModel loads one model with LoadModels.
func loadModel(mc models.ModelConfig, log zerolog.Logger) LoadFunc {
	return func(ctx context.Context, progress func(done, total int64)) (serve.Engine, func() error, error) {
		m, err := models.LoadModels(ctx, mc, log, progress)
		if err != nil {
			return serve.Engine{}, nil, err
		}
		closeFn := m.Close
		if closeFn == nil {
			closeFn = func() error { return nil }
		}
		return serve.EngineFromModels(m), closeFn, nil
	}
}

// ErrLoadModels is wrapped when Run stops because the configured models could not be loaded or served (a
// missing directory, a corrupt checkpoint, an unknown architecture, a block size the drafter cannot do): a
// problem with the input that higgsd reports with exit status 2, like an invalid flag.
var ErrLoadModels = errors.New("load models")

// ErrCut is wrapped when Run stopped after shutdown's deadline cut requests that were still running (each
// ended with its API's terminal event); higgsd reports it with exit status 3.
var ErrCut = errors.New("shutdown cut requests still running at the deadline")

// cutGrace is how long shutdown waits, after the deadline, for the requests it cut to end with their API's
// terminal event: a cancelled generation stops within one decoding round.
const cutGrace = 5 * time.Second

// Server runs higgsd: it listens first (so /health can say "loading"), loads the models, serves, and shuts
// down gracefully.
type Server struct {
	cfg   Config
	fleet *fleet.Fleet
	host  *httpapi.Server
	log   zerolog.Logger
	// OnListen, when set, is called with the bound address (tests listen on port 0).
	OnListen func(net.Addr)
	// Progress, when set, replaces the terminal progress bar / log lines while loading.
	Progress func(done, total int64)
}

// NewServer assembles the runner: host serves both APIs (OpenAI's, with its Responses route, and Anthropic's),
// which registered their routes on it when built (they are parameters so that the wiring builds them); host
// drains both at shutdown.
func NewServer(cfg Config, f *fleet.Fleet, host *httpapi.Server, _ *openai.Server, _ *responses.Server, _ *anthropic.Server, log zerolog.Logger) *Server {
	f.SetMetrics(host.Metrics())
	return &Server{cfg: cfg, fleet: f, host: host, log: log}
}

// Run serves until ctx ends (SIGINT/SIGTERM in higgsd), then drains every API on the listener: it stays open,
// /health answers 503 draining and new generations (OpenAI's and the Messages API's) are refused with 503
// and Retry-After while those in flight finish for up to ShutdownTimeout; the ones still running then are
// cut, each ended with its API's terminal event, and Run returns ErrCut (wrapped) after a log line with the
// counts. Then it stops accepting connections.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr())
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr(), err)
	}
	base, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	hs := &http.Server{Handler: s.host, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return base }}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	s.log.Info().Str("addr", ln.Addr().String()).Msg("listening (models loading)")
	if s.cfg.ExposedWithoutKey() {
		s.log.Warn().Str("host", s.cfg.Host).
			Msg("listening beyond this machine without --api-key: anyone who can reach the port can use the model; set --api-key")
	}
	if s.OnListen != nil {
		s.OnListen(ln.Addr())
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan error, 1)
	if n := len(s.cfg.ModelSpecs()); n > 1 {
		// Several models load on their first request.
		loadDone <- nil
		s.log.Info().Int("models", n).Dur("keep_alive", s.cfg.KeepAlive).Str("addr", ln.Addr().String()).
			Msg("serving; each model loads on its first request")
	} else {
		go func() {
			progress := s.Progress
			if progress == nil {
				progress = newProgress(s.log)
			}
			start := time.Now()
			err := s.fleet.Load(loadCtx, progress)
			if err == nil {
				s.log.Info().Dur("took", time.Since(start)).Str("addr", ln.Addr().String()).Msg("serving")
			}
			loadDone <- err
		}()
	}
	go s.fleet.Run(loadCtx)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("serve: %w", err)
	case err := <-loadDone:
		if err != nil {
			runErr = fmt.Errorf("%w: %w", ErrLoadModels, err)
			break
		}
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			runErr = fmt.Errorf("serve: %w", err)
		}
	}
	stopLoad()
	if err := s.shutdown(hs, cancelAll); err != nil {
		runErr = errors.Join(runErr, err)
	}
	// Close waits for a load under way (shutdown during loading), so that its memory is freed too.
	if err := s.fleet.Close(); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("close models: %w", err))
	}
	return runErr
}

// InFlight is the number of generation requests running now, over both APIs.
func (s *Server) InFlight() int { return s.host.InFlight() }

// shutdown drains both APIs, logs what became of the requests in flight, and closes the listener; it returns
// ErrCut (wrapped, with the count) when some were cut at the deadline.
func (s *Server) shutdown(hs *http.Server, cancelAll context.CancelFunc) error {
	s.log.Info().Dur("deadline", s.cfg.ShutdownTimeout).Msg("shutting down: draining (health 503, no new generations); finishing in-flight requests")
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	rep := s.host.Drain(ctx, cutGrace)
	ev := s.log.Info()
	msg := "drained: every request in flight finished"
	if rep.Cut > 0 {
		ev = s.log.Warn()
		msg = "drained: requests still running at the deadline were cut, each ended with its API's error event"
	}
	ev.Int("in_flight", rep.InFlight).Int("finished", rep.Finished).Int("cut", rep.Cut).Int("unended", rep.Unended).
		Int("refused", rep.Refused).Dur("took", rep.Took).Msg(msg)
	// What is left are requests that generate nothing (count_tokens, /metrics), idle connections, finished
	// responses being written, and cut handlers that outlived the grace (closed with their connection).
	cancelAll()
	ctx3, cancel3 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel3()
	if err := hs.Shutdown(ctx3); err != nil {
		_ = hs.Close()
	}
	s.log.Info().Msg("stopped")
	if rep.Cut > 0 {
		return fmt.Errorf("%w: %d of %d", ErrCut, rep.Cut, rep.InFlight)
	}
	return nil
}

// newProgress shows a progress bar on a terminal and structured log lines (every 10%) otherwise.
func newProgress(log zerolog.Logger) func(done, total int64) {
	if term.IsTerminal(int(os.Stderr.Fd())) {
		var bar *progressbar.ProgressBar
		return func(done, total int64) {
			if bar == nil {
				bar = progressbar.Default(total, "loading model")
			}
			_ = bar.Set64(done)
			if done >= total {
				_ = bar.Finish()
			}
		}
	}
	last := int64(-1)
	return func(done, total int64) {
		if total <= 0 {
			return
		}
		pct := done * 100 / total
		if pct/10 == last/10 && done < total {
			return
		}
		last = pct
		log.Info().Int64("done", done).Int64("total", total).Int64("percent", pct).Msg("loading model")
	}
}
