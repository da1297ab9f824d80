package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/app/serve"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/ports"
)

// LoadFunc loads one model's engine; progress (may be nil) receives work done and total. The returned close
// releases the backend's memory.
type LoadFunc func(ctx context.Context, progress func(done, total int64)) (serve.Engine, func() error, error)

// Model is one configured model.
type Model struct {
	// Name is the id requests use. "" only in a fleet of one model, which then answers to the engine's own
	// name (the directory's, or --served-model-name) exactly as a server of one model always has.
	Name    string
	Aliases []string
	// KeepAlive is how long the model stays loaded after its last request ended; ≤ 0: until shutdown or
	// until another model needs its memory.
	KeepAlive time.Duration
	// Serve tunes the model's own Serve (its batch scheduler, queue, prefix cache).
	Serve serve.ServeConfig
	// Sampling is the model's default sampling, in place of the API's for the knobs a request leaves unset.
	Sampling ports.SamplingDefaults
	Load     LoadFunc
}

// Options tune a Fleet.
type Options struct {
	// MemoryBudget is the bytes every loaded model's weights and prefix cache and every request's
	// reservation share, with several models; 0 means DefaultBudget. With one model it is that model's
	// request budget alone (serve.ServeConfig.MemoryBudget), as it has always been.
	MemoryBudget int64
	// Clock times keep-alive and loads; nil means the system clock.
	Clock ports.Clock
}

// DefaultBudget is the shared budget of several models when none is configured: three quarters of the
// machine's memory (weights, prefix caches and requests' state together; the system keeps the rest), 8 GiB
// where the machine's memory is unknown.
func DefaultBudget() int64 {
	if m := serve.MachineMemory(); m > 0 {
		return m / 4 * 3
	}
	return 8 << 30
}

// state is a model's lifecycle.
type state int

const (
	notLoaded state = iota
	loading
	loaded
)

func (s state) String() string {
	switch s {
	case loading:
		return ports.ModelLoading
	case loaded:
		return ports.ModelLoaded
	}
	return ports.ModelNotLoaded
}

// entry is one model and what the fleet knows of it; every field but the immutable Model and serve is
// guarded by Fleet.mu.
type entry struct {
	Model
	serve    *serve.Serve
	state    state
	load     *loadCall // the load under way (state loading)
	running  int       // requests using the engine now
	lastUsed time.Time // when the latest request ended (or the load, before any)
	resident func()    // gives the weights' and prefix cache's reservation back
	close    func() error
}

// loadCall is one load that every request arriving while it runs waits for.
type loadCall struct {
	done chan struct{}
	err  error // set before done is closed
}

// Fleet serves several local models behind the inbound ports (ports.Generator, TokenCounter,
// PromptTokenizer, EventSource): a request's model (name or alias; "" the first) picks one, loaded on its
// first request. Each model has its own serve.Serve (batch scheduler, queue, prefix cache, tenancy); with
// several models all of them share one memory budget holding the loaded models' weights and prefix caches and
// the requests' reservations, and an idle model is unloaded after its keep-alive or when another needs the
// room (least recently used first, never one with requests running). Safe for concurrent use.
type Fleet struct {
	log     zerolog.Logger
	clock   ports.Clock
	entries []*entry
	names   map[string]*entry
	shared  *serve.SharedMemory // nil with one model
	events  *feed
	// base is the context loads run under: a load outlives the request that started it (others may wait
	// for it), and ends at Close.
	base   context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// changed is closed (and replaced) whenever memory may have become free to evict or reserve: a request
	// ended, a model unloaded.
	changed chan struct{}
	// retired holds the prefix-cache counters of unloaded engines, so that /metrics' counters never go down.
	retired ports.PrefixCacheStats
}

var (
	_ ports.Generator       = (*Fleet)(nil)
	_ ports.TokenCounter    = (*Fleet)(nil)
	_ ports.PromptTokenizer = (*Fleet)(nil)
	_ ports.TextEmbedder    = (*Fleet)(nil)
)

// New checks the models (unique names and aliases, a loader each) and returns their fleet, nothing loaded.
func New(ms []Model, opts Options, log zerolog.Logger) (*Fleet, error) {
	if len(ms) == 0 {
		return nil, errors.New("fleet: no model configured")
	}
	clock := opts.Clock
	if clock == nil {
		clock = systemClock{}
	}
	f := &Fleet{log: log, clock: clock, names: map[string]*entry{}, changed: make(chan struct{})}
	f.base, f.cancel = context.WithCancel(context.Background())
	var errs []error
	if len(ms) > 1 {
		total := opts.MemoryBudget
		if total == 0 {
			total = DefaultBudget()
		}
		b, err := batch.NewBudget(total)
		if err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		f.shared = &serve.SharedMemory{Budget: b, Resident: true, Pressure: f.pressure}
	}
	for i, m := range ms {
		if m.Load == nil {
			errs = append(errs, fmt.Errorf("model %d (%q): no loader", i+1, m.Name))
		}
		if m.Name == "" && len(ms) > 1 {
			errs = append(errs, fmt.Errorf("model %d: a server of several models needs a name for each", i+1))
		}
		cfg := m.Serve
		if m.Name != "" {
			cfg.ServedModelName = m.Name
		}
		s, err := serve.NewServe(cfg, log.With().Str("model", m.Name).Logger())
		if err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", m.Name, err))
			continue
		}
		if f.shared != nil {
			s.ShareMemory(f.shared)
		}
		e := &entry{Model: m, serve: s}
		for _, n := range append([]string{m.Name}, m.Aliases...) {
			if n == "" {
				continue
			}
			if _, dup := f.names[n]; dup {
				errs = append(errs, fmt.Errorf("model name or alias %q is given twice", n))
			}
			f.names[n] = e
		}
		f.entries = append(f.entries, e)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f.events = newFeed(f)
	return f, nil
}

// systemClock is the real ports.Clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// single reports whether the fleet is today's server of one model.
func (f *Fleet) single() bool { return len(f.entries) == 1 }

// lookup is the model a request names ("": the default, the first).
func (f *Fleet) lookup(name string) (*entry, error) {
	if name == "" || f.single() {
		// One model keeps its own answer to a wrong name (its Serve names what it serves).
		return f.entries[0], nil
	}
	if e, ok := f.names[name]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("%w: the model %q does not exist; this server serves %s", ports.ErrUnknownModel, name, f.choices())
}

// choices lists every name and alias a request may use, for the unknown-model error.
func (f *Fleet) choices() string {
	var out []string
	for _, e := range f.entries {
		s := fmt.Sprintf("%q", e.Name)
		if len(e.Aliases) > 0 {
			quoted := make([]string, len(e.Aliases))
			for i, a := range e.Aliases {
				quoted[i] = fmt.Sprintf("%q", a)
			}
			s += " (aliases " + strings.Join(quoted, ", ") + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// named is req addressed to e's Serve, which knows e only by its name.
func named(e *entry, model string) string {
	if e.Name == "" {
		return model
	}
	return e.Name
}

// acquire makes sure e is loaded (loading it, or waiting for the load under way, until ctx ends) and counts
// a request on it; release ends the request. A load that fails fails every request waiting for it, with an
// error wrapping ports.ErrModelLoad; the next request tries again.
func (f *Fleet) acquire(ctx context.Context, e *entry) (release func(), err error) {
	if f.single() {
		// One model is loaded at start (Load) and never unloaded; until then its Serve answers
		// ports.ErrNotReady, as a server of one model always has.
		return func() {}, nil
	}
	for {
		f.mu.Lock()
		switch e.state {
		case loaded:
			e.running++
			f.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { f.done(e) }) }, nil
		case notLoaded:
			e.state, e.load = loading, &loadCall{done: make(chan struct{})}
			go f.loadEntry(e, e.load, nil)
		}
		call := e.load
		f.mu.Unlock()
		select {
		case <-call.done:
			if call.err != nil {
				return nil, call.err
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for model %q to load: %w", e.Name, ctx.Err())
		}
	}
}

// done ends one request on e.
func (f *Fleet) done(e *entry) {
	f.mu.Lock()
	e.running--
	e.lastUsed = f.clock.Now()
	f.signalLocked()
	f.mu.Unlock()
}

// signalLocked wakes whoever waits for memory to free; the caller holds f.mu.
func (f *Fleet) signalLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Load loads the default model now (higgsd does at start with one model, so that a bad path ends it at once
// and /health says "loading" meanwhile), reporting progress.
func (f *Fleet) Load(ctx context.Context, progress func(done, total int64)) error {
	e := f.entries[0]
	f.mu.Lock()
	if e.state != notLoaded {
		f.mu.Unlock()
		release, err := f.acquire(ctx, e)
		if err == nil {
			release()
		}
		return err
	}
	call := &loadCall{done: make(chan struct{})}
	e.state, e.load = loading, call
	f.mu.Unlock()
	go f.loadEntry(e, call, progress)
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loadEntry runs one load of e: the engine, then its resident memory in the shared budget (evicting idle
// models for it), then its Serve.
func (f *Fleet) loadEntry(e *entry, call *loadCall, progress func(done, total int64)) {
	start := f.clock.Now()
	f.events.model(ports.ModelEvent{Name: e.Name, State: "loading"})
	eng, closeFn, err := e.Load(f.base, progress)
	var resident func()
	if err == nil {
		resident, err = f.reserveResident(e, e.serve.ResidentBytes(eng))
	}
	if err == nil {
		err = e.serve.SetEngine(eng)
	}
	took := f.clock.Now().Sub(start)
	f.mu.Lock()
	if err != nil {
		e.state = notLoaded
		call.err = fmt.Errorf("%w: model %q: %w", ports.ErrModelLoad, e.Name, err)
		if f.single() {
			call.err = err // higgsd's one model: its load error ends the server, as it always has
		}
		f.mu.Unlock()
		if resident != nil {
			resident()
		}
		if closeFn != nil {
			if cerr := closeFn(); cerr != nil {
				f.log.Warn().Err(cerr).Str("model", e.Name).Msg("closing a model whose load failed")
			}
		}
		f.log.Error().Err(err).Str("model", e.Name).Dur("took", took).Msg("model load failed")
		f.events.model(ports.ModelEvent{Name: e.Name, State: "failed", DurationMS: ms(took), Error: call.err.Error()})
		close(call.done)
		return
	}
	e.state, e.load, e.resident, e.close, e.lastUsed = loaded, nil, resident, closeFn, f.clock.Now()
	f.mu.Unlock()
	name := e.Name
	if name == "" {
		name = eng.Name // the one model of a server of one, named by its directory
	}
	f.log.Info().Str("model", name).Dur("took", took).Int64("resident_bytes", e.serve.ResidentBytes(eng)).Msg("model loaded")
	f.events.model(ports.ModelEvent{Name: e.Name, State: "loaded", DurationMS: ms(took)})
	close(call.done)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reserveResident holds need bytes of the shared budget for e's weights and prefix cache until it unloads,
// unloading idle models (least recently used first) to make room, and waiting for busy ones to become idle
// when that is not enough. With one model nothing is held.
func (f *Fleet) reserveResident(e *entry, need int64) (func(), error) {
	if f.shared == nil {
		return func() {}, nil
	}
	b := f.shared.Budget
	if need > b.Total() {
		return nil, fmt.Errorf("its weights and prefix cache need %d bytes, more than the memory budget of %d bytes (--memory-budget-bytes)",
			need, b.Total())
	}
	for {
		f.mu.Lock()
		closers := f.evictLocked(e, need)
		changed := f.changed
		f.mu.Unlock()
		f.closeAll(closers)
		ctx, cancel := context.WithCancel(f.base)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-ctx.Done():
			}
		}()
		release, err := b.Reserve(ctx, need)
		cancel()
		if err == nil {
			return release, nil
		}
		if f.base.Err() != nil {
			return nil, fmt.Errorf("shutting down: %w", f.base.Err())
		}
		// Something changed (a request ended, a model unloaded): evict again and retry.
	}
}

// pressure is the Serves' hook before a request reserves need bytes: idle models are unloaded (least
// recently used first) until need fits beside what is reserved. A request asks again at the next change
// (the returned channel closes): a model busy now may be idle then.
func (f *Fleet) pressure(need int64) <-chan struct{} {
	f.mu.Lock()
	closers := f.evictLocked(nil, need)
	changed := f.changed
	f.mu.Unlock()
	f.closeAll(closers)
	return changed
}

// evictLocked unloads idle models other than keep, least recently used first, until need bytes are free in
// the shared budget or no idle model is left; it returns their backends' closers for the caller to run
// after unlocking f.mu.
func (f *Fleet) evictLocked(keep *entry, need int64) []namedCloser {
	b := f.shared.Budget
	var closers []namedCloser
	for b.Total()-b.Used() < need {
		var victim *entry
		for _, e := range f.entries {
			if e == keep || e.state != loaded || e.running > 0 {
				continue
			}
			if victim == nil || e.lastUsed.Before(victim.lastUsed) {
				victim = e
			}
		}
		if victim == nil {
			break
		}
		if c, ok := f.unloadLocked(victim, "memory"); ok {
			closers = append(closers, c)
		} else {
			break
		}
	}
	return closers
}

// namedCloser is an unloaded model's backend to close.
type namedCloser struct {
	name   string
	reason string
	// flush writes the unloaded engine's prefix cache to its disk tier (a no-op without one); it runs before
	// close, while the backend's states can still be encoded.
	flush func(context.Context) (int, error)
	close func() error
}

// unloadLocked takes idle e out of service: its Serve forgets the engine and its resident memory is given
// back; the backend's closer is returned to run outside the lock. The caller holds f.mu.
func (f *Fleet) unloadLocked(e *entry, reason string) (namedCloser, bool) {
	st := e.serve.PrefixCacheStats()
	if err := e.serve.Unload(); err != nil {
		f.log.Warn().Err(err).Str("model", e.Name).Msg("model not unloaded")
		return namedCloser{}, false
	}
	if e.resident != nil {
		e.resident()
	}
	f.retired.Hits += st.Hits
	f.retired.Misses += st.Misses
	f.retired.CachedTokens += st.CachedTokens
	f.retired.Evictions += st.Evictions
	f.retired.DiskHits += st.DiskHits
	c := namedCloser{name: e.Name, reason: reason, flush: e.serve.FlushPrefixCache, close: e.close}
	e.state, e.resident, e.close = notLoaded, nil, nil
	f.signalLocked()
	return c, true
}

// closeAll closes unloaded models' backends, logging each unload.
func (f *Fleet) closeAll(cs []namedCloser) error {
	var errs []error
	for _, c := range cs {
		if c.flush != nil {
			// Bounded by the disk tier's budget; it runs under no request's context (the fleet's own ends at
			// Close, before its models are closed).
			if _, err := c.flush(context.Background()); err != nil {
				f.log.Warn().Err(err).Str("model", c.name).Msg("prefix cache: flush to disk failed")
			}
		}
		if c.close != nil {
			if err := c.close(); err != nil {
				// Logged here: the unloads for memory and keep-alive have no caller to report to.
				f.log.Warn().Err(err).Str("model", c.name).Msg("closing an unloaded model failed")
				errs = append(errs, fmt.Errorf("close model %q: %w", c.name, err))
			}
		}
		f.log.Info().Str("model", c.name).Str("reason", c.reason).Msg("model unloaded")
		f.events.model(ports.ModelEvent{Name: c.name, State: "unloaded", Reason: c.reason})
	}
	return errors.Join(errs...)
}

// Sweep unloads every idle model whose keep-alive has passed (Run calls it; tests call it with a manual
// clock).
func (f *Fleet) Sweep() {
	now := f.clock.Now()
	f.mu.Lock()
	var closers []namedCloser
	for _, e := range f.entries {
		if e.state == loaded && e.running == 0 && e.KeepAlive > 0 && now.Sub(e.lastUsed) >= e.KeepAlive {
			if c, ok := f.unloadLocked(e, "keep-alive"); ok {
				closers = append(closers, c)
			}
		}
	}
	f.mu.Unlock()
	f.closeAll(closers)
}

// sweepEvery is how often Run looks for models idle past their keep-alive.
const sweepEvery = time.Second

// Run unloads idle models past their keep-alive until ctx ends.
func (f *Fleet) Run(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.Sweep()
		}
	}
}

// Close stops loads under way and unloads every model, closing their backends. Call it after the requests
// have ended (a request still running keeps its model).
func (f *Fleet) Close() error {
	f.cancel()
	// Loads under way end with the cancelled context; wait for them so that their memory is freed too.
	for {
		f.mu.Lock()
		var pending *loadCall
		for _, e := range f.entries {
			if e.state == loading {
				pending = e.load
				break
			}
		}
		f.mu.Unlock()
		if pending == nil {
			break
		}
		<-pending.done
	}
	f.mu.Lock()
	var closers []namedCloser
	for _, e := range f.entries {
		if e.state == loaded {
			if c, ok := f.unloadLocked(e, "shutdown"); ok {
				closers = append(closers, c)
			}
		}
	}
	f.mu.Unlock()
	return f.closeAll(closers)
}

// Generate implements ports.Generator: the request runs on the model it names, loaded first if need be.
func (f *Fleet) Generate(ctx context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	e, err := f.lookup(req.Model)
	if err != nil {
		return ports.GenerateResult{}, err
	}
	release, err := f.acquire(ctx, e)
	if err != nil {
		return ports.GenerateResult{}, err
	}
	defer release()
	req.Model = named(e, req.Model)
	req.Sampling = e.Sampling.Apply(req.Sampling, req.SamplingSet)
	return e.serve.Generate(ctx, req, emit)
}

// CountTokens implements ports.TokenCounter on the model req names (loading it: its tokenizer counts).
func (f *Fleet) CountTokens(ctx context.Context, req ports.GenerateRequest) (int, error) {
	e, err := f.lookup(req.Model)
	if err != nil {
		return 0, err
	}
	release, err := f.acquire(ctx, e)
	if err != nil {
		return 0, err
	}
	defer release()
	req.Model = named(e, req.Model)
	return e.serve.CountTokens(ctx, req)
}

// Tokenize implements ports.PromptTokenizer on the model req names.
func (f *Fleet) Tokenize(ctx context.Context, req ports.GenerateRequest, addSpecial bool) (ports.Tokenized, error) {
	e, err := f.lookup(req.Model)
	if err != nil {
		return ports.Tokenized{}, err
	}
	release, err := f.acquire(ctx, e)
	if err != nil {
		return ports.Tokenized{}, err
	}
	defer release()
	req.Model = named(e, req.Model)
	return e.serve.Tokenize(ctx, req, addSpecial)
}

// Embed implements ports.TextEmbedder on the model req names (loaded first if need be).
func (f *Fleet) Embed(ctx context.Context, req ports.EmbedRequest) (ports.EmbedResult, error) {
	e, err := f.lookup(req.Model)
	if err != nil {
		return ports.EmbedResult{}, err
	}
	release, err := f.acquire(ctx, e)
	if err != nil {
		return ports.EmbedResult{}, err
	}
	defer release()
	req.Model = named(e, req.Model)
	return e.serve.Embed(ctx, req)
}

// Detokenize implements ports.PromptTokenizer on the named model.
func (f *Fleet) Detokenize(ctx context.Context, model string, ids []ports.Token) (string, error) {
	e, err := f.lookup(model)
	if err != nil {
		return "", err
	}
	release, err := f.acquire(ctx, e)
	if err != nil {
		return "", err
	}
	defer release()
	return e.serve.Detokenize(ctx, named(e, model), ids)
}

// Models implements ports.Generator: every model in configuration order, a loaded one with its card, the
// others with their state. A fleet of one lists its model once loaded, as a server of one model always has.
func (f *Fleet) Models() []ports.ModelCard {
	f.mu.Lock()
	states := make([]state, len(f.entries))
	for i, e := range f.entries {
		states[i] = e.state
	}
	f.mu.Unlock()
	var out []ports.ModelCard
	for i, e := range f.entries {
		cards := e.serve.Models()
		if f.single() {
			return cards
		}
		c := ports.ModelCard{ID: e.Name, OwnedBy: "higgs"}
		if states[i] == loaded && len(cards) == 1 {
			c = cards[0]
		}
		c.State, c.Aliases = states[i].String(), slices.Clone(e.Aliases)
		out = append(out, c)
	}
	return out
}

// Ready reports whether requests can be served: with one model once it is loaded; with several at once (each
// loads on its first request).
func (f *Fleet) Ready() bool {
	if f.single() {
		return f.entries[0].serve.Ready()
	}
	return true
}

// Degraded reports the first loaded model that cannot generate (a lost rank), or nil.
func (f *Fleet) Degraded() error {
	for _, e := range f.entries {
		if err := e.serve.Degraded(); err != nil {
			if f.single() {
				return err
			}
			return fmt.Errorf("model %q: %w", e.Name, err)
		}
	}
	return nil
}

// QueueDepth is the number of requests waiting, over every model.
func (f *Fleet) QueueDepth() int {
	n := 0
	for _, e := range f.entries {
		n += e.serve.QueueDepth()
	}
	return n
}

// PrefixCacheStats adds up the loaded models' prefix caches; the counters include unloaded engines' so that
// they never go down. It holds the fleet's lock throughout, as unloadLocked does while it moves an engine's
// counters into retired: otherwise a scrape between the two could miss (or count twice) that engine's counters.
func (f *Fleet) PrefixCacheStats() ports.PrefixCacheStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.retired
	for _, e := range f.entries {
		s := e.serve.PrefixCacheStats()
		t.Hits += s.Hits
		t.Misses += s.Misses
		t.CachedTokens += s.CachedTokens
		t.Evictions += s.Evictions
		t.Entries += s.Entries
		t.Bytes += s.Bytes
		t.Budget += s.Budget
		t.DiskHits += s.DiskHits
		t.DiskEntries += s.DiskEntries
		t.DiskBytes += s.DiskBytes
		t.DiskBudget += s.DiskBudget
	}
	return t
}

// SetMetrics makes every model's Serve report to m.
func (f *Fleet) SetMetrics(m serve.EngineMetrics) {
	for _, e := range f.entries {
		e.serve.SetMetrics(m)
	}
}

// Events returns the live event stream of every model's generations and the models' loads and unloads.
func (f *Fleet) Events() ports.EventSource { return f.events }
