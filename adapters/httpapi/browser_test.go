package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// localRequest is httptest.NewRequest sent to localhost (httptest's own Host, example.com, is a name the
// server does not answer to), with a JSON Content-Type when it has a body.
func localRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.Host = "localhost"
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

func TestHostAllowed(t *testing.T) {
	def := newGuard(Browser{Listen: "127.0.0.1"})
	named := newGuard(Browser{Listen: "gpu-box.lan", AllowedHosts: []string{"api.example", "other.example:9000", ".corp.example", "Trailing.Example."}})
	wildcard := newGuard(Browser{Listen: "0.0.0.0"})
	open := newGuard(Browser{AllowedHosts: []string{"*"}})
	for _, c := range []struct {
		g    *guard
		host string
		want bool
	}{
		{def, "localhost:8000", true}, {def, "LOCALHOST", true}, {def, "localhost.:8000", true},
		{def, "app.localhost:8000", true}, {def, "127.0.0.1:8000", true}, {def, "[::1]:8000", true},
		{def, "192.168.1.5:8000", true}, {def, "[fe80::1%25eth0]:8000", true}, {def, "", true},
		{def, "evil.example:8000", false}, {def, "evil.example", false}, {def, "localhost.evil.example", false},
		{def, "127.0.0.1.evil.example", false}, {def, "evillocalhost:8000", false}, {def, "2130706433:8000", false},
		{named, "gpu-box.lan:8000", true}, {named, "api.example:1234", true}, {named, "other.example:9000", true},
		{named, "other.example:8000", false}, {named, "corp.example", true}, {named, "a.b.corp.example:8000", true},
		{named, "evilcorp.example", false}, {named, "trailing.example:80", true}, {named, "evil.example", false},
		{wildcard, "0.0.0.0:8000", true}, {wildcard, "evil.example:8000", false},
		{open, "evil.example:8000", true},
	} {
		assert.Equal(t, c.want, c.g.hostAllowed(c.host), "%q (%+v)", c.host, c.g)
	}
}

func TestNormalOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://App.Example": "https://app.example", "https://app.example:443": "https://app.example",
		"http://localhost:3000": "http://localhost:3000", "http://app.example:80/": "http://app.example",
		"http://[::1]:3000": "http://[::1]:3000",
	} {
		got, err := NormalOrigin(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"app.example", "null", "ftp://app.example", "https://app.example/path",
		"https://app.example?x", "https://user@app.example", "https://", "*"} {
		_, err := NormalOrigin(bad)
		assert.Error(t, err, bad)
	}
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "Application/JSON;charset=UTF-8": true,
		"application/json; charset=latin1": false, "": false, "text/plain": false, "text/plain;charset=UTF-8": false,
		"application/x-www-form-urlencoded": false, "multipart/form-data; boundary=x": false,
		"application/jsonx": false, "application/json;": true,
	} {
		assert.Equal(t, want, isJSON(ct), "%q", ct)
	}
}

// refusals records what the Guard asked the API to answer.
func refusal(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"code":%q,"message":%q}`, code, message)
}

func guarded(b Browser) *Server {
	s := New(gen{}, Options{Browser: b})
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	s.Handle("POST /json", s.GuardJSON(ok, refusal))
	s.Handle("/json", s.GuardJSON(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusMethodNotAllowed)
	}), refusal))
	s.Handle("GET /page", s.Guard(ok, refusal))
	return s
}

func TestGuardHostAndContentType(t *testing.T) {
	s := guarded(Browser{Listen: "127.0.0.1"})
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, r)
		return rec
	}
	for _, path := range []string{"/page", "/metrics"} {
		r := localRequest("GET", path, nil)
		r.Host = "evil.example:8000"
		rec := serve(r)
		assert.Equal(t, http.StatusForbidden, rec.Code, path)
		assert.Contains(t, rec.Body.String(), `evil.example:8000`, path)
		assert.Equal(t, http.StatusOK, serve(localRequest("GET", path, nil)).Code, path)
	}
	r := localRequest("POST", "/json", strings.NewReader(`{}`))
	r.Host = "evil.example"
	rec := serve(r)
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.Contains(t, rec.Body.String(), `"code":"host_not_allowed"`)

	for _, ct := range []string{"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/json; charset=utf-16"} {
		r := localRequest("POST", "/json", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", ct)
		if ct == "" {
			r.Header.Del("Content-Type")
		}
		rec := serve(r)
		assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code, ct)
		assert.Contains(t, rec.Body.String(), `"code":"unsupported_media_type"`, ct)
		assert.Equal(t, "application/json", rec.Header().Get("Accept"), ct)
	}
	r = localRequest("POST", "/json", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json; charset=utf-8")
	assert.Equal(t, http.StatusOK, serve(r).Code)
	// Another method keeps its own answer: only a JSON route's POST is checked.
	assert.Equal(t, http.StatusMethodNotAllowed, serve(localRequest("PUT", "/json", nil)).Code)
}

func preflightRequest(origin string) *http.Request {
	r := localRequest("OPTIONS", "/json", nil)
	r.Header.Set("Origin", origin)
	r.Header.Set("Access-Control-Request-Method", "POST")
	r.Header.Set("Access-Control-Request-Headers", "authorization, content-type, x-stainless-os, anthropic-version")
	return r
}

func TestCORS(t *testing.T) {
	serve := func(s *Server, r *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, r)
		return rec
	}
	noCORS := func(t *testing.T, h http.Header) {
		t.Helper()
		for k := range h {
			assert.False(t, strings.HasPrefix(k, "Access-Control-"), "header %s", k)
		}
	}

	t.Run("off by default", func(t *testing.T) {
		s := guarded(Browser{})
		rec := serve(s, preflightRequest("https://app.example"))
		assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, "a preflight is any OPTIONS request")
		noCORS(t, rec.Header())
		r := localRequest("POST", "/json", strings.NewReader(`{}`))
		r.Header.Set("Origin", "https://app.example")
		rec = serve(s, r)
		assert.Equal(t, http.StatusOK, rec.Code)
		noCORS(t, rec.Header())
		assert.Empty(t, rec.Header().Values("Vary"))
	})

	t.Run("allowed origin", func(t *testing.T) {
		s := guarded(Browser{CORSOrigins: []string{"https://app.example", "http://localhost:3000"}})
		r := preflightRequest("https://app.example")
		r.Header.Set("Access-Control-Request-Private-Network", "true")
		rec := serve(s, r)
		assert.Equal(t, http.StatusNoContent, rec.Code)
		h := rec.Header()
		assert.Equal(t, "https://app.example", h.Get("Access-Control-Allow-Origin"))
		assert.Equal(t, "GET, POST", h.Get("Access-Control-Allow-Methods"))
		assert.Equal(t, "authorization, content-type, x-stainless-os, anthropic-version", h.Get("Access-Control-Allow-Headers"))
		assert.Equal(t, "3600", h.Get("Access-Control-Max-Age"))
		assert.Equal(t, "true", h.Get("Access-Control-Allow-Private-Network"))
		assert.Contains(t, h.Values("Vary"), "Origin")
		assert.Empty(t, h.Get("Access-Control-Allow-Credentials"))
		assert.Empty(t, rec.Body.String())

		// Without a header list, the APIs' own headers.
		r = preflightRequest("http://localhost:3000")
		r.Header.Del("Access-Control-Request-Headers")
		h = serve(s, r).Header()
		assert.Equal(t, "http://localhost:3000", h.Get("Access-Control-Allow-Origin"))
		assert.Contains(t, h.Get("Access-Control-Allow-Headers"), "Authorization, Content-Type, X-Api-Key, Anthropic-Version")

		// The request itself: the origin may read the answer, errors included.
		for ct, want := range map[string]int{"application/json": http.StatusOK, "text/plain": http.StatusUnsupportedMediaType} {
			r = localRequest("POST", "/json", strings.NewReader(`{}`))
			r.Header.Set("Origin", "https://app.example")
			r.Header.Set("Content-Type", ct)
			rec = serve(s, r)
			assert.Equal(t, want, rec.Code)
			assert.Equal(t, "https://app.example", rec.Header().Get("Access-Control-Allow-Origin"))
			assert.Equal(t, "Retry-After, Request-Id", rec.Header().Get("Access-Control-Expose-Headers"))
			assert.Contains(t, rec.Header().Values("Vary"), "Origin")
		}
	})

	t.Run("other origin", func(t *testing.T) {
		s := guarded(Browser{CORSOrigins: []string{"https://app.example"}})
		for _, origin := range []string{"https://evil.example", "http://app.example", "https://app.example:8443", "null"} {
			rec := serve(s, preflightRequest(origin))
			assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, origin)
			noCORS(t, rec.Header())
			r := localRequest("POST", "/json", strings.NewReader(`{}`))
			r.Header.Set("Origin", origin)
			rec = serve(s, r)
			noCORS(t, rec.Header())
			assert.Contains(t, rec.Header().Values("Vary"), "Origin", "the answer depends on the Origin")
		}
	})

	t.Run("any origin, asked for by name", func(t *testing.T) {
		s := guarded(Browser{CORSOrigins: []string{"*"}})
		rec := serve(s, preflightRequest("https://anyone.example"))
		assert.Equal(t, http.StatusNoContent, rec.Code)
		assert.Equal(t, "*", rec.Header().Get("Access-Control-Allow-Origin"))
	})

	t.Run("the Host check comes first", func(t *testing.T) {
		s := guarded(Browser{CORSOrigins: []string{"*"}})
		r := preflightRequest("https://anyone.example")
		r.Host = "evil.example"
		rec := serve(s, r)
		assert.Equal(t, http.StatusForbidden, rec.Code)
		noCORS(t, rec.Header())
	})
}
