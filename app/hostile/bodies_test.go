package hostile_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	chatPath = "/v1/chat/completions"
	compPath = "/v1/completions"
	msgPath  = "/v1/messages"
)

var (
	ok200 = []int{http.StatusOK}
	bad   = []int{http.StatusBadRequest}
)

// chatBody and msgBody are a valid request of each API around one user content (a JSON value).
func chatBody(content string) string {
	return `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":` + content + `}]}`
}
func msgBody(content string) string {
	return `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":` + content + `}]}`
}

// bodyProbes are malformed, mistyped, oversized and out-of-range bodies on every generation endpoint.
func bodyProbes() []probe {
	var ps []probe
	huge := `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":"` + strings.Repeat("a", 5<<20) + `"}]}`
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for _, path := range []string{chatPath, msgPath, compPath} {
		good := chatBody(`"x"`)
		if path == compPath {
			good = `{"model":"toy","max_tokens":2,"prompt":"x"}`
		}
		for _, c := range []struct{ name, body string }{
			{"truncated JSON", `{"model":"toy","messages":[`},
			{"empty body", ``},
			{"an array", `[]`},
			{"a string", `"hello"`},
			{"null", `null`},
			{"nested 100k deep", deep},
			{"trailing garbage", chatBody(`"x"`) + `}}}`},
			{"messages a string", `{"model":"toy","max_tokens":2,"messages":"hi","prompt":7}`},
			{"max_tokens a string", `{"model":"toy","max_tokens":"ten","messages":[{"role":"user","content":"x"}],"prompt":"x"}`},
			{"max_tokens negative", `{"model":"toy","max_tokens":-1,"messages":[{"role":"user","content":"x"}],"prompt":"x"}`},
			{"max_tokens huge", `{"model":"toy","max_tokens":1e300,"messages":[{"role":"user","content":"x"}],"prompt":"x"}`},
			{"temperature a string", `{"model":"toy","max_tokens":2,"temperature":"hot","messages":[{"role":"user","content":"x"}],"prompt":"x"}`},
			{"temperature overflow", `{"model":"toy","max_tokens":2,"temperature":1e999,"messages":[{"role":"user","content":"x"}],"prompt":"x"}`},
			{"top_p negative", `{"model":"toy","max_tokens":2,"top_p":-3,"messages":[{"role":"user","content":"x"}],"prompt":"x"}`},
			{"invalid UTF-8", "{\"model\":\"toy\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfeb\"}],\"prompt\":\"a\xff\xfeb\"}"},
			{"lone surrogate escape", `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":"a\ud800b"}],"prompt":"a\ud800b"}`},
			{"NUL bytes", `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":"a\u0000b"}],"prompt":"a\u0000b"}`},
		} {
			want := bad
			if c.name == "NUL bytes" {
				want = []int{http.StatusOK, http.StatusBadRequest}
			}
			ps = append(ps, probe{name: path + ": " + c.name, method: "POST", path: path, body: c.body, want: want})
		}
		ps = append(ps,
			probe{name: path + ": over --max-body-bytes", method: "POST", path: path, body: huge, want: []int{http.StatusRequestEntityTooLarge}},
			probe{name: path + ": text/plain (a CORS simple request)", method: "POST", path: path, body: good,
				hdr: map[string]string{"Content-Type": "text/plain"}, want: []int{http.StatusUnsupportedMediaType}},
			probe{name: path + ": form-encoded", method: "POST", path: path, body: "a=b",
				hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, want: []int{http.StatusUnsupportedMediaType}},
			probe{name: path + ": no key", method: "POST", path: path, body: good,
				hdr: map[string]string{"Authorization": ""}, want: []int{http.StatusUnauthorized}},
			probe{name: path + ": a wrong key", method: "POST", path: path, body: good,
				hdr: map[string]string{"Authorization": "Bearer key-c"}, want: []int{http.StatusUnauthorized}},
			probe{name: path + ": DNS rebinding Host", method: "POST", path: path, body: good, host: "evil.example",
				want: []int{http.StatusForbidden}},
			probe{name: path + ": DNS rebinding Host with the port", method: "POST", path: path, body: good, host: "evil.example:8000",
				want: []int{http.StatusForbidden}},
			probe{name: path + ": GET", method: "GET", path: path, want: []int{http.StatusMethodNotAllowed}},
			probe{name: path + ": preflight from a foreign origin", method: "OPTIONS", path: path,
				hdr: map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
					"Access-Control-Request-Headers": "content-type, authorization"},
				want: []int{http.StatusOK, http.StatusNoContent, http.StatusForbidden, http.StatusMethodNotAllowed},
				check: func(t *testing.T, _ int, h http.Header, _ []byte) {
					assert.Empty(t, h.Get("Access-Control-Allow-Origin"), "%s: no CORS grant to a foreign origin", path)
				}},
			probe{name: path + ": preflight from the allowed origin", method: "OPTIONS", path: path,
				hdr: map[string]string{"Origin": "https://good.example", "Access-Control-Request-Method": "POST",
					"Access-Control-Request-Headers": "content-type, authorization"},
				want: []int{http.StatusOK, http.StatusNoContent},
				check: func(t *testing.T, _ int, h http.Header, _ []byte) {
					assert.Equal(t, "https://good.example", h.Get("Access-Control-Allow-Origin"), path)
				}},
			probe{name: path + ": a cross-site POST from a foreign origin", method: "POST", path: path, body: good,
				hdr: map[string]string{"Origin": "https://evil.example"}, want: []int{http.StatusOK, http.StatusForbidden},
				check: func(t *testing.T, _ int, h http.Header, _ []byte) {
					assert.Empty(t, h.Get("Access-Control-Allow-Origin"), "%s: the foreign page cannot read the answer", path)
				}},
		)
	}
	for _, path := range []string{chatPath, msgPath} {
		for _, c := range []struct{ name, body string }{
			{"no messages", `{"model":"toy","max_tokens":2,"messages":[]}`},
			{"an unknown role", `{"model":"toy","max_tokens":2,"messages":[{"role":"wizard","content":"x"}]}`},
			{"a role of the wrong type", `{"model":"toy","max_tokens":2,"messages":[{"role":7,"content":"x"}]}`},
			{"content an empty array", chatBody(`[]`)},
			{"content a number", chatBody(`42`)},
			{"a content part of an unknown type", chatBody(`[{"type":"hologram","text":"x"}]`)},
			{"a message null", `{"model":"toy","max_tokens":2,"messages":[null]}`},
		} {
			ps = append(ps, probe{name: path + ": " + c.name, method: "POST", path: path, body: c.body, want: bad})
		}
	}
	// Schema bombs: 20,000 optional properties in a response format and in a tool's schema.
	props := make([]string, 20000)
	for i := range props {
		props[i] = fmt.Sprintf(`"p%d":{"type":"string"}`, i)
	}
	bomb := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	ps = append(ps,
		probe{name: "chat: response_format schema bomb", method: "POST", path: chatPath, want: bad,
			body: `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"b","schema":` + bomb + `}}}`},
		probe{name: "chat: tool schema bomb, forced", method: "POST", path: chatPath, want: bad,
			body: `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":` + bomb + `}}],"tool_choice":"required"}`},
		probe{name: "messages: tool schema bomb, forced", method: "POST", path: msgPath, want: bad,
			body: `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":` + bomb + `}],"tool_choice":{"type":"any"}}`},
		probe{name: "chat: an invalid tool schema", method: "POST", path: chatPath, want: bad,
			body: `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"nope"}}}]}`},
		probe{name: "messages: an invalid tool schema", method: "POST", path: msgPath, want: bad,
			body: `{"model":"toy","max_tokens":2,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"nope"}}]}`},
		probe{name: "events: DNS rebinding Host", method: "GET", path: "/v1/events", host: "attacker.example", want: []int{http.StatusForbidden}},
		probe{name: "events: no key", method: "GET", path: "/v1/events", hdr: map[string]string{"Authorization": ""}, want: []int{http.StatusUnauthorized}},
		probe{name: "models: DNS rebinding Host", method: "GET", path: "/v1/models", host: "attacker.example", want: []int{http.StatusForbidden}},
		probe{name: "count_tokens: text/plain", method: "POST", path: "/v1/messages/count_tokens", body: msgBody(`"x"`),
			hdr: map[string]string{"Content-Type": "text/plain"}, want: []int{http.StatusUnsupportedMediaType}},
		probe{name: "count_tokens: truncated JSON", method: "POST", path: "/v1/messages/count_tokens", body: `{"model":`, want: bad},
	)
	return ps
}

// Every malformed, oversized, unauthenticated, rebinding or cross-site request gets its 4xx on both APIs,
// with an error body in the API's shape, and nothing else.
func TestBadBodies(t *testing.T) {
	s := start(t, 0, 5e9)
	hc := client()
	defer hc.CloseIdleConnections()
	for _, p := range bodyProbes() {
		send(t, hc, s.url, p)
	}
	// The server still answers a plain request on both APIs.
	send(t, hc, s.url, probe{name: "chat after the abuse", method: "POST", path: chatPath, body: chatBody(`"x"`), want: ok200})
	send(t, hc, s.url, probe{name: "messages after the abuse", method: "POST", path: msgPath, body: msgBody(`"x"`), want: ok200})
}

// promptTokens is a 200 answer's prompt token count on either API.
func promptTokens(t *testing.T, body []byte) int {
	var u struct {
		Usage struct {
			Prompt int `json:"prompt_tokens"`
			Input  int `json:"input_tokens"`
		} `json:"usage"`
		Input int `json:"input_tokens"`
	}
	require.NoError(t, json.Unmarshal(body, &u), string(body))
	return u.Usage.Prompt + u.Usage.Input + u.Input
}
