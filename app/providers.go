package app

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Provider formats a --provider may name.
const (
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
)

// ProviderSpec is one --provider NAME=FORMAT,URL[,key_env=VAR] (or [[providers]] table).
type ProviderSpec struct {
	Name   string
	Format string
	URL    string
	// KeyEnv names the environment variable holding the provider's key ("" : none is sent).
	KeyEnv string
}

// RouteSpec is one --route REGEX=PROVIDER (or [[routes]] table).
type RouteSpec struct {
	// Pattern matches the whole model name of a request (anchored at both ends).
	Pattern  string
	Provider string
}

// entryList is a repeatable flag whose every Set is one entry (commas are part of it: a regular expression
// or a provider's options may hold them).
type entryList []string

func (l *entryList) String() string { return strings.Join(*l, " ") }
func (l *entryList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// list marks a flag that a TOML array sets (each element one Set).
func (l *entryList) list() {}

// envName is what a key_env may be: a POSIX environment variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseProvider reads NAME=FORMAT,URL[,key_env=VAR].
func parseProvider(v string) (ProviderSpec, error) {
	var p ProviderSpec
	name, rest, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(name) == "" {
		return p, fmt.Errorf("--provider %q: want NAME=openai|anthropic,URL[,key_env=VAR]", v)
	}
	p.Name = strings.TrimSpace(name)
	parts := strings.Split(rest, ",")
	if len(parts) < 2 {
		return p, fmt.Errorf("--provider %q: want NAME=openai|anthropic,URL[,key_env=VAR]", v)
	}
	p.Format, p.URL = strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
	for _, opt := range parts[2:] {
		k, val, _ := strings.Cut(strings.TrimSpace(opt), "=")
		switch k {
		case "key_env":
			p.KeyEnv = val
		default:
			return p, fmt.Errorf("--provider %s: unknown option %q (known: key_env)", p.Name, opt)
		}
	}
	return p, p.check()
}

// check reports every problem of one provider at once.
func (p ProviderSpec) check() error {
	var errs []error
	if p.Format != FormatOpenAI && p.Format != FormatAnthropic {
		errs = append(errs, fmt.Errorf("--provider %s: format %q: want openai or anthropic", p.Name, p.Format))
	}
	if u, err := url.Parse(p.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--provider %s: URL %q: want http:// or https:// and a host", p.Name, p.URL))
	} else if u.User != nil {
		errs = append(errs, fmt.Errorf("--provider %s: the URL must not hold credentials; name the key's environment variable with key_env", p.Name))
	}
	if p.KeyEnv != "" && !envName.MatchString(p.KeyEnv) {
		errs = append(errs, fmt.Errorf("--provider %s: key_env %q is not an environment variable name", p.Name, p.KeyEnv))
	}
	return errors.Join(errs...)
}

// parseRoute reads REGEX=PROVIDER (split at the last '=': a pattern may hold one, a provider name not).
func parseRoute(v string) (RouteSpec, error) {
	i := strings.LastIndex(v, "=")
	if i <= 0 || strings.TrimSpace(v[i+1:]) == "" {
		return RouteSpec{}, fmt.Errorf("--route %q: want REGEX=PROVIDER", v)
	}
	r := RouteSpec{Pattern: v[:i], Provider: strings.TrimSpace(v[i+1:])}
	if _, err := regexp.Compile(`^(?:` + r.Pattern + `)$`); err != nil {
		return r, fmt.Errorf("--route %q: %w", v, err)
	}
	return r, nil
}

// Routing returns the providers and routes of c, checked: every problem is reported at once (a provider
// named twice, a route to a provider that is not declared, a provider no route uses is allowed).
func (c Config) Routing() ([]ProviderSpec, []RouteSpec, error) {
	var errs []error
	var providers []ProviderSpec
	seen := map[string]bool{}
	for _, v := range c.Providers {
		p, err := parseProvider(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[p.Name] {
			errs = append(errs, fmt.Errorf("--provider %s is declared twice", p.Name))
			continue
		}
		seen[p.Name] = true
		providers = append(providers, p)
	}
	var routes []RouteSpec
	for _, v := range c.Routes {
		r, err := parseRoute(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !seen[r.Provider] {
			errs = append(errs, fmt.Errorf("--route %q: no --provider is named %q", v, r.Provider))
			continue
		}
		routes = append(routes, r)
	}
	return providers, routes, errors.Join(errs...)
}

// providerKeys reads each provider's key from the environment variable its key_env names; an unset or
// empty variable is an error (a provider configured to need a key would refuse every request).
func providerKeys(providers []ProviderSpec, getenv func(string) string) (map[string]string, error) {
	var keys map[string]string // nil without keys: the configuration stays equal to one built by hand
	var errs []error
	for _, p := range providers {
		if p.KeyEnv == "" {
			continue
		}
		k := getenv(p.KeyEnv)
		if k == "" {
			errs = append(errs, fmt.Errorf("--provider %s: key_env %s is unset or empty", p.Name, p.KeyEnv))
			continue
		}
		if keys == nil {
			keys = map[string]string{}
		}
		keys[p.Name] = k
	}
	return keys, errors.Join(errs...)
}

// tomlTables are the TOML arrays of tables and the flag whose entries each table renders to.
var tomlTables = map[string]struct {
	flag   string
	render func(map[string]any) (string, error)
}{
	"providers": {"provider", providerTable},
	"routes":    {"route", routeTable},
}

// providerTable renders a [[providers]] table (name, format, url, key_env) as a --provider entry.
func providerTable(t map[string]any) (string, error) {
	f, err := tableStrings(t, []string{"name", "format", "url"}, []string{"key_env"})
	if err != nil {
		return "", err
	}
	v := f["name"] + "=" + f["format"] + "," + f["url"]
	if f["key_env"] != "" {
		v += ",key_env=" + f["key_env"]
	}
	return v, nil
}

// routeTable renders a [[routes]] table (match, provider) as a --route entry.
func routeTable(t map[string]any) (string, error) {
	f, err := tableStrings(t, []string{"match", "provider"}, nil)
	if err != nil {
		return "", err
	}
	return f["match"] + "=" + f["provider"], nil
}

// tableStrings checks a table's keys (required and optional, all strings) and returns their values.
func tableStrings(t map[string]any, required, optional []string) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	known := map[string]bool{}
	for _, k := range append(append([]string{}, required...), optional...) {
		known[k] = true
	}
	for k, v := range t {
		s, ok := v.(string)
		switch {
		case !known[k]:
			errs = append(errs, fmt.Errorf("unknown key %q", k))
		case !ok:
			errs = append(errs, fmt.Errorf("%s must be a string, not a %T", k, v))
		default:
			out[k] = s
		}
	}
	for _, k := range required {
		if _, ok := t[k]; !ok {
			errs = append(errs, fmt.Errorf("%s is required", k))
		}
	}
	return out, errors.Join(errs...)
}
