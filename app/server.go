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
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/serve"
	"github.com/higgs-go/higgs/ports"
)

// ServeSet is the wire provider set of higgsd.
var ServeSet = wire.NewSet(ProvideServe, wire.Bind(new(ports.Generator), new(*serve.Serve)),
	wire.Bind(new(ports.SystemReporter), new(*serve.Serve)), ProvideEvents, ProvideHTTP,
	ProvideKeys, ProvideAPI, ProvideResponses, ProvideMessages,
	ProvideLoader, NewServer)

// LoadFunc loads the engine; progress (may be nil) receives work done and total (LoadModels counts steps). The returned close
// releases the models.
type LoadFunc func(ctx context.Context, progress func(done, total int64)) (serve.Engine, func() error, error)

// ProvideServe builds the Serve use case from the configuration.
func ProvideServe(cfg Config, log zerolog.Logger) (*serve.Serve, error) {
	return serve.NewServe(cfg.ServeConfig(), log)
}

// ProvideEvents exposes the live event stream of s (the web page's feed) as its port.
func ProvideEvents(s *serve.Serve) ports.EventSource { return s.Events() }

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

// ProvideLoader loads the configured models with LoadModels.
func ProvideLoader(cfg Config, log zerolog.Logger) LoadFunc {
	return func(ctx context.Context, progress func(done, total int64)) (serve.Engine, func() error, error) {
		m, err := models.LoadModels(ctx, cfg.ModelConfig(), log, progress)
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
	serve *serve.Serve
	host  *httpapi.Server
	load  LoadFunc
	log   zerolog.Logger
	// OnListen, when set, is called with the bound address (tests listen on port 0).
	OnListen func(net.Addr)
	// Progress, when set, replaces the terminal progress bar / log lines while loading.
	Progress func(done, total int64)
}

// NewServer assembles the runner: host serves both APIs (OpenAI's, with its Responses route, and Anthropic's),
// which registered their routes on it when built (they are parameters so that the wiring builds them); host
// drains both at shutdown.
func NewServer(cfg Config, serve *serve.Serve, host *httpapi.Server, _ *openai.Server, _ *responses.Server, _ *anthropic.Server, load LoadFunc, log zerolog.Logger) *Server {
	serve.SetMetrics(host.Metrics())
	return &Server{cfg: cfg, serve: serve, host: host, load: load, log: log}
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
	type loadResult struct {
		closeFn func() error
		err     error
	}
	loadDone := make(chan loadResult, 1)
	go func() {
		progress := s.Progress
		if progress == nil {
			progress = newProgress(s.log)
		}
		start := time.Now()
		eng, closeFn, err := s.load(loadCtx, progress)
		if err == nil {
			if err = s.serve.SetEngine(eng); err != nil && closeFn != nil {
				_ = closeFn()
				closeFn = nil
			}
		}
		if err == nil {
			s.log.Info().Dur("took", time.Since(start)).Str("addr", ln.Addr().String()).Msg("serving")
		}
		loadDone <- loadResult{closeFn, err}
	}()

	var runErr error
	var closeModels func() error
	loadReceived := false
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("serve: %w", err)
	case lr := <-loadDone:
		loadReceived = true
		closeModels = lr.closeFn
		if lr.err != nil {
			runErr = fmt.Errorf("%w: %w", ErrLoadModels, lr.err)
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
	if !loadReceived {
		// The loader may still be running (shutdown during loading): wait for it so its memory is freed.
		if lr := <-loadDone; lr.closeFn != nil {
			closeModels = lr.closeFn
		}
	}
	// Every generation has ended: keep what the prefix cache holds for the next start (its disk tier), before
	// the models' memory goes.
	flushCtx, stopFlush := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	if _, err := s.serve.FlushPrefixCache(flushCtx); err != nil {
		s.log.Warn().Err(err).Msg("prefix cache: flush to disk cut short")
	}
	stopFlush()
	if closeModels != nil {
		if err := closeModels(); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("close models: %w", err))
		}
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
