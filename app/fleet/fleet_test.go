package fleet

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/higgs-go/higgs/app/internal/fakeengine"
	"github.com/higgs-go/higgs/app/serve"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// gib is the fake engines' weights: large beside their requests' reservations (a few MiB), so that the
// budget decides how many models fit.
const gib = 1 << 30

// fakeModel is one model of a test fleet: a fake engine whose loads and closes are counted, whose load can
// be held (gate) or made to fail (fail).
type fakeModel struct {
	name    string
	aliases []string
	weights int64
	keep    time.Duration
	// sampling is the model's default sampling.
	sampling ports.SamplingDefaults
	gate     chan struct{} // non-nil: each load waits for it to close
	fail     error
	loads    atomic.Int64
	closes   atomic.Int64
}

func (m *fakeModel) load(ctx context.Context, _ func(done, total int64)) (serve.Engine, func() error, error) {
	m.loads.Add(1)
	if m.gate != nil {
		select {
		case <-m.gate:
		case <-ctx.Done():
			return serve.Engine{}, nil, ctx.Err()
		}
	}
	if m.fail != nil {
		return serve.Engine{}, nil, m.fail
	}
	p := fakeengine.New(4096, 0, true)
	p.Target.Price = portfake.Price{PerPosition: 1 << 10}
	e := serve.Engine{Target: p.Target, Drafter: p.Drafter, Tokenizer: p.Tokenizer, Template: p.Template,
		EOS: p.EOS, Name: "toy-" + m.name, Created: 1700000000, WeightBytes: m.weights}
	return e, func() error { m.closes.Add(1); return nil }, nil
}

func testServeConfig() serve.ServeConfig {
	return serve.ServeConfig{MaxConcurrency: 4, QueueSize: 8}
}

// newFleet builds a fleet of ms under a budget of budget bytes and a manual clock.
func newFleet(t *testing.T, budget int64, ms ...*fakeModel) (*Fleet, *portfake.Clock) {
	t.Helper()
	clock := portfake.NewClock(0)
	models := make([]Model, len(ms))
	for i, m := range ms {
		if m.weights == 0 {
			m.weights = gib
		}
		models[i] = Model{Name: m.name, Aliases: m.aliases, KeepAlive: m.keep, Serve: testServeConfig(), Sampling: m.sampling, Load: m.load}
	}
	f, err := New(models, Options{MemoryBudget: budget, Clock: clock}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	return f, clock
}

func request(model string) ports.GenerateRequest {
	return ports.GenerateRequest{Model: model, Prompt: "abc", MaxTokens: 4}
}

// states maps each model to its listed state.
func states(f *Fleet) map[string]string {
	out := map[string]string{}
	for _, c := range f.Models() {
		out[c.ID] = c.State
	}
	return out
}

func TestFleetRoutesByNameAliasAndDefault(t *testing.T) {
	a := &fakeModel{name: "coder", aliases: []string{"gocoder", "default-coder"}}
	b := &fakeModel{name: "demo"}
	f, _ := newFleet(t, 8*gib, a, b)
	for _, c := range []struct{ model, want string }{
		{"", "coder"}, {"coder", "coder"}, {"gocoder", "coder"}, {"default-coder", "coder"}, {"demo", "demo"},
	} {
		res, err := f.Generate(t.Context(), request(c.model), nil)
		require.NoError(t, err, c.model)
		assert.Equal(t, c.want, res.Model, "request for %q", c.model)
		assert.Equal(t, 4, res.CompletionTokens)
	}
	assert.Equal(t, int64(1), a.loads.Load(), "a loaded model is reused")
	assert.Equal(t, int64(1), b.loads.Load())
	n, err := f.CountTokens(t.Context(), request("gocoder"))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	text, err := f.Detokenize(t.Context(), "demo", []ports.Token{1, 2})
	require.NoError(t, err)
	assert.Equal(t, "ab", text)
}

func TestFleetUnknownModelListsChoices(t *testing.T) {
	f, _ := newFleet(t, 8*gib, &fakeModel{name: "coder", aliases: []string{"gocoder"}}, &fakeModel{name: "demo"})
	for _, call := range []func() error{
		func() error { _, err := f.Generate(t.Context(), request("gpt-4"), nil); return err },
		func() error { _, err := f.CountTokens(t.Context(), request("gpt-4")); return err },
		func() error { _, err := f.Tokenize(t.Context(), request("gpt-4"), true); return err },
		func() error { _, err := f.Detokenize(t.Context(), "gpt-4", nil); return err },
		func() error {
			_, err := f.Embed(t.Context(), ports.EmbedRequest{Model: "gpt-4", Inputs: []ports.EmbedInput{{Text: "x"}}})
			return err
		},
	} {
		err := call()
		require.ErrorIs(t, err, ports.ErrUnknownModel)
		assert.Equal(t, `unknown model: the model "gpt-4" does not exist; this server serves "coder" (aliases "gocoder"), "demo"`, err.Error())
	}
	assert.Equal(t, map[string]string{"coder": ports.ModelNotLoaded, "demo": ports.ModelNotLoaded}, states(f),
		"an unknown name loads nothing")
}

func TestFleetListsEveryModelWithItsState(t *testing.T) {
	a := &fakeModel{name: "coder", aliases: []string{"gocoder"}}
	b := &fakeModel{name: "demo", gate: make(chan struct{})}
	f, _ := newFleet(t, 8*gib, a, b)
	_, err := f.Generate(t.Context(), request("coder"), nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := f.Generate(context.Background(), request("demo"), nil); done <- err }()
	require.Eventually(t, func() bool { return states(f)["demo"] == ports.ModelLoading }, 5*time.Second, time.Millisecond)
	cards := f.Models()
	require.Len(t, cards, 2)
	assert.Equal(t, "coder", cards[0].ID)
	assert.Equal(t, ports.ModelLoaded, cards[0].State)
	assert.Equal(t, []string{"gocoder"}, cards[0].Aliases)
	assert.Equal(t, 4096, cards[0].ContextLength, "a loaded model's card keeps today's fields")
	assert.Equal(t, ports.ModelCard{ID: "demo", OwnedBy: "higgs", State: ports.ModelLoading}, cards[1])
	close(b.gate)
	require.NoError(t, <-done)
	assert.Equal(t, ports.ModelLoaded, states(f)["demo"])
}

func TestFleetConcurrentFirstRequestsShareOneLoad(t *testing.T) {
	a := &fakeModel{name: "coder", gate: make(chan struct{})}
	f, _ := newFleet(t, 8*gib, a, &fakeModel{name: "demo"})
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.Generate(context.Background(), request("coder"), nil)
		}()
	}
	require.Eventually(t, func() bool { return a.loads.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // let every request reach the load (none may start another)
	close(a.gate)
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
	assert.Equal(t, int64(1), a.loads.Load(), "one load served every first request")
}

func TestFleetLoadFailureIsClearAndRetried(t *testing.T) {
	a := &fakeModel{name: "coder", fail: errors.New("no config.json in /models/coder")}
	f, _ := newFleet(t, 8*gib, a, &fakeModel{name: "demo"})
	_, err := f.Generate(t.Context(), request("coder"), nil)
	require.ErrorIs(t, err, ports.ErrModelLoad)
	assert.Equal(t, `model load failed: model "coder": no config.json in /models/coder`, err.Error())
	assert.Equal(t, ports.ModelNotLoaded, states(f)["coder"])
	a.fail = nil
	_, err = f.Generate(t.Context(), request("coder"), nil)
	require.NoError(t, err, "the next request loads again")
	assert.Equal(t, int64(2), a.loads.Load())
	assert.Equal(t, int64(0), a.closes.Load())
}

func TestFleetWaitForLoadIsCancellable(t *testing.T) {
	a := &fakeModel{name: "coder", gate: make(chan struct{})}
	f, _ := newFleet(t, 8*gib, a, &fakeModel{name: "demo"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := f.Generate(ctx, request("coder"), nil); done <- err }()
	require.Eventually(t, func() bool { return a.loads.Load() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), `waiting for model "coder" to load`)
	close(a.gate)
	require.Eventually(t, func() bool { return states(f)["coder"] == ports.ModelLoaded }, 5*time.Second, time.Millisecond,
		"the load goes on for the next request")
}

// room for two models' weights and their requests' reservations, not three.
const twoModels = 2*gib + 256<<20

func TestFleetEvictsLeastRecentlyUsedUnderBudget(t *testing.T) {
	a, b, c := &fakeModel{name: "a"}, &fakeModel{name: "b"}, &fakeModel{name: "c"}
	f, clock := newFleet(t, twoModels, a, b, c)
	for _, m := range []string{"a", "b", "a"} {
		_, err := f.Generate(t.Context(), request(m), nil)
		require.NoError(t, err)
		clock.Advance(time.Second)
	}
	_, err := f.Generate(t.Context(), request("c"), nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": ports.ModelLoaded, "b": ports.ModelNotLoaded, "c": ports.ModelLoaded}, states(f),
		"b was used least recently")
	assert.Equal(t, int64(1), b.closes.Load(), "unloading closes the backend")
	assert.Equal(t, int64(0), a.closes.Load())
}

func TestFleetNeverEvictsABusyModel(t *testing.T) {
	a, b, c := &fakeModel{name: "a"}, &fakeModel{name: "b"}, &fakeModel{name: "c"}
	f, clock := newFleet(t, twoModels, a, b, c)
	// a is used first (least recently) and then kept busy by a client that does not read.
	release := holdBusy(t, f, "a")
	clock.Advance(time.Second)
	_, err := f.Generate(t.Context(), request("b"), nil)
	require.NoError(t, err)
	_, err = f.Generate(t.Context(), request("c"), nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": ports.ModelLoaded, "b": ports.ModelNotLoaded, "c": ports.ModelLoaded}, states(f),
		"the idle b goes, not the busy a that was used first")

	release()
}

// holdBusy starts a request on model that stays running (its client does not read) until the returned
// release; it returns once the request generates.
func holdBusy(t *testing.T, f *Fleet, model string) (release func()) {
	t.Helper()
	hold, holding := make(chan struct{}), make(chan struct{})
	busy := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := f.Generate(context.Background(), request(model), func(ports.GenerateEvent) error {
			once.Do(func() { close(holding) })
			<-hold
			return nil
		})
		busy <- err
	}()
	<-holding
	return func() {
		close(hold)
		require.NoError(t, <-busy)
	}
}

func TestFleetLoadWaitsForABusyModelToBecomeIdle(t *testing.T) {
	a, b := &fakeModel{name: "a"}, &fakeModel{name: "b"}
	f, _ := newFleet(t, gib+256<<20, a, b) // room for one model
	release := holdBusy(t, f, "a")
	done := make(chan error, 1)
	go func() { _, err := f.Generate(context.Background(), request("b"), nil); done <- err }()
	require.Eventually(t, func() bool { return b.loads.Load() == 1 }, 5*time.Second, time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("b loaded beside busy a: %v (%v)", err, states(f))
	case <-time.After(50 * time.Millisecond):
	}
	assert.Equal(t, map[string]string{"a": ports.ModelLoaded, "b": ports.ModelLoading}, states(f))
	release()
	require.NoError(t, <-done)
	assert.Equal(t, map[string]string{"a": ports.ModelNotLoaded, "b": ports.ModelLoaded}, states(f))
	assert.Equal(t, int64(1), a.closes.Load())
}

func TestFleetKeepAliveUnloadsIdleModels(t *testing.T) {
	a := &fakeModel{name: "a", keep: 5 * time.Minute}
	b := &fakeModel{name: "b", keep: 0} // never while idle
	f, clock := newFleet(t, 8*gib, a, b)
	for _, m := range []string{"a", "b"} {
		_, err := f.Generate(t.Context(), request(m), nil)
		require.NoError(t, err)
	}
	clock.Advance(5*time.Minute - time.Second)
	f.Sweep()
	assert.Equal(t, map[string]string{"a": ports.ModelLoaded, "b": ports.ModelLoaded}, states(f))
	clock.Advance(time.Second)
	f.Sweep()
	assert.Equal(t, map[string]string{"a": ports.ModelNotLoaded, "b": ports.ModelLoaded}, states(f))
	assert.Equal(t, int64(1), a.closes.Load())
	clock.Advance(24 * time.Hour)
	f.Sweep()
	assert.Equal(t, ports.ModelLoaded, states(f)["b"], "keep-alive 0: never unloaded while idle")
	_, err := f.Generate(t.Context(), request("a"), nil)
	require.NoError(t, err)
	assert.Equal(t, int64(2), a.loads.Load(), "an unloaded model loads again on its next request")
}

func TestFleetModelTooLargeForTheBudget(t *testing.T) {
	big := &fakeModel{name: "big", weights: 3 * gib}
	f, _ := newFleet(t, twoModels, &fakeModel{name: "a"}, big)
	_, err := f.Generate(t.Context(), request("big"), nil)
	require.ErrorIs(t, err, ports.ErrModelLoad)
	assert.Contains(t, err.Error(), "more than the memory budget")
	assert.Equal(t, int64(1), big.closes.Load(), "a failed load frees the backend")
}

func TestFleetEventsShowLoads(t *testing.T) {
	f, _ := newFleet(t, 8*gib, &fakeModel{name: "coder"}, &fakeModel{name: "demo"})
	ch, cancel := f.Events().Subscribe(ports.EventScope{All: true})
	defer cancel()
	hello := <-ch
	require.Equal(t, "hello", hello.Type)
	assert.Equal(t, "coder", hello.Hello.Model, "the default model names the server before it loads")
	_, err := f.Generate(t.Context(), request("demo"), nil)
	require.NoError(t, err)
	var seen []string
	timeout := time.After(5 * time.Second)
	for len(seen) < 2 {
		select {
		case ev := <-ch:
			if ev.Type == "model" {
				seen = append(seen, ev.Model.Name+" "+ev.Model.State)
			}
		case <-timeout:
			t.Fatalf("model events seen: %v", seen)
		}
	}
	assert.Equal(t, []string{"demo loading", "demo loaded"}, seen)
}

func TestFleetRejectsDuplicateNames(t *testing.T) {
	m := &fakeModel{name: "x"}
	_, err := New([]Model{{Name: "a", Aliases: []string{"x"}, Serve: testServeConfig(), Load: m.load},
		{Name: "x", Serve: testServeConfig(), Load: m.load}, {Serve: testServeConfig()}}, Options{}, zerolog.Nop())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `model name or alias "x" is given twice`)
	assert.Contains(t, err.Error(), "needs a name for each")
	assert.Contains(t, err.Error(), "no loader")
}

func TestFleetRequestMemoryEvictsIdleModels(t *testing.T) {
	a, b := &fakeModel{name: "a"}, &fakeModel{name: "b"}
	f, clock := newFleet(t, twoModels, a, b)
	for _, m := range []string{"a", "b"} {
		_, err := f.Generate(t.Context(), request(m), nil)
		require.NoError(t, err)
		clock.Advance(time.Second)
	}
	changed := f.pressure(200 << 20)
	assert.Equal(t, map[string]string{"a": ports.ModelLoaded, "b": ports.ModelLoaded}, states(f), "what fits evicts nothing")
	select {
	case <-changed:
		t.Fatal("nothing changed yet")
	default:
	}
	_, err := f.Generate(t.Context(), request("b"), nil)
	require.NoError(t, err)
	select {
	case <-changed: // a request that waits for memory asks again once another ends
	default:
		t.Fatal("a request's end is a change")
	}
	f.pressure(gib)
	assert.Equal(t, map[string]string{"a": ports.ModelNotLoaded, "b": ports.ModelLoaded}, states(f),
		"a request's memory unloads the least recently used idle model")
}

func TestFleetAppliesAModelsDefaultSampling(t *testing.T) {
	zero := 0.0
	greedy := &fakeModel{name: "greedy", sampling: ports.SamplingDefaults{Temperature: &zero}}
	f, _ := newFleet(t, 8*gib, greedy, &fakeModel{name: "other"})
	run := func(model string, sampling ports.SamplingParams, set ports.SamplingKnobs) string {
		req := ports.GenerateRequest{Model: model, Prompt: "abc", MaxTokens: 24, Sampling: sampling, SamplingSet: set}
		res, err := f.Generate(t.Context(), req, nil)
		require.NoError(t, err)
		return res.Content
	}
	want := run("other", ports.SamplingParams{}, ports.SamplingKnobs{Temperature: true}) // greedy, asked for
	api := ports.SamplingParams{Temperature: 1, TopP: 1}                                 // the API's default, not asked for
	for range 3 {
		assert.Equal(t, want, run("greedy", api, ports.SamplingKnobs{}), "the model's temperature 0 replaces the API's 1")
	}
	seed := uint64(1)
	var differs bool
	for i := range 8 {
		seed = uint64(i)
		req := ports.GenerateRequest{Model: "greedy", Prompt: "abc", MaxTokens: 24, Sampling: api,
			SamplingSet: ports.SamplingKnobs{Temperature: true}, Seed: &seed}
		res, err := f.Generate(t.Context(), req, nil)
		require.NoError(t, err)
		differs = differs || res.Content != want
	}
	assert.True(t, differs, "a temperature the client gave is kept: seeded sampling at 1 leaves the greedy path")
}

func TestFleetCloseUnloadsEveryModel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a, b, c := &fakeModel{name: "a"}, &fakeModel{name: "b"}, &fakeModel{name: "c", gate: make(chan struct{})}
	models := make([]Model, 0, 3)
	for _, m := range []*fakeModel{a, b, c} {
		m.weights = gib
		models = append(models, Model{Name: m.name, Serve: testServeConfig(), Load: m.load})
	}
	f, err := New(models, Options{MemoryBudget: 8 * gib, Clock: portfake.NewClock(0)}, zerolog.Nop())
	require.NoError(t, err)
	events, cancel := f.Events().Subscribe(ports.EventScope{All: true})
	for _, m := range []string{"a", "b"} {
		_, err := f.Generate(t.Context(), request(m), nil)
		require.NoError(t, err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := f.Generate(context.Background(), request("c"), nil); waiting <- err }()
	require.Eventually(t, func() bool { return c.loads.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, f.Close(), "a load under way is stopped and waited for")
	assert.ErrorIs(t, <-waiting, context.Canceled)
	assert.Equal(t, int64(1), a.closes.Load())
	assert.Equal(t, int64(1), b.closes.Load())
	assert.Equal(t, map[string]string{"a": ports.ModelNotLoaded, "b": ports.ModelNotLoaded, "c": ports.ModelNotLoaded}, states(f))
	cancel()
	for range events { // the subscription ends with its channel closed
	}
}
