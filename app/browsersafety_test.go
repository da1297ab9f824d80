package app

import (
	"context"
	"errors"
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

	"github.com/higgs-go/higgs/app/serve"
)

func TestConfigBrowserFlags(t *testing.T) {
	cfg, err := LoadConfig([]string{"--allowed-hosts", "a.example, b.example:9000", "--allowed-hosts", ".corp.example",
		"--cors-origin", "https://app.example", "--cors-origin", "http://localhost:3000"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"a.example", "b.example:9000", ".corp.example"}, cfg.AllowedHosts)
	assert.Equal(t, []string{"https://app.example", "http://localhost:3000"}, cfg.CORSOrigins)

	file := filepath.Join(t.TempDir(), "higgs.toml")
	require.NoError(t, os.WriteFile(file, []byte("allowed_hosts = [\"f1.example\", \"f2.example\"]\ncors-origin = \"https://f.example\"\n"), 0o644))
	cfg, err = LoadConfig([]string{"--config", file}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"f1.example", "f2.example"}, cfg.AllowedHosts, "a TOML list")
	assert.Equal(t, []string{"https://f.example"}, cfg.CORSOrigins)
	cfg, err = LoadConfig([]string{"--config", file}, env(map[string]string{"HIGGS_ALLOWED_HOSTS": "e1.example,e2.example"}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"e1.example", "e2.example"}, cfg.AllowedHosts, "the environment replaces the file's list")
	cfg, err = LoadConfig([]string{"--config", file, "--allowed-hosts", "c.example"}, env(map[string]string{"HIGGS_ALLOWED_HOSTS": "e.example"}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"c.example"}, cfg.AllowedHosts, "the command line replaces both")

	_, err = LoadConfig([]string{"--allowed-hosts", "http://a.example", "--allowed-hosts", "a.example:0",
		"--cors-origin", "app.example", "--cors-origin", "https://app.example/path", "--cors-origin", "null"}, env(nil), io.Discard)
	for _, want := range []string{`--allowed-hosts "http://a.example"`, `--allowed-hosts "a.example:0"`,
		`origin "app.example"`, `origin "https://app.example/path"`, `origin "null"`} {
		assert.ErrorContains(t, err, want)
	}
	_, err = LoadConfig([]string{"--allowed-hosts", "*", "--cors-origin", "*"}, env(nil), io.Discard)
	assert.NoError(t, err, "both checks may be opened by name")
}

// The default Host rule: strict on loopback; any Host on a wider bind only with an API key and no list.
func TestConfigBrowserPolicy(t *testing.T) {
	for _, c := range []struct {
		host, key string
		allowed   []string
		want      []string
	}{
		{"127.0.0.1", "", nil, nil},
		{"127.0.0.1", "k", nil, nil},
		{"localhost", "k", nil, nil},
		{"0.0.0.0", "", nil, nil},
		{"0.0.0.0", "k", nil, []string{"*"}},
		{"::", "k", nil, []string{"*"}},
		{"192.168.1.5", "k", nil, []string{"*"}},
		{"0.0.0.0", "k", []string{"gpu-box.lan"}, []string{"gpu-box.lan"}},
		{"127.0.0.1", "", []string{"gpu-box.lan"}, []string{"gpu-box.lan"}},
	} {
		cfg := DefaultConfig()
		cfg.Host, cfg.AllowedHosts = c.host, c.allowed
		if c.key != "" {
			cfg.APIKeys = []string{c.key}
		}
		b := cfg.BrowserPolicy()
		assert.Equal(t, c.want, b.AllowedHosts, "%+v", c)
		assert.Equal(t, c.host, b.Listen)
	}
	cfg := DefaultConfig()
	cfg.Host, cfg.AdminKey = "0.0.0.0", "root"
	assert.Equal(t, []string{"*"}, cfg.BrowserPolicy().AllowedHosts, "the operator's key alone turns authentication on")
}

// browserHost serves both APIs and the event stream as higgsd wires them, from cfg, with no model loaded:
// every probe here is answered before a generation would start.
func browserHost(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	unloaded := func(context.Context, func(done, total int64)) (serve.Engine, func() error, error) {
		return serve.Engine{}, nil, errors.New("no model in this test")
	}
	svc, err := ProvideFleet(cfg, func(ModelSpec) LoadFunc { return unloaded }, zerolog.Nop())
	require.NoError(t, err)
	host := ProvideHTTP(cfg, svc, zerolog.Nop())
	keys, err := ProvideKeys(cfg)
	require.NoError(t, err)
	ProvideResponses(ProvideAPI(cfg, svc, svc.Events(), svc, host, keys, zerolog.Nop()))
	ProvideMessages(cfg, svc, host, keys, zerolog.Nop())
	srv := httptest.NewServer(host)
	t.Cleanup(srv.Close)
	return srv
}

type probe struct{ method, path, body string }

var (
	openAIPosts = []probe{{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`}, {"POST", "/v1/completions", `{"prompt":"hi"}`},
		{"POST", "/v1/responses", `{"input":"hi"}`}}
	anthropicPosts = []probe{{"POST", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`}}
	gets = []probe{{"GET", "/v1/events", ""}, {"GET", "/v1/models", ""}, {"GET", "/health", ""}, {"GET", "/", ""}, {"GET", "/metrics", ""}}
)

func send(t *testing.T, srv *httptest.Server, p probe, host string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if p.body != "" {
		body = strings.NewReader(p.body)
	}
	req, err := http.NewRequestWithContext(t.Context(), p.method, srv.URL+p.path, body)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	hc := srv.Client()
	hc.Timeout = 5 * time.Second // a route that answers instead of refusing (the event stream) never ends
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp, string(b)
}

// A DNS-rebinding page (its own name in Host) reaches higgsd in the default set-up, loopback without a key:
// every route of both APIs, the event stream, the page and /metrics refuse it, each API in its own shape.
func TestServerRefusesDNSRebinding(t *testing.T) {
	cfg := DefaultConfig()
	srv := browserHost(t, cfg)
	port := srv.Listener.Addr().String()
	port = port[strings.LastIndex(port, ":"):]
	json := map[string]string{"Content-Type": "application/json"}
	for _, host := range []string{"evil.example" + port, "evil.example", "rebind.attacker.example" + port} {
		for _, p := range append(append(append([]probe{}, openAIPosts...), anthropicPosts...), gets...) {
			resp, body := send(t, srv, p, host, json)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s Host %s", p.method, p.path, host)
			switch {
			case strings.HasPrefix(p.path, "/v1/messages"):
				assert.Contains(t, body, `{"type":"error","error":{"type":"permission_error"`, p.path)
			case p.path != "/metrics":
				assert.Contains(t, body, `"type":"invalid_request_error","param":null,"code":"host_not_allowed"`, p.path)
			}
		}
	}
	// The names a local browser uses pass the check (what follows is the route's own answer).
	for _, host := range []string{"localhost" + port, "127.0.0.1" + port, "[::1]" + port} {
		for _, p := range gets[1:] {
			resp, _ := send(t, srv, p, host, nil)
			assert.NotEqual(t, http.StatusForbidden, resp.StatusCode, "%s Host %s", p.path, host)
		}
	}
	// A name listed with --allowed-hosts passes.
	cfg.AllowedHosts = []string{"gpu-box.lan"}
	srv = browserHost(t, cfg)
	resp, _ := send(t, srv, probe{"GET", "/v1/models", ""}, "gpu-box.lan"+port, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = send(t, srv, probe{"GET", "/v1/models", ""}, "evil.example"+port, nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// A cross-site form or text/plain POST (a CORS simple request) starts nothing on any JSON endpoint.
func TestServerRefusesNonJSONBodies(t *testing.T) {
	srv := browserHost(t, DefaultConfig())
	for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
		for _, p := range append(append([]probe{}, openAIPosts...), anthropicPosts...) {
			resp, body := send(t, srv, p, "", map[string]string{"Content-Type": ct})
			assert.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "%s %q: %s", p.path, ct, body)
			if strings.HasPrefix(p.path, "/v1/messages") {
				assert.Contains(t, body, `{"type":"error","error":{"type":"invalid_request_error"`)
			} else {
				assert.Contains(t, body, `"code":"unsupported_media_type"`)
			}
		}
	}
}

// CORS is off unless an origin is named; a named origin's preflight is answered on both APIs, before the
// API key, and any other origin gets no CORS header.
func TestServerCORS(t *testing.T) {
	preflight := func(origin string) map[string]string {
		return map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST",
			"Access-Control-Request-Headers": "authorization, content-type, x-api-key, anthropic-version"}
	}
	paths := []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/models", "/v1/events"}

	srv := browserHost(t, DefaultConfig())
	for _, path := range paths {
		resp, _ := send(t, srv, probe{"OPTIONS", path, ""}, "", preflight("https://app.example"))
		assert.NotEqual(t, http.StatusNoContent, resp.StatusCode, path)
		assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), path)
	}

	cfg := DefaultConfig()
	cfg.APIKeys, cfg.CORSOrigins = []string{"k"}, []string{"https://app.example"}
	srv = browserHost(t, cfg)
	for _, path := range paths {
		resp, _ := send(t, srv, probe{"OPTIONS", path, ""}, "", preflight("https://app.example"))
		assert.Equal(t, http.StatusNoContent, resp.StatusCode, path)
		assert.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"), path)
		assert.Equal(t, "GET, POST", resp.Header.Get("Access-Control-Allow-Methods"), path)
		assert.Equal(t, "authorization, content-type, x-api-key, anthropic-version", resp.Header.Get("Access-Control-Allow-Headers"), path)
		assert.Equal(t, "3600", resp.Header.Get("Access-Control-Max-Age"), path)

		resp, _ = send(t, srv, probe{"OPTIONS", path, ""}, "", preflight("https://evil.example"))
		assert.NotEqual(t, http.StatusNoContent, resp.StatusCode, path)
		assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), path)
	}
	resp, _ := send(t, srv, anthropicPosts[0], "", map[string]string{"Origin": "https://app.example",
		"Content-Type": "application/json", "x-api-key": "wrong"})
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"), "the allowed page reads its error")
}
