package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/ports"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// scripted is a ports.Generator that emits fixed events and returns a fixed result or error.
type scripted struct {
	events []ports.GenerateEvent
	res    ports.GenerateResult
	err    error // returned after the events
	got    ports.GenerateRequest
}

func (s *scripted) Models() []ports.ModelCard {
	return []ports.ModelCard{{ID: "toy", Created: 1700000000, OwnedBy: "higgs"}}
}

func (s *scripted) Ready() bool { return true }

func (s *scripted) Generate(_ context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	s.got = req
	for _, ev := range s.events {
		if err := emit(ev); err != nil {
			return s.res, err
		}
	}
	return s.res, s.err
}

// newServer is the OpenAI API over gen with the Responses API beside it, as higgsd wires them.
func newServer(gen ports.Generator, opts openai.Options) *openai.Server {
	opts.Log = zerolog.Nop()
	if opts.Now == nil {
		opts.Now = func() time.Time { return time.Unix(1700000000, 0) }
		opts.NewID = func() string { return "test" }
	}
	api := openai.New(gen, opts)
	New(api)
	return api
}

// localRequest is httptest.NewRequest sent to localhost, with a JSON Content-Type when it has a body.
func localRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.Host = "localhost"
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	assert.Equal(t, string(want), string(got), "transcript differs from %s (go test -update rewrites it)", path)
}

var goldenResult = ports.GenerateResult{Model: "toy", PromptTokens: 5, CompletionTokens: 7, CachedTokens: 3, FinishReason: "stop",
	Spec: ports.SpecUsage{Rounds: 3, PlainSteps: 2, Drafted: 9, Accepted: 4, Tau: 7.0 / 3, AcceptedPerPosition: []int{2, 1, 1},
		BlockSize: 4, BlockSizes: []ports.BlockSizeUse{{BlockSize: 4, Rounds: 3}},
		Policy: &ports.PolicyUsage{Mode: "speculative", Reason: "fixed block size 4: the adaptive policy is off"}},
	Content: "Hello, world!\n", Reasoning: "hmm"}

func TestGoldenTranscripts(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	events := []ports.GenerateEvent{{Reasoning: "hmm"}, {Content: "Hello, "}, {Content: "world!\n"}}
	cases := []struct {
		name   string
		body   string
		events []ports.GenerateEvent
		err    error
	}{
		{"responses", `{"input":"hi","instructions":"be brief"}`, events, nil},
		{"responses_stream", `{"input":"hi","stream":true}`, events, nil},
		{"responses_stream_error_midway", `{"input":"hi","stream":true}`, events[1:2], errors.New("engine exploded")},
		{"responses_tools_stream", `{"input":"weather?","stream":true,"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},{"type":"web_search"}]}`,
			[]ports.GenerateEvent{{Content: "Let me look.\n"}, {Content: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gen := &scripted{events: c.events, res: goldenResult, err: c.err}
			rec := httptest.NewRecorder()
			newServer(gen, openai.Options{}).ServeHTTP(rec, localRequest("POST", "/v1/responses", strings.NewReader(c.body)))
			var buf bytes.Buffer
			buf.WriteString(rec.Result().Status + "\n")
			for _, h := range []string{"Content-Type", "Retry-After", "Cache-Control"} {
				if v := rec.Header().Get(h); v != "" {
					buf.WriteString(h + ": " + v + "\n")
				}
			}
			buf.WriteString("\n")
			buf.Write(rec.Body.Bytes())
			golden(t, c.name, buf.Bytes())
		})
	}
}

func keys(t *testing.T, admin string, tenants ...string) *httpapi.Keys {
	t.Helper()
	named := make([]httpapi.NamedKey, len(tenants))
	for i, k := range tenants {
		named[i] = httpapi.NamedKey{Key: k, From: "test"}
	}
	k, err := httpapi.NewKeys(named, admin)
	require.NoError(t, err)
	return k
}

// The route keeps the guards of openai's generations: a key is required and names the tenant, a body that
// is not JSON is refused (415), a foreign Host is refused (403), a wrong method is OpenAI's 405.
func TestRouteGuards(t *testing.T) {
	gen := &scripted{res: ports.GenerateResult{FinishReason: "stop"}}
	s := newServer(gen, openai.Options{Keys: keys(t, "root", "key-a", "key-b")})
	for key, want := range map[string]ports.Tenant{"key-a": "tenant-1", "key-b": "tenant-2", "root": httpapi.OperatorTenant} {
		gen.got = ports.GenerateRequest{}
		rec := httptest.NewRecorder()
		r := localRequest("POST", "/v1/responses", strings.NewReader(`{"input":"hi"}`))
		r.Header.Set("Authorization", "Bearer "+key)
		s.ServeHTTP(rec, r)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Equal(t, want, gen.got.Tenant, key)
	}
	for _, c := range []struct {
		name   string
		edit   func(r *http.Request)
		status int
		code   string
	}{
		{"no key", func(r *http.Request) {}, http.StatusUnauthorized, ""},
		{"text/plain", func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer key-a")
			r.Header.Set("Content-Type", "text/plain")
		},
			http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"rebinding", func(r *http.Request) { r.Header.Set("Authorization", "Bearer key-a"); r.Host = "evil.example:8000" },
			http.StatusForbidden, "host_not_allowed"},
	} {
		gen.got = ports.GenerateRequest{}
		rec := httptest.NewRecorder()
		r := localRequest("POST", "/v1/responses", strings.NewReader(`{"input":"hi"}`))
		c.edit(r)
		s.ServeHTTP(rec, r)
		assert.Equal(t, c.status, rec.Code, c.name)
		assert.Empty(t, gen.got.Messages, "%s: no generation started", c.name)
		var body struct {
			Error struct {
				Code *string `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
		if c.code != "" {
			require.NotNil(t, body.Error.Code, c.name)
			assert.Equal(t, c.code, *body.Error.Code, c.name)
		}
	}
	rec := httptest.NewRecorder()
	r := localRequest("GET", "/v1/responses", nil)
	r.Header.Set("Authorization", "Bearer key-a")
	s.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, "POST", rec.Header().Get("Allow"))
}

// While the host drains, the route refuses new generations as openai's do: 503 shutting_down.
func TestDrainRefuses(t *testing.T) {
	host := httpapi.New(&scripted{}, httpapi.Options{Log: zerolog.Nop()})
	s := newServer(&scripted{}, openai.Options{Host: host})
	rep := host.Drain(t.Context(), time.Second)
	assert.Zero(t, rep.InFlight)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, localRequest("POST", "/v1/responses", strings.NewReader(`{"input":"hi"}`)))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "5", rec.Header().Get("Retry-After"))
	assert.JSONEq(t, `{"error":{"message":"the server is shutting down; retry on another instance","type":"server_error","param":null,"code":"shutting_down"}}`,
		rec.Body.String())
}
