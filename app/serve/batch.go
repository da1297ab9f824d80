package serve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// After is the system clock's timer (batch.Timer).
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// timerClock gives a clock without timers (a test's) the system's: the scheduler then waits in real time and
// measures on the clock, and runs a round once a timer fires whatever the clock says (a frozen clock would
// otherwise never end the wait).
type timerClock struct{ ports.Clock }

func (timerClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// EngineMetrics receives the engine's serving figures for /metrics (httpapi.Metrics implements it).
type EngineMetrics interface {
	// ObserveBatch is called after each batched target forward with the sequences it served and the rows
	// (tokens) it ran.
	ObserveBatch(sequences, rows int)
	// ObserveQueueWait is called when a request starts decoding, with how long it waited for a place in the
	// batch and for its memory.
	ObserveQueueWait(d time.Duration)
}

// SetMetrics makes Serve report to m (nil: stop reporting). Call it before serving.
func (s *Serve) SetMetrics(m EngineMetrics) {
	s.metrics.Store(&metricsBox{m})
}

// metricsBox lets an interface live in an atomic.Pointer.
type metricsBox struct{ m EngineMetrics }

func (s *Serve) engineMetrics() EngineMetrics {
	if b := s.metrics.Load(); b != nil {
		return b.m
	}
	return nil
}

// newScheduler makes the engine's round scheduler and memory budget.
func (s *Serve) newScheduler(l *loaded) error {
	clock, ok := s.clock.(batch.Clock)
	if !ok {
		clock = timerClock{s.clock}
	}
	sched, err := batch.New(batch.Config{MaxWait: s.cfg.BatchWait, Observe: s.observeRound}, clock, l.Target, l.Drafter)
	if err != nil {
		return err
	}
	var budget *batch.Budget
	if s.shared != nil {
		budget = s.shared.Budget
	} else {
		total := s.cfg.MemoryBudget
		if total == 0 {
			total = DefaultMemoryBudget(s.cfg.PrefixCacheBytes)
		}
		if budget, err = batch.NewBudget(total); err != nil {
			return err
		}
	}
	l.sched, l.budget, l.footprint = sched, budget, pricingFor(l.Engine, l.info)
	return nil
}

func (s *Serve) observeRound(r batch.Round) {
	if r.Kind != batch.RoundForward {
		return
	}
	if m := s.engineMetrics(); m != nil {
		m.ObserveBatch(r.Sequences, r.Rows)
	}
}

// admissionBytes is what request p reserves (memory admission, batch.Admit), or a client error when it can
// never fit. A request without max_tokens reserves its fair share of the budget rather than the whole context,
// and its generation is capped at what was reserved (it ends with "length" there, as at any max_tokens).
func (s *Serve) admissionBytes(l *loaded, p *prepared) (int64, error) {
	room, err := speculative.TokenBudget(len(p.Prompt), 0, l.info.ContextLength)
	if p.Config.MaxTokens > 0 && l.info.ContextLength == 0 {
		room, err = p.Config.MaxTokens, nil // no context length: the client's limit is the room
	}
	if err != nil {
		return 0, requestErr("max_tokens", err)
	}
	asked := p.Config.MaxTokens
	if p.defaultMax {
		// The server's default bounds the room; the request is admitted as one without a limit.
		room, asked = min(room, asked), 0
	}
	total := s.requestRoom(l)
	// A verification tree's nodes are verify rows (and cached positions until its path is kept): a tree
	// budget above the block size is priced as a block that large.
	verify := p.Config.BlockSize
	if verify > 1 {
		verify = max(verify, p.Config.Tree.Budget)
	}
	adm, err := batch.Admit(batch.Demand{Room: room, MaxTokens: asked, Total: total, Concurrency: max(s.cfg.MaxConcurrency, 1),
		Cost: func(tokens int) int64 {
			return l.footprint.requestBytes(len(p.Prompt), tokens, verify, s.cfg.PrefillChunk)
		}})
	var over *batch.OverBudgetError
	switch {
	case errors.As(err, &over) && over.Fits == 0:
		return 0, requestErr("", fmt.Errorf("this request's %d prompt tokens: %w (--memory-budget-bytes); shorten the prompt or raise --memory-budget-bytes",
			len(p.Prompt), err))
	case errors.As(err, &over):
		return 0, requestErr("max_tokens", fmt.Errorf("this request's %d prompt tokens and max_tokens %d: %w (--memory-budget-bytes); at most %d tokens fit: lower max_tokens or shorten the prompt",
			len(p.Prompt), p.Config.MaxTokens, err, over.Fits))
	case err != nil:
		return 0, fmt.Errorf("memory admission: %w", err)
	}
	if adm.Capped {
		p.Config.MaxTokens = adm.Tokens
	}
	return adm.Bytes, nil
}

// requestErr is a client error (a *ports.RequestError, so ErrInvalidRequest) that keeps err's chain: errors.Is
// still finds ports.ErrContextFull or batch.ErrOverBudget in it.
func requestErr(param string, err error) error {
	return &wrappedRequestError{RequestError: &ports.RequestError{Param: param, Message: err.Error()}, err: err}
}

type wrappedRequestError struct {
	*ports.RequestError
	err error
}

func (e *wrappedRequestError) Unwrap() []error { return []error{e.RequestError, e.err} }

// admit waits for a place in the batch (the bounded queue) and for the request's memory; the returned
// release gives both back.
func (s *Serve) admit(ctx context.Context, l *loaded, need int64) (func(), error) {
	t0 := s.clock.Now()
	release, err := s.gate.acquire(ctx)
	if err != nil {
		return nil, err
	}
	free, err := s.reserve(ctx, l, need)
	if err != nil {
		release()
		return nil, err
	}
	if m := s.engineMetrics(); m != nil {
		m.ObserveQueueWait(s.clock.Now().Sub(t0))
	}
	return func() { free(); release() }, nil
}

// SharedMemory is a memory budget several Serves (the models of one server) share: every request's
// reservation is taken from Budget, and when Resident is set each loaded engine's weights and prefix cache
// are held in it too (by the caller, who loads and unloads the engines), so a request may reserve at most
// what its own engine's resident bytes leave.
type SharedMemory struct {
	Budget   *batch.Budget
	Resident bool
	// Pressure, when set, is called before a request reserves need bytes, so that the caller can free room
	// (unload idle models) when the budget does not hold them now. It returns a channel closed at the next
	// change that may free more (a request ended elsewhere, a model unloaded): a request still waiting then
	// calls Pressure again.
	Pressure func(need int64) <-chan struct{}
}

// reserve takes need bytes from l's budget for a request, waiting until ctx ends; with a shared budget it
// asks for room (SharedMemory.Pressure) before waiting and again at each change while it waits.
func (s *Serve) reserve(ctx context.Context, l *loaded, need int64) (func(), error) {
	if s.shared == nil || s.shared.Pressure == nil {
		return l.budget.Reserve(ctx, need)
	}
	for {
		changed := s.shared.Pressure(need)
		wait, stop := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				stop()
			case <-wait.Done():
			}
		}()
		free, err := l.budget.Reserve(wait, need)
		stop()
		// Only the wait's own end (a change) is worth another try: any other failure (need over the whole
		// budget) fails the same way at once, and retrying it would spin until ctx ends.
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.Canceled) {
			return free, err
		}
	}
}

// ShareMemory makes s take its requests' memory from m instead of a budget of its own. Call it before
// SetEngine.
func (s *Serve) ShareMemory(m *SharedMemory) { s.shared = m }

// ResidentBytes is what e holds while loaded besides its requests' reservations: its weights and the
// prefix cache's budget.
func (s *Serve) ResidentBytes(e Engine) int64 { return e.WeightBytes + s.cfg.PrefixCacheBytes }

// requestRoom is the most memory l's requests may reserve together: the budget, less l's resident bytes
// when they are held in a shared budget.
func (s *Serve) requestRoom(l *loaded) int64 {
	total := l.budget.Total()
	if s.shared != nil && s.shared.Resident {
		total -= s.ResidentBytes(l.Engine)
	}
	return max(total, 0)
}
