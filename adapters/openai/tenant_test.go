package openai

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// testKeys are tenant keys (tenant-1, tenant-2… in order).
func testKeys(t *testing.T, keys ...string) *httpapi.Keys {
	t.Helper()
	return testKeysAdmin(t, "", keys...)
}

func testKeysAdmin(t *testing.T, admin string, keys ...string) *httpapi.Keys {
	t.Helper()
	named := make([]httpapi.NamedKey, len(keys))
	for i, k := range keys {
		named[i] = httpapi.NamedKey{Key: k, From: "test"}
	}
	k, err := httpapi.NewKeys(named, admin)
	require.NoError(t, err)
	return k
}

// Each key's requests reach the generator as its own tenant (never the key); the operator key is the
// operator's tenant; without keys every request is the one tenant "".
func TestTenantOfEachKey(t *testing.T) {
	gen := &scripted{ready: true, res: ports.GenerateResult{FinishReason: "stop"}}
	s := New(gen, Options{Log: zerolog.Nop(), Keys: testKeysAdmin(t, "root", "key-a", "key-b")})
	for key, want := range map[string]ports.Tenant{"key-a": "tenant-1", "key-b": "tenant-2", "root": httpapi.OperatorTenant} {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			body := `{"messages":[{"role":"user","content":"hi"}]}`
			switch path {
			case "/v1/completions":
				body = `{"prompt":"hi"}`
			}
			gen.got = ports.GenerateRequest{}
			rec := httptest.NewRecorder()
			req := localRequest("POST", path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			s.ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			assert.Equal(t, want, gen.got.Tenant, "%s %s", key, path)
		}
	}
	gen.got = ports.GenerateRequest{Tenant: "stale"}
	open := New(gen, Options{Log: zerolog.Nop()})
	rec := httptest.NewRecorder()
	open.ServeHTTP(rec, localRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"hi"}`)))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, ports.Tenant(""), gen.got.Tenant, "no keys: one tenant")
}

// The event stream subscribes with the caller's scope: its own tenant for a tenant key, everything for the
// operator key, the one tenant without keys; a wrong key gets nothing.
func TestEventStreamScope(t *testing.T) {
	for _, c := range []struct {
		name, admin string
		keys        []string
		key         string
		want        ports.EventScope
		status      int
	}{
		{"tenant", "root", []string{"key-a", "key-b"}, "key-b", ports.EventScope{Tenant: "tenant-2"}, http.StatusOK},
		{"operator", "root", []string{"key-a", "key-b"}, "root", ports.EventScope{All: true, Tenant: httpapi.OperatorTenant}, http.StatusOK},
		{"no keys", "", nil, "", ports.EventScope{}, http.StatusOK},
		{"no keys, a key sent anyway", "", nil, "whatever", ports.EventScope{}, http.StatusOK},
		{"wrong key", "root", []string{"key-a"}, "key-b", ports.EventScope{}, http.StatusUnauthorized},
		{"missing key", "", []string{"key-a"}, "", ports.EventScope{}, http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &fakeEvents{feed: make(chan ports.Event), cancelled: make(chan struct{}), scopes: make(chan ports.EventScope, 1)}
			srv := httptest.NewServer(New(&scripted{ready: true}, Options{Log: zerolog.Nop(), Events: src, Keys: testKeysAdmin(t, c.admin, c.keys...)}))
			defer srv.Close()
			// The page's request: GET with the key as a Bearer header (web/app.js, subscribe), no body.
			req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/events", nil)
			require.NoError(t, err)
			if c.key != "" {
				req.Header.Set("Authorization", "Bearer "+c.key)
			}
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, c.status, resp.StatusCode)
			if c.status != http.StatusOK {
				assert.Empty(t, src.scopes, "a refused client never subscribes")
				return
			}
			assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			require.NoError(t, err)
			assert.Contains(t, line, `"type":"hello"`, "the page's feed starts")
			select {
			case got := <-src.scopes:
				assert.Equal(t, c.want, got)
			case <-time.After(5 * time.Second):
				t.Fatal("no subscription")
			}
		})
	}
}

// The page subscribes to /v1/events with the key in the Authorization header — never in the URL, where it
// would reach logs and history — and resubscribes when the key changes, so that a tenant's page switched to
// the operator key (or another tenant's) shows that scope.
func TestPageSendsKeyAsHeader(t *testing.T) {
	js, err := web.ReadFile("web/app.js")
	require.NoError(t, err)
	src := string(js)
	calls := regexp.MustCompile(`fetch\(\s*"/v1/events"\s*,\s*\{[^}]*headers:\s*headers\((false)?\)`).FindAllString(src, -1)
	assert.Len(t, calls, 1, "the feed is fetched with the page's headers")
	assert.Regexp(t, `h\["Authorization"\]\s*=\s*"Bearer "\s*\+\s*key`, src, "the key goes in the Authorization header")
	assert.NotRegexp(t, `/v1/events\?`, src, "no key (or anything) in the feed's URL")
	assert.NotContains(t, src, "new EventSource(", "EventSource cannot send the header: the page reads the stream with fetch")
	assert.Regexp(t, `\$\("apikey"\)\.addEventListener\("change"`, src, "a changed key resubscribes")
}

// The page's script, run in node against a stub DOM and server (testdata/pagefeed.js): it subscribes with the
// key it has (none at first: refused), and each change of the key field resubscribes at once with the new
// key as a Bearer header, never in the URL, with no content type on the GET.
func TestPageFeedInNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the page's script is checked statically by TestPageSendsKeyAsHeader")
	}
	out, err := exec.CommandContext(t.Context(), node, "testdata/pagefeed.js", "web/app.js").Output()
	require.NoError(t, err, "%s", out)
	var got struct {
		Calls []struct {
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"calls"`
		Shown []string `json:"shown"`
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	var auth []string
	for _, c := range got.Calls {
		assert.Equal(t, "/v1/events", c.URL)
		assert.NotContains(t, c.Headers, "Content-Type", "a GET has no body")
		auth = append(auth, c.Headers["Authorization"])
	}
	assert.Equal(t, []string{"", "Bearer good", "Bearer other", "Bearer good"}, auth)
	assert.Equal(t, []string{"live: enter the API key, retrying", "live: connected", "live: enter the API key, retrying", "live: connected"}, got.Shown)
}
