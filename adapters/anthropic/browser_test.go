package anthropic

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/httpapi"
)

// anthropicError decodes an answer that must be in Anthropic's error shape, with its request id.
func anthropicError(t *testing.T, rec *httptest.ResponseRecorder) errorDetail {
	t.Helper()
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.NotEmpty(t, rec.Header().Get("request-id"))
	var body struct {
		Type      string       `json:"type"`
		Error     *errorDetail `json:"error"`
		RequestID string       `json:"request_id"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	assert.Equal(t, "error", body.Type)
	assert.Equal(t, rec.Header().Get("request-id"), body.RequestID)
	require.NotNil(t, body.Error, rec.Body.String())
	return *body.Error
}

func post(s http.Handler, host, path, contentType, origin string) *httptest.ResponseRecorder {
	body := `{"model":"toy","max_tokens":1,"messages":[{"role":"user","content":"q"}]}`
	if strings.HasSuffix(path, "/count_tokens") {
		body = `{"model":"toy","messages":[{"role":"user","content":"q"}]}`
	}
	r := httptest.NewRequest("POST", path, strings.NewReader(body))
	r.Host = host
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, r)
	return rec
}

var routes = []string{"/v1/messages", "/v1/messages/count_tokens"}

// A DNS-rebinding page sends its own name in Host: refused in Anthropic's shape, before authentication.
func TestDNSRebindingRefused(t *testing.T) {
	for _, key := range []string{"", "k"} {
		gen := &scripted{count: 3}
		s := New(gen, Options{Log: zerolog.Nop(), Keys: keysOf(t, key)})
		for _, path := range routes {
			for _, host := range []string{"evil.example:8000", "evil.example", "localhost.evil.example"} {
				rec := post(s, host, path, "application/json", "")
				assert.Equal(t, http.StatusForbidden, rec.Code, "%s Host %s", path, host)
				e := anthropicError(t, rec)
				assert.Equal(t, "permission_error", e.Type)
				assert.Contains(t, e.Message, host)
				assert.Empty(t, gen.got.Messages, "no generation started")
			}
			// A wrong method is refused for its Host too.
			r := httptest.NewRequest("GET", path, nil)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, r) // Host example.com
			assert.Equal(t, http.StatusForbidden, rec.Code)
		}
	}
	// The names of this machine and the listed ones pass.
	host := httpapi.New(&scripted{}, httpapi.Options{Browser: httpapi.Browser{Listen: "0.0.0.0", AllowedHosts: []string{".corp.example"}}})
	s := New(&scripted{count: 3}, Options{Log: zerolog.Nop(), Host: host})
	for _, h := range []string{"localhost:8000", "127.0.0.1:8000", "[::1]:8000", "192.168.1.5:8000", "llm.corp.example:8000"} {
		for _, path := range routes {
			assert.Equal(t, http.StatusOK, post(s, h, path, "application/json", "").Code, "%s Host %s", path, h)
		}
	}
}

// A cross-site page can POST text/plain, a form or no Content-Type without a preflight: none starts a
// generation or counts tokens.
func TestNonJSONBodiesRefused(t *testing.T) {
	for _, path := range routes {
		for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
			"multipart/form-data; boundary=x", ""} {
			gen := &scripted{count: 3}
			rec := post(New(gen, Options{Log: zerolog.Nop()}), "localhost:8000", path, ct, "")
			assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code, "%s %q", path, ct)
			e := anthropicError(t, rec)
			assert.Equal(t, "invalid_request_error", e.Type)
			assert.Contains(t, e.Message, "application/json")
			assert.Empty(t, gen.got.Messages, "no generation started")
		}
		rec := post(New(&scripted{count: 3}, Options{Log: zerolog.Nop()}), "localhost:8000", path, "application/json; charset=utf-8", "")
		assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
}

func TestCORSPreflight(t *testing.T) {
	preflight := func(s http.Handler, origin string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("OPTIONS", "/v1/messages", nil)
		r.Host = "localhost:8000"
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", "POST")
		r.Header.Set("Access-Control-Request-Headers", "anthropic-version,content-type,x-api-key,anthropic-dangerous-direct-browser-access")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, r)
		return rec
	}
	s := New(&scripted{}, Options{Log: zerolog.Nop()})
	rec := preflight(s, "https://app.example")
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, "CORS off: a preflight is any OPTIONS request")
	assert.Empty(t, rec.Header().Get("Access-Control-Allow-Origin"))

	host := httpapi.New(&scripted{}, httpapi.Options{Browser: httpapi.Browser{CORSOrigins: []string{"https://app.example"}}})
	s = New(&scripted{count: 3}, Options{Log: zerolog.Nop(), Keys: testKeys(t, "k"), Host: host})
	rec = preflight(s, "https://app.example")
	assert.Equal(t, http.StatusNoContent, rec.Code, "answered before authentication: a preflight carries no key")
	assert.Equal(t, "https://app.example", rec.Header().Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "GET, POST", rec.Header().Get("Access-Control-Allow-Methods"))
	assert.Equal(t, "anthropic-version, content-type, x-api-key, anthropic-dangerous-direct-browser-access",
		rec.Header().Get("Access-Control-Allow-Headers"))
	assert.NotEmpty(t, rec.Header().Get("Access-Control-Max-Age"))
	rec = preflight(s, "https://evil.example")
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Empty(t, rec.Header().Get("Access-Control-Allow-Origin"))

	rec = post(s, "localhost:8000", "/v1/messages", "application/json", "https://app.example")
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Equal(t, "https://app.example", rec.Header().Get("Access-Control-Allow-Origin"))
	assert.Contains(t, rec.Header().Get("Access-Control-Expose-Headers"), "Request-Id")
}

// keysOf is testKeys(t, key), or no keys for "".
func keysOf(t *testing.T, key string) *httpapi.Keys {
	if key == "" {
		return nil
	}
	return testKeys(t, key)
}
