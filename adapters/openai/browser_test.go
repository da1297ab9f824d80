package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/httpapi"
)

// localRequest is httptest.NewRequest sent to localhost (httptest's own Host, example.com, is a name the
// server does not answer to), with a JSON Content-Type when it has a body, as a client of the API sends.
func localRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.Host = "localhost"
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

// openAIError decodes an answer that must be in OpenAI's error shape.
func openAIError(t *testing.T, rec *httptest.ResponseRecorder) errorDetail {
	t.Helper()
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var body struct {
		Error *errorDetail `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	require.NotNil(t, body.Error, rec.Body.String())
	return *body.Error
}

// A DNS-rebinding page sends its own name in Host: every route, the event stream and the page included,
// refuses it in OpenAI's shape, before authentication and before the body is read.
func TestDNSRebindingRefused(t *testing.T) {
	events := &fakeEvents{cancelled: make(chan struct{})}
	for _, key := range []string{"", "k"} {
		s := New(&scripted{ready: true}, Options{Log: zerolog.Nop(), Keys: keysOf(t, key), Events: events})
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`},
			{"POST", "/v1/completions", `{"prompt":"hi"}`},
			{"GET", "/v1/models", ""}, {"GET", "/v1/models/toy", ""}, {"GET", "/v1/events", ""},
			{"GET", "/health", ""}, {"GET", "/metrics", ""}, {"GET", "/", ""}, {"GET", "/ui/app.js", ""},
		} {
			for _, host := range []string{"evil.example:8000", "evil.example", "localhost.evil.example:8000"} {
				var body io.Reader
				if c.body != "" {
					body = strings.NewReader(c.body)
				}
				r := localRequest(c.method, c.path, body)
				r.Host = host
				r.Header.Set("Authorization", "Bearer "+key)
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, r)
				assert.Equal(t, http.StatusForbidden, rec.Code, "%s %s Host %s", c.method, c.path, host)
				if c.path == "/metrics" {
					continue // the route of no API: a plain-text refusal
				}
				e := openAIError(t, rec)
				assert.Equal(t, "invalid_request_error", e.Type)
				require.NotNil(t, e.Code)
				assert.Equal(t, "host_not_allowed", *e.Code)
				assert.Contains(t, e.Message, host)
			}
		}
	}
}

// The names a browser uses for this machine pass, as do those listed.
func TestAllowedHostsPass(t *testing.T) {
	host := httpapi.New(&scripted{ready: true}, httpapi.Options{Browser: httpapi.Browser{Listen: "127.0.0.1",
		AllowedHosts: []string{"gpu-box.lan"}}})
	s := New(&scripted{ready: true}, Options{Log: zerolog.Nop(), Host: host})
	for _, h := range []string{"localhost:8000", "127.0.0.1:8000", "[::1]:8000", "app.localhost:8000", "gpu-box.lan:8000", "10.1.2.3"} {
		for _, path := range []string{"/health", "/v1/models", "/"} {
			r := localRequest("GET", path, nil)
			r.Host = h
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, r)
			assert.Equal(t, http.StatusOK, rec.Code, "%s Host %s", path, h)
		}
	}
}

// A cross-site page can POST text/plain, a form or no Content-Type without a preflight: none starts a
// generation.
func TestNonJSONBodiesRefused(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
			"multipart/form-data; boundary=x", ""} {
			gen := &scripted{ready: true}
			s := New(gen, Options{Log: zerolog.Nop()})
			r := localRequest("POST", path, strings.NewReader(`{"prompt":"hi","messages":[{"role":"user","content":"hi"}],"input":"hi"}`))
			if ct == "" {
				r.Header.Del("Content-Type")
			} else {
				r.Header.Set("Content-Type", ct)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, r)
			assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code, "%s %q", path, ct)
			e := openAIError(t, rec)
			require.NotNil(t, e.Code)
			assert.Equal(t, "unsupported_media_type", *e.Code)
			assert.Contains(t, e.Message, "application/json")
			assert.Empty(t, gen.got.Messages, "no generation started")
			assert.Empty(t, gen.got.Prompt, "no generation started")
		}
	}
	// JSON with a charset parameter, as some clients send it, is JSON.
	s := New(&scripted{ready: true}, Options{Log: zerolog.Nop()})
	r := localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi"}`))
	r.Header.Set("Content-Type", "application/json; charset=utf-8")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

func TestCORSPreflight(t *testing.T) {
	preflight := func(s http.Handler, origin string) *httptest.ResponseRecorder {
		r := localRequest("OPTIONS", "/v1/chat/completions", nil)
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", "POST")
		r.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, r)
		return rec
	}
	// Off by default: the preflight is an OPTIONS request like any other, with no CORS header.
	s := New(&scripted{ready: true}, Options{Log: zerolog.Nop(), Keys: testKeys(t, "k")})
	rec := preflight(s, "https://app.example")
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Empty(t, rec.Header().Get("Access-Control-Allow-Origin"))

	host := httpapi.New(&scripted{ready: true}, httpapi.Options{Browser: httpapi.Browser{CORSOrigins: []string{"https://app.example"}}})
	s = New(&scripted{ready: true}, Options{Log: zerolog.Nop(), Keys: testKeys(t, "k"), Host: host})
	rec = preflight(s, "https://app.example")
	assert.Equal(t, http.StatusNoContent, rec.Code, "answered before authentication: a preflight carries no key")
	assert.Equal(t, "https://app.example", rec.Header().Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "GET, POST", rec.Header().Get("Access-Control-Allow-Methods"))
	assert.Equal(t, "authorization, content-type", rec.Header().Get("Access-Control-Allow-Headers"))
	assert.NotEmpty(t, rec.Header().Get("Access-Control-Max-Age"))
	rec = preflight(s, "https://evil.example")
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Empty(t, rec.Header().Get("Access-Control-Allow-Origin"))

	// The allowed origin's request, refused for its key, is still readable by that page.
	r := localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi"}`))
	r.Header.Set("Origin", "https://app.example")
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Equal(t, "https://app.example", rec.Header().Get("Access-Control-Allow-Origin"))
}

// keysOf is testKeys(t, key), or no keys for "".
func keysOf(t *testing.T, key string) *httpapi.Keys {
	if key == "" {
		return nil
	}
	return testKeys(t, key)
}
