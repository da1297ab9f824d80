package route

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// fakeGen answers every request with its name as the content and records the models it was asked for.
type fakeGen struct {
	name string
	mu   sync.Mutex
	got  []string
	err  error
}

func (g *fakeGen) Models() []ports.ModelCard { return []ports.ModelCard{{ID: g.name}} }

func (g *fakeGen) Generate(_ context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	g.mu.Lock()
	g.got = append(g.got, req.Model)
	g.mu.Unlock()
	if g.err != nil {
		return ports.GenerateResult{}, g.err
	}
	if emit != nil {
		if err := emit(ports.GenerateEvent{Content: g.name}); err != nil {
			return ports.GenerateResult{}, err
		}
	}
	return ports.GenerateResult{Model: req.Model, Content: g.name, FinishReason: "stop", CompletionTokens: 1}, nil
}

// localGen adds the local abilities the router forwards.
type localGen struct{ fakeGen }

func (g *localGen) CountTokens(context.Context, ports.GenerateRequest) (int, error) { return 42, nil }
func (g *localGen) Tokenize(context.Context, ports.GenerateRequest, bool) (ports.Tokenized, error) {
	return ports.Tokenized{Tokens: []ports.Token{1, 2}}, nil
}
func (g *localGen) Detokenize(context.Context, string, []ports.Token) (string, error) {
	return "ab", nil
}
func (g *localGen) Embed(context.Context, ports.EmbedRequest) (ports.EmbedResult, error) {
	return ports.EmbedResult{Model: g.name, Embeddings: [][]float32{{1}}}, nil
}
func (g *localGen) Ready() bool     { return false }
func (g *localGen) QueueDepth() int { return 3 }

func newRouter(t *testing.T, local ports.Generator, events ports.EventSource, routes ...Route) *Router {
	t.Helper()
	r, err := New(local, events, routes, zerolog.Nop())
	require.NoError(t, err)
	return r
}

func TestRoutesFirstMatchAnchored(t *testing.T) {
	local := &localGen{fakeGen{name: "local"}}
	a, b := &fakeGen{name: "a"}, &fakeGen{name: "b"}
	r := newRouter(t, local, nil, Route{Pattern: "claude-.*", Provider: "a", Gen: a}, Route{Pattern: "claude-x|gpt-4o", Provider: "b", Gen: b})
	for model, want := range map[string]string{
		"claude-x": "a", "claude-": "a", "gpt-4o": "b", "gpt-4o-mini": "local", "my-claude-x": "local", "": "local", "toy": "local",
	} {
		res, err := r.Generate(t.Context(), ports.GenerateRequest{Model: model}, nil)
		require.NoError(t, err)
		assert.Equal(t, want, res.Content, "model %q", model)
	}
	assert.Equal(t, []ports.ModelCard{{ID: "local"}}, r.Models())
}

func TestBadPattern(t *testing.T) {
	_, err := New(&fakeGen{}, nil, []Route{{Pattern: "(", Provider: "a"}}, zerolog.Nop())
	assert.ErrorContains(t, err, `route "("`)
}

func TestRoutedModelRefusesLocalOperations(t *testing.T) {
	local := &localGen{fakeGen{name: "local"}}
	r := newRouter(t, local, nil, Route{Pattern: "claude-.*", Provider: "up", Gen: &fakeGen{}})

	n, err := r.CountTokens(t.Context(), ports.GenerateRequest{Model: "toy"})
	require.NoError(t, err)
	assert.Equal(t, 42, n)
	_, err = r.CountTokens(t.Context(), ports.GenerateRequest{Model: "claude-x"})
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "model", re.Param)
	assert.ErrorIs(t, err, ports.ErrInvalidRequest)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), `model "claude-x" is routed to provider up`)

	_, err = r.Tokenize(t.Context(), ports.GenerateRequest{Model: "claude-x"}, true)
	assert.ErrorIs(t, err, ports.ErrInvalidRequest)
	_, err = r.Detokenize(t.Context(), "claude-x", nil)
	assert.ErrorIs(t, err, ports.ErrInvalidRequest)
	tk, err := r.Tokenize(t.Context(), ports.GenerateRequest{Model: "toy"}, true)
	require.NoError(t, err)
	assert.Len(t, tk.Tokens, 2)
	s, err := r.Detokenize(t.Context(), "toy", nil)
	require.NoError(t, err)
	assert.Equal(t, "ab", s)

	em, err := r.Embed(t.Context(), ports.EmbedRequest{Model: "toy"})
	require.NoError(t, err)
	assert.Equal(t, "local", em.Model)
	_, err = r.Embed(t.Context(), ports.EmbedRequest{Model: "claude-x"})
	assert.ErrorIs(t, err, ports.ErrInvalidRequest)

	assert.False(t, r.Ready())
	assert.Equal(t, 3, r.QueueDepth())
	assert.NoError(t, r.Degraded())
}

func TestWithoutLocalAbilities(t *testing.T) {
	r := newRouter(t, &fakeGen{name: "bare"}, nil)
	_, err := r.CountTokens(t.Context(), ports.GenerateRequest{})
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.True(t, r.Ready())
	assert.Zero(t, r.QueueDepth())
}

// fakeEvents is a local event stream: a hello, then what the test sends.
type fakeEvents struct{ ch chan ports.Event }

func (f *fakeEvents) Subscribe(ports.EventScope) (<-chan ports.Event, func()) {
	f.ch <- ports.Event{Type: "hello", Hello: &ports.HelloEvent{Model: "local"}}
	var once sync.Once
	return f.ch, func() { once.Do(func() { close(f.ch) }) }
}

func next(t *testing.T, ch <-chan ports.Event) ports.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return ports.Event{}
}

// TestEventsOfRoutedRequests: a routed request's start and end reach its tenant's subscribers and the
// operator's, not another tenant's, after the local stream's hello and among its events.
func TestEventsOfRoutedRequests(t *testing.T) {
	up := &fakeGen{name: "up"}
	r := newRouter(t, &fakeGen{name: "local"}, nil, Route{Pattern: "claude-.*", Provider: "up", Gen: up})
	mine, cancelMine := r.Events().Subscribe(ports.EventScope{Tenant: "t1"})
	other, cancelOther := r.Events().Subscribe(ports.EventScope{Tenant: "t2"})
	all, cancelAll := r.Events().Subscribe(ports.EventScope{All: true})
	for _, ch := range []<-chan ports.Event{mine, other, all} {
		assert.Equal(t, "hello", next(t, ch).Type)
	}
	_, err := r.Generate(t.Context(), ports.GenerateRequest{ID: "chatcmpl-1", Tenant: "t1", Model: "claude-x", MaxTokens: 9,
		Messages: []ports.ChatMessage{{Role: "user", Content: "hi"}}}, nil)
	require.NoError(t, err)
	up.err = errors.New("boom")
	_, err = r.Generate(t.Context(), ports.GenerateRequest{ID: "chatcmpl-2", Tenant: "t1", Model: "claude-x"}, nil)
	require.Error(t, err)
	for _, ch := range []<-chan ports.Event{mine, all} {
		st := next(t, ch)
		require.Equal(t, "start", st.Type)
		assert.Equal(t, "chatcmpl-1", st.ID)
		assert.Equal(t, &ports.StartEvent{Chat: true, MaxTokens: 9, BlockSize: 1}, st.Start)
		end := next(t, ch)
		require.Equal(t, "end", end.Type)
		assert.Equal(t, "stop", end.End.Finish)
		assert.Equal(t, 1, end.End.CompletionTokens)
		assert.Equal(t, "start", next(t, ch).Type)
		assert.Equal(t, "error", next(t, ch).End.Finish)
	}
	cancelMine()
	cancelAll()
	select {
	case ev := <-other:
		t.Fatalf("another tenant saw %+v", ev)
	default:
	}
	cancelOther()
	_, open := <-other
	assert.False(t, open)

	local := &fakeEvents{ch: make(chan ports.Event, 8)}
	r = newRouter(t, &fakeGen{name: "local"}, local, Route{Pattern: "claude-.*", Provider: "up", Gen: &fakeGen{name: "up"}})
	ch, cancel := r.Events().Subscribe(ports.EventScope{})
	assert.Equal(t, "local", next(t, ch).Hello.Model, "the local stream's hello comes first")
	local.ch <- ports.Event{Type: "queue"}
	assert.Equal(t, "queue", next(t, ch).Type)
	cancel()
	cancel()
}
