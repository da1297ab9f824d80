package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/ports"
)

// Options configure a Server.
type Options struct {
	// Registry receives the metrics and is served on /metrics; nil means a fresh registry. Servers given one
	// registry share its series.
	Registry *prometheus.Registry
	Log      zerolog.Logger
	// Browser is what a web page may make a browser do here (browser.go): the Host names answered to and the
	// CORS origins. Every API wraps its routes in Guard or GuardJSON.
	Browser Browser
}

// Server is the one HTTP handler higgsd listens with: every API registers its routes on it with Handle, side
// by side on one mux, behind one request instrumentation (higgs_requests_total and
// higgs_request_duration_seconds by route pattern). It serves GET /metrics itself. Each API wraps its own
// routes in its authentication, the browser checks (Guard, GuardJSON) and panic recovery (Recover), since
// only it knows its answers' shape.
type Server struct {
	mux     *http.ServeMux
	life    *lifecycle // the one shutdown lifecycle of every API's work (drain.go)
	log     zerolog.Logger
	metrics *Metrics
	reg     *prometheus.Registry
	handler http.Handler
	browser *guard
}

// New builds a Server for the APIs over gen; gen's optional abilities QueueDepther and PrefixCacheReporter
// become gauges and counters read at each scrape.
func New(gen ports.Generator, opts Options) *Server {
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var depth func() int
	if q, ok := gen.(QueueDepther); ok {
		depth = q.QueueDepth
	}
	prefix, _ := gen.(PrefixCacheReporter)
	s := &Server{mux: http.NewServeMux(), reg: reg, metrics: newMetrics(reg, depth, prefix), browser: newGuard(opts.Browser)}
	// promhttp answers its own failures; the recovery is a last resort (its 500 has no API's shape, as the
	// route belongs to none, nor has a refusal of the browser checks).
	plain := func(w http.ResponseWriter, status int, _, message string) { http.Error(w, message, status) }
	s.mux.Handle("GET /metrics", Recover(opts.Log, s.Guard(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), plain), func(w http.ResponseWriter) {
		http.Error(w, "internal server error", http.StatusInternalServerError)
	}))
	s.handler = s.instrument(s.mux)
	s.life, s.log = newLifecycle(), opts.Log
	return s
}

// Handle registers h on pattern (a ServeMux pattern). Register before serving; a pattern that conflicts
// with one already registered panics, as ServeMux.Handle does.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Metrics returns the series the APIs on this server, and the engine, report to.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Registry returns the registry the metrics are registered in.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// instrument is outermost, so that it records the 500 an API's recovery writes after a panic and the status
// MarkStatus sets.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			// r.Pattern is set by the mux on this same request; a catch-all "/" is not worth its own series.
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

// StatusCancelled is the status recorded (in higgs_requests_total) for a request whose client went away
// before its response ended (see Cancelled). 499 is nginx's "client closed request". A request cut by
// shutdown is recorded as 503.
const StatusCancelled = 499

// MarkStatus makes the Server record code for the request answered through w, whatever was written before
// (a stream that started with 200 and was then cancelled counts as cancelled). It follows Unwrap through
// the writers wrapped around the Server's own.
func MarkStatus(w http.ResponseWriter, code int) {
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
