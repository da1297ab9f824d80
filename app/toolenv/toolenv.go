// Package toolenv points other programs at a running higgsd: `higgsd shellenv` prints the environment an
// OpenAI or Anthropic SDK (Codex, Claude Code, …) reads to find a server (base URLs, and keys when one is
// given), and `higgsd exec -- CMD` runs CMD with it. Both first check that the server answers, so a tool is
// never pointed at nothing.
package toolenv

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultAddr is where higgsd listens by default.
const DefaultAddr = "http://127.0.0.1:8000"

// Environment variables the subcommands read: AddrEnv the server's URL, KeyEnv the key to hand the tools
// (the same variable higgsd's --api-key reads, so a shell that starts the server can point tools at it).
const (
	AddrEnv = "HIGGS_ADDR"
	KeyEnv  = "HIGGS_API_KEY"
)

// checkTimeout bounds the health check: a local server answers at once, even while loading.
const checkTimeout = 5 * time.Second

// Options are the subcommands' flags.
type Options struct {
	// Addr is the server's base URL (scheme, host and port; no path).
	Addr string
	// Key is the API key handed to the tools ("" none: no key variable is set or printed).
	Key string
	// Shell is the syntax shellenv prints: sh (also bash and zsh) or fish.
	Shell string
}

// flags declares the shared flags on fs, bound to o, with defaults from getenv.
func (o *Options) flags(fs *flag.FlagSet, getenv func(string) string) {
	addr := getenv(AddrEnv)
	if addr == "" {
		addr = DefaultAddr
	}
	fs.StringVar(&o.Addr, "addr", addr, "the higgsd server's URL (default $"+AddrEnv+", else "+DefaultAddr+")")
	fs.StringVar(&o.Key, "api-key", getenv(KeyEnv), "API key to hand the tools as OPENAI_API_KEY and ANTHROPIC_API_KEY (default $"+KeyEnv+"; none: no key variables)")
}

// ParseAddr checks a server URL and returns it without a trailing slash. A bare HOST:PORT gets http://.
func ParseAddr(s string) (string, error) {
	if s == "" {
		return "", errors.New("--addr is empty: want the server's URL, such as " + DefaultAddr)
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("--addr %q is not a URL: %w", s, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("--addr %q: the scheme must be http or https", s)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("--addr %q names no host", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "":
		return "", fmt.Errorf("--addr %q: want only scheme://host:port (the server's root; /v1 is added where a tool needs it)", s)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Var is one environment variable handed to the tools.
type Var struct{ Name, Value string }

// Vars are the variables for a server at addr (as ParseAddr returns it): the OpenAI SDKs' base URL ends in
// /v1, Anthropic's is the root (its SDKs add /v1/messages); the key variables only when key is given.
func Vars(addr, key string) []Var {
	v := []Var{{"OPENAI_BASE_URL", addr + "/v1"}, {"ANTHROPIC_BASE_URL", addr}}
	if key != "" {
		v = append(v, Var{"OPENAI_API_KEY", key}, Var{"ANTHROPIC_API_KEY", key})
	}
	return v
}

// ErrNoServer is wrapped by Check when nothing usable answers at the address.
var ErrNoServer = errors.New("no higgsd server answers")

// Check asks addr's /health whether a higgsd server answers there; with a key it also asks /v1/models, so a
// key the server refuses is reported now rather than by the tool. A server still loading its model passes
// (the tool's first request waits for it) and note says so; one draining or degraded does not.
func Check(ctx context.Context, hc *http.Client, addr, key string) (note string, err error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	code, body, err := get(ctx, hc, addr+"/health", "")
	if err != nil {
		return "", fmt.Errorf("%w at %s: %w (start it with `higgsd`, or pass --addr)", ErrNoServer, addr, err)
	}
	var h struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	_ = json.Unmarshal(body, &h) // a body that is not higgsd's leaves Status empty, reported below
	switch {
	case code == http.StatusOK && h.Status == "ok":
	case code == http.StatusServiceUnavailable && h.Status == "loading":
		note = "the server at " + addr + " is still loading its model; requests wait for it"
	case h.Status == "draining":
		return "", fmt.Errorf("%w at %s: it is shutting down (draining)", ErrNoServer, addr)
	case h.Status == "degraded":
		return "", fmt.Errorf("%w at %s: it is degraded: %s", ErrNoServer, addr, h.Error)
	default:
		return "", fmt.Errorf("%w at %s: /health answered %d %q, not higgsd's health (is --addr another server?)",
			ErrNoServer, addr, code, clip(body))
	}
	if key == "" {
		return note, nil
	}
	code, body, err = get(ctx, hc, addr+"/v1/models", key)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w at %s: /v1/models: %w", ErrNoServer, addr, err)
	case code == http.StatusUnauthorized:
		return "", fmt.Errorf("the server at %s refuses the API key given (--api-key or $%s): use one of its --api-key keys", addr, KeyEnv)
	case code != http.StatusOK:
		return "", fmt.Errorf("%w at %s: /v1/models answered %d %q", ErrNoServer, addr, code, clip(body))
	}
	return note, nil
}

func get(ctx context.Context, hc *http.Client, u, key string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, body, err
}

// clip shortens a body quoted in an error.
func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}
