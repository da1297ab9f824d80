package toolenv

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeServer answers /health with status (and code), and /v1/models to key ("" accepts anything).
func fakeServer(t *testing.T, code int, health, key string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(health))
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "http://127.0.0.1:8000", want: "http://127.0.0.1:8000"},
		{in: "http://127.0.0.1:8000/", want: "http://127.0.0.1:8000"},
		{in: "localhost:9000", want: "http://localhost:9000"},
		{in: "https://box.lan", want: "https://box.lan"},
		{in: "http://[::1]:8000", want: "http://[::1]:8000"},
		{in: "", wantErr: "empty"},
		{in: "ftp://x:1", wantErr: "http or https"},
		{in: "http://", wantErr: "no host"},
		{in: "http://h:1/v1", wantErr: "only scheme://host:port"},
		{in: "http://u:p@h:1", wantErr: "only scheme://host:port"},
		{in: "http://h:1/?a=b", wantErr: "only scheme://host:port"},
	}
	for _, tc := range tests {
		got, err := ParseAddr(tc.in)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:8000", "h:1", "https://[::1]/", "http://%zz", "://", "http://a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseAddr(s)
		if err != nil {
			return
		}
		again, err := ParseAddr(got)
		require.NoError(t, err, "ParseAddr's result must parse: %q → %q", s, got)
		assert.Equal(t, got, again)
		assert.False(t, strings.HasSuffix(got, "/"))
	})
}

// The sh form survives a real shell with every awkward character: eval of the script sets the exact value.
func TestScriptQuotesForShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this machine")
	}
	for _, v := range []string{"plain", "it's", `a"b`, "$HOME `id` \\n", "sp ace;rm -rf /", "'''"} {
		script, err := Script([]Var{{"HIGGS_TEST_V", v}}, ShellSh)
		require.NoError(t, err)
		out, err := exec.Command(sh, "-c", script+`printf %s "$HIGGS_TEST_V"`).Output()
		require.NoError(t, err, script)
		assert.Equal(t, v, string(out), script)
	}
	assert.Equal(t, `'it'\''s'`, quoteSh("it's"))
	assert.Equal(t, `'it\'s \\ x'`, quoteFish(`it's \ x`))
}

func TestShellenv(t *testing.T) {
	ok := fakeServer(t, http.StatusOK, `{"status":"ok"}`, "k-1")
	loading := fakeServer(t, http.StatusServiceUnavailable, `{"status":"loading"}`, "")
	draining := fakeServer(t, http.StatusServiceUnavailable, `{"status":"draining"}`, "")
	degraded := fakeServer(t, http.StatusServiceUnavailable, `{"status":"degraded","error":"rank 1 lost"}`, "")
	other := fakeServer(t, http.StatusNotFound, `404 page not found`, "")
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{name: "sh", args: []string{"--addr", ok}, wantOut: "export OPENAI_BASE_URL='" + ok + "/v1'\nexport ANTHROPIC_BASE_URL='" + ok + "'\n"},
		{name: "bash", args: []string{"--addr", ok, "--shell", "bash"}, wantOut: "export OPENAI_BASE_URL='" + ok + "/v1'\nexport ANTHROPIC_BASE_URL='" + ok + "'\n"},
		{name: "zsh", args: []string{"--addr", ok + "/", "--shell", "zsh"}, wantOut: "export OPENAI_BASE_URL='" + ok + "/v1'\nexport ANTHROPIC_BASE_URL='" + ok + "'\n"},
		{name: "fish", args: []string{"--addr", ok, "--shell", "fish"}, wantOut: "set -gx OPENAI_BASE_URL '" + ok + "/v1'\nset -gx ANTHROPIC_BASE_URL '" + ok + "'\n"},
		{name: "key flag", args: []string{"--addr", ok, "--api-key", "k-1"},
			wantOut: "export OPENAI_BASE_URL='" + ok + "/v1'\nexport ANTHROPIC_BASE_URL='" + ok + "'\nexport OPENAI_API_KEY='k-1'\nexport ANTHROPIC_API_KEY='k-1'\n"},
		{name: "key and addr from env", env: map[string]string{AddrEnv: ok, KeyEnv: "k-1"}, args: []string{"--shell", "fish"},
			wantOut: "set -gx OPENAI_BASE_URL '" + ok + "/v1'\nset -gx ANTHROPIC_BASE_URL '" + ok + "'\nset -gx OPENAI_API_KEY 'k-1'\nset -gx ANTHROPIC_API_KEY 'k-1'\n"},
		{name: "a key in the tools' own variables is never printed", env: map[string]string{"OPENAI_API_KEY": "sk-real", AddrEnv: ok},
			wantOut: "export OPENAI_BASE_URL='" + ok + "/v1'\nexport ANTHROPIC_BASE_URL='" + ok + "'\n"},
		{name: "loading passes with a note", args: []string{"--addr", loading},
			wantOut: "export OPENAI_BASE_URL='" + loading + "/v1'\nexport ANTHROPIC_BASE_URL='" + loading + "'\n", wantErr: "still loading"},
		{name: "nothing answers", args: []string{"--addr", gone.URL}, wantCode: 1, wantErr: "no higgsd server answers at " + gone.URL},
		{name: "draining", args: []string{"--addr", draining}, wantCode: 1, wantErr: "shutting down"},
		{name: "degraded", args: []string{"--addr", degraded}, wantCode: 1, wantErr: "rank 1 lost"},
		{name: "another server", args: []string{"--addr", other}, wantCode: 1, wantErr: "not higgsd's health"},
		{name: "wrong key", args: []string{"--addr", ok, "--api-key", "nope"}, wantCode: 1, wantErr: "refuses the API key"},
		{name: "bad shell", args: []string{"--addr", ok, "--shell", "csh"}, wantCode: 2, wantErr: "want sh, bash, zsh or fish"},
		{name: "bad addr", args: []string{"--addr", "ftp://x"}, wantCode: 2, wantErr: "http or https"},
		{name: "stray argument", args: []string{"--addr", ok, "extra"}, wantCode: 2, wantErr: "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Shellenv(t.Context(), tc.args, env(tc.env), http.DefaultClient, &stdout, &stderr)
			assert.Equal(t, tc.wantCode, code, stderr.String())
			assert.Equal(t, tc.wantOut, stdout.String())
			if tc.wantErr != "" {
				assert.Contains(t, stderr.String(), tc.wantErr)
			}
		})
	}
}

func TestPrepareExec(t *testing.T) {
	ok := fakeServer(t, http.StatusOK, `{"status":"ok"}`, "")
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on this machine")
	}
	environ := []string{"PATH=/usr/bin:/bin", "OPENAI_BASE_URL=https://api.openai.com/v1", "OPENAI_API_KEY=sk-real", "KEEP=1"}
	c, note, err := PrepareExec(t.Context(), []string{"--addr", ok, "--", "sh", "-c", "true"}, env(nil), environ, http.DefaultClient, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Empty(t, note)
	assert.Equal(t, []string{"sh", "-c", "true"}, c.Argv)
	assert.Equal(t, []string{"PATH=/usr/bin:/bin", "KEEP=1", "OPENAI_BASE_URL=" + ok + "/v1", "ANTHROPIC_BASE_URL=" + ok,
		"OPENAI_API_KEY=" + NoKey, "ANTHROPIC_API_KEY=" + NoKey}, c.Env,
		"the server's URLs and a placeholder key replace the variables of the same name (a real provider key never "+
			"travels to higgsd); nothing else changes")

	_, _, err = PrepareExec(t.Context(), []string{"--addr", ok}, env(nil), environ, http.DefaultClient, &bytes.Buffer{})
	assert.ErrorIs(t, err, ErrUsage)
	_, _, err = PrepareExec(t.Context(), []string{"--addr", ok, "--", "no-such-command-higgs"}, env(nil), environ, http.DefaultClient, &bytes.Buffer{})
	assert.ErrorIs(t, err, ErrNotFound)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	_, _, err = PrepareExec(t.Context(), []string{"--addr", gone.URL, "--", "sh"}, env(nil), environ, http.DefaultClient, &bytes.Buffer{})
	assert.ErrorIs(t, err, ErrNoServer)

	var stderr bytes.Buffer
	assert.Equal(t, 2, Exec(context.Background(), []string{"--addr", ok}, env(nil), environ, http.DefaultClient, &stderr))
	assert.Contains(t, stderr.String(), "no command to run")
	assert.Equal(t, 127, Exec(context.Background(), []string{"--addr", ok, "--", "no-such-command-higgs"}, env(nil), environ, http.DefaultClient, &stderr))
	assert.Equal(t, 1, Exec(context.Background(), []string{"--addr", gone.URL, "--", "sh"}, env(nil), environ, http.DefaultClient, &stderr))
}
