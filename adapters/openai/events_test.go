package openai

import (
	"bufio"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// fakeEvents is a ports.EventSource whose subscribers get the events sent on feed; scopes records each
// subscription's scope.
type fakeEvents struct {
	feed      chan ports.Event
	cancelled chan struct{}
	scopes    chan ports.EventScope
}

func (f *fakeEvents) Subscribe(scope ports.EventScope) (<-chan ports.Event, func()) {
	if f.scopes != nil {
		f.scopes <- scope
	}
	out := make(chan ports.Event, 1)
	out <- ports.Event{Type: "hello", Hello: &ports.HelloEvent{Model: "toy"}}
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-f.feed:
				out <- ev
			case <-f.cancelled:
				return
			}
		}
	}()
	return out, func() { close(f.cancelled) }
}

func TestEventStream(t *testing.T) {
	src := &fakeEvents{feed: make(chan ports.Event), cancelled: make(chan struct{})}
	s := New(&scripted{ready: true}, Options{Log: zerolog.Nop(), Events: src})
	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/v1/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	rd := bufio.NewReader(resp.Body)
	next := func() string {
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		blank, err := rd.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "\n", blank, "one event, one data line, one blank line")
		return strings.TrimSpace(line)
	}
	assert.JSONEq(t, `{"type":"hello","time_ms":0,"hello":{"model":"toy","max_block_size":0,"block_size":0,"adaptive":false,"queue":{"waiting":0,"running":0}}}`,
		strings.TrimPrefix(next(), "data: "))
	src.feed <- ports.Event{Type: "round", ID: "g1", TimeMS: 5, Round: &ports.RoundEvent{BlockSize: 2,
		Tokens: []ports.RoundToken{{ID: 7, Text: "<b>", Kind: ports.TokenAccepted}}}}
	got := next()
	assert.True(t, strings.HasPrefix(got, "data: {"), got)
	assert.Contains(t, got, `"text":"<b>"`, "no HTML escaping")
	assert.Contains(t, got, `"kind":"accepted"`)

	// Draining ends the stream (else shutdown would wait for every open page) and unsubscribes.
	drained := make(chan struct{})
	go func() { s.host.Drain(t.Context(), time.Second); close(drained) }()
	_, err = io.ReadAll(rd)
	require.NoError(t, err, "the stream ends cleanly")
	<-drained
	select {
	case <-src.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription was not cancelled")
	}
}

func TestEventStreamAbsent(t *testing.T) {
	s := New(&scripted{ready: true}, Options{Log: zerolog.Nop()})
	code, body := get(t, s, "/v1/events")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, body, "no event stream")
}

// The page and its assets are served from the binary and name nothing outside this server.
func TestPageIsSelfContained(t *testing.T) {
	s := New(&scripted{ready: true}, Options{Log: zerolog.Nop(), Keys: testKeys(t, "k")})
	for path, ctype := range map[string]string{"/": "text/html", "/ui/app.js": "javascript", "/ui/style.css": "text/css"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, localRequest("GET", path, nil))
		assert.Equal(t, http.StatusOK, rec.Code, "%s is open without the API key, as a browser first meets it", path)
		assert.Contains(t, rec.Header().Get("Content-Type"), ctype, path)
	}
	code, _ := get(t, s, "/ui/missing.js")
	assert.Equal(t, http.StatusNotFound, code)
	require.NoError(t, fs.WalkDir(web, "web", func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if d.IsDir() {
			return nil
		}
		b, err := web.ReadFile(path)
		require.NoError(t, err)
		assert.NotContains(t, string(b), "://", "%s loads something from elsewhere: the page must work offline", path)
		return nil
	}))
}
