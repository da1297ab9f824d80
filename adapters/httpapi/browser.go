package httpapi

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// Browser is the policy for what a web page may make a user's browser do with the server: the checks Guard
// adds to every route. A zero Browser answers to localhost names and IP addresses only, with CORS off.
//
// A page on another site can make the browser send requests the page cannot read the answers to: a form or
// fetch "simple request" (a POST with text/plain, a form type or no Content-Type at all) goes out without
// asking the server first. The JSON routes refuse every content type but JSON (415), so such a request never
// starts a generation; one with application/json needs a CORS preflight, which only the origins of
// CORSOrigins pass. A DNS-rebinding page (a name of the attacker's that first resolves to the attacker's
// server, then to 127.0.0.1) is same-origin with the server and could read its answers; its requests carry
// the attacker's name in Host, which the Host check refuses.
type Browser struct {
	// Listen is the host the server listens on (the --host value): a name here is accepted in Host.
	Listen string
	// AllowedHosts are further Host values accepted, each "name" (any port), "name:port" (that port only),
	// ".name" (the name and every name under it) or "*" (any Host: the check is off). Localhost names
	// (localhost, *.localhost) and IP addresses are always accepted: a DNS-rebinding attacker controls neither.
	AllowedHosts []string
	// CORSOrigins are the origins ("https://app.example", "http://localhost:3000") whose pages may call the
	// API across origins, or "*" for every origin; none means CORS is off (no Access-Control-* header, a
	// preflight is answered as any other request of its method, so the browser refuses the call).
	CORSOrigins []string
}

// Refusal writes an API's answer, in its own shape, to a request the browser checks refuse: the status
// (403, 415), a short machine-readable code ("host_not_allowed", "unsupported_media_type") and a message.
type Refusal func(w http.ResponseWriter, status int, code, message string)

// CORSMaxAge is how long, in seconds, a browser may reuse a preflight's answer.
const CORSMaxAge = 3600

// corsExposed are the answer headers a cross-origin page may read besides the safelisted ones.
const corsExposed = "Retry-After, Request-Id"

// guard is the compiled Browser policy.
type guard struct {
	anyHost   bool
	hosts     map[string]bool // "name" and "name:port", lower case
	suffixes  []string        // ".name", lower case
	anyOrigin bool
	origins   map[string]bool // normalized origins
}

func newGuard(b Browser) *guard {
	g := &guard{hosts: map[string]bool{}, origins: map[string]bool{}}
	if h := normalHost(b.Listen); h != "" && !isUnspecified(h) {
		g.hosts[h] = true
	}
	for _, h := range b.AllowedHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		switch {
		case h == "*":
			g.anyHost = true
		case strings.HasPrefix(h, "."):
			g.suffixes = append(g.suffixes, strings.TrimSuffix(h, "."))
		case h != "":
			g.hosts[strings.TrimSuffix(h, ".")] = true
		}
	}
	for _, o := range b.CORSOrigins {
		if o = strings.TrimSpace(o); o == "*" {
			g.anyOrigin = true
		} else if n, err := NormalOrigin(o); err == nil {
			g.origins[n] = true
		}
	}
	return g
}

// normalHost lower-cases a host name and drops a trailing dot and IPv6 brackets.
func normalHost(h string) string {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

func isUnspecified(h string) bool {
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsUnspecified()
}

// hostAllowed reports whether the Host of a request (host or host:port) is one the server answers to.
func (g *guard) hostAllowed(hostport string) bool {
	if g.anyHost || hostport == "" {
		// No Host at all is an HTTP/1.0 client: never a browser, which always sends one.
		return true
	}
	hostport = strings.ToLower(hostport)
	name, port, err := net.SplitHostPort(hostport)
	if err != nil {
		name, port = hostport, ""
	}
	name = normalHost(name)
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	if g.hosts[name] || port != "" && g.hosts[net.JoinHostPort(name, port)] {
		return true
	}
	for _, s := range g.suffixes {
		if name == s[1:] || strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// corsOrigin returns the Access-Control-Allow-Origin value for a request's Origin, "" when CORS is off for
// it.
func (g *guard) corsOrigin(origin string) string {
	if origin == "" {
		return ""
	}
	if n, err := NormalOrigin(origin); err == nil && g.origins[n] {
		return origin
	}
	if g.anyOrigin {
		return "*"
	}
	return ""
}

// NormalOrigin checks that o is a web origin (scheme://host[:port], http or https, nothing after) and returns
// it in the form browsers send: lower case, without the scheme's default port.
func NormalOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	if err != nil {
		return "", fmt.Errorf("origin %q: %w", o, err)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" || u.Host == "" || u.User != nil || u.Opaque != "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") {
		return "", fmt.Errorf("origin %q is not scheme://host[:port] with http or https", o)
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, nil
}

// Guard wraps one of an API's routes in the browser checks, answered by refuse in the API's shape: a Host
// the server does not answer to is refused (403) before anything else; a CORS preflight from an allowed
// origin is answered here (204); an allowed origin's other requests get the CORS headers on whatever next
// answers. Wrap it inside the API's recovery and outside its authentication (a preflight carries no key).
func (s *Server) Guard(next http.Handler, refuse Refusal) http.Handler {
	return s.guard(next, refuse, false)
}

// GuardJSON is Guard for a route whose POST takes a JSON body: a POST with any other Content-Type, or none,
// is refused with 415 before its body is read (application/json, with no charset or UTF-8, passes).
func (s *Server) GuardJSON(next http.Handler, refuse Refusal) http.Handler {
	return s.guard(next, refuse, true)
}

func (s *Server) guard(next http.Handler, refuse Refusal, jsonBody bool) http.Handler {
	g := s.browser
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			RefuseUnread(w, r)
			refuse(w, http.StatusForbidden, "host_not_allowed", fmt.Sprintf("this server does not answer to "+
				"Host %q (a guard against DNS rebinding): it answers to localhost, IP addresses and the names "+
				"given with --allowed-hosts", r.Host))
			return
		}
		h := w.Header()
		if len(g.origins) > 0 {
			h.Add("Vary", "Origin")
		}
		if allow := g.corsOrigin(r.Header.Get("Origin")); allow != "" {
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				preflight(w, r, allow)
				return
			}
			h.Set("Access-Control-Allow-Origin", allow)
			h.Set("Access-Control-Expose-Headers", corsExposed)
		}
		if jsonBody && r.Method == http.MethodPost && !isJSON(r.Header.Get("Content-Type")) {
			RefuseUnread(w, r)
			h.Set("Accept", "application/json")
			ct := r.Header.Get("Content-Type")
			if ct == "" {
				ct = "none"
			}
			refuse(w, http.StatusUnsupportedMediaType, "unsupported_media_type", fmt.Sprintf("the request body "+
				"must be JSON sent with Content-Type: application/json (got %s; curl -d sends "+
				"application/x-www-form-urlencoded unless given -H 'Content-Type: application/json')", ct))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// preflight answers a CORS preflight from an allowed origin: the methods the APIs use, the headers the
// page asked for (any header is harmless from an origin the operator trusts, and the SDKs send their own
// x-stainless-* and anthropic-* headers), and how long to keep the answer.
func preflight(w http.ResponseWriter, r *http.Request, allow string) {
	h := w.Header()
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Origin", allow)
	h.Set("Access-Control-Allow-Methods", "GET, POST")
	headers := "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta"
	if asked := requestedHeaders(r.Header.Values("Access-Control-Request-Headers")); asked != "" {
		headers = asked
	}
	h.Set("Access-Control-Allow-Headers", headers)
	h.Set("Access-Control-Max-Age", fmt.Sprint(CORSMaxAge))
	// Chrome asks before a public page reaches a private address (Private Network Access).
	if strings.EqualFold(r.Header.Get("Access-Control-Request-Private-Network"), "true") {
		h.Set("Access-Control-Allow-Private-Network", "true")
	}
	RefuseUnread(w, r)
	w.WriteHeader(http.StatusNoContent)
}

// requestedHeaders is the list of header names a preflight asked for, those that are not tokens dropped.
func requestedHeaders(values []string) string {
	var names []string
	for _, v := range values {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" && isToken(n) {
				names = append(names, strings.ToLower(n))
			}
		}
	}
	return strings.Join(names, ", ")
}

func isToken(s string) bool {
	for _, c := range s {
		if c > 0x7e || c <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

// isJSON reports whether a Content-Type is JSON: application/json with no charset or UTF-8 (RFC 8259: JSON
// between systems is UTF-8).
func isJSON(contentType string) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8") || strings.EqualFold(cs, "utf8")
}
