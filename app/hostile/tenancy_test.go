package hostile_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cached is a 200 answer's restored prompt tokens on either API.
func cached(t *testing.T, body []byte) int {
	var u struct {
		ID    string `json:"id"`
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
			CacheRead int `json:"cache_read_input_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(body, &u), string(body))
	return u.Usage.Details.Cached + u.Usage.CacheRead
}

func asKey(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

// genID is a 200 answer's id.
func genID(t *testing.T, body []byte) string {
	var v struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v.ID
}

// The prefix cache is partitioned by tenant: whatever tenant A sent, another tenant (a fresh one per probe,
// so that its own earlier probes cannot explain a hit) restores nothing of it, and so reads nothing from
// cached_tokens, on either API, by the whole prompt or a guess at its start; A's own repeat is a hit (the
// cache is on).
func TestCrossTenantCache(t *testing.T) {
	s := start(t, 0, 5e9)
	hc := client()
	defer hc.CloseIdleConnections()
	const pin = "const pin is fourseveneleven and the rest of a long prompt"
	zero := func(t *testing.T, _ int, _ http.Header, body []byte) {
		assert.Zero(t, cached(t, body), "tenant B sees nothing of tenant A's prompt")
	}
	send(t, hc, s.url, probe{name: "cache: A primes", method: "POST", path: chatPath, body: chatBody(`"` + pin + `"`), want: ok200})
	send(t, hc, s.url, probe{name: "cache: A primes messages", method: "POST", path: msgPath, body: msgBody(`"` + pin + `"`), want: ok200})
	for i, c := range []struct{ name, path, body string }{
		{"chat, the whole prompt", chatPath, chatBody(`"` + pin + `"`)},
		{"chat, a guess at the start", chatPath, chatBody(`"const pin is fourseven"`)},
		{"chat, a longer prompt", chatPath, chatBody(`"` + pin + ` and more"`)},
		{"messages, the whole prompt", msgPath, msgBody(`"` + pin + `"`)},
		{"messages, a guess at the start", msgPath, msgBody(`"const pin is four"`)},
	} {
		send(t, hc, s.url, probe{name: "cache: another tenant probes " + c.name, method: "POST", path: c.path, body: c.body,
			hdr: asKey(probeKey(i)), want: ok200, check: zero})
	}
	send(t, hc, s.url, probe{name: "cache: A's repeat hits", method: "POST", path: chatPath, body: chatBody(`"` + pin + `"`), want: ok200,
		check: func(t *testing.T, _ int, _ http.Header, body []byte) {
			assert.Positive(t, cached(t, body), "the cache is on: A's own repeat restores A's prefix")
		}})
}

// subscribe opens /v1/events with key and returns each event's raw JSON, after the hello.
func subscribe(t *testing.T, hc *http.Client, url, key string) (<-chan string, func()) {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	tally.cases.Add(1)
	if err != nil {
		tally.crashes.Add(1)
		t.Fatalf("events: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("events: %d", resp.StatusCode)
	}
	tally.right.Add(1)
	out := make(chan string, 4096)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				out <- line
			}
		}
	}()
	select {
	case first := <-out:
		require.Contains(t, first, `"hello"`)
	case <-time.After(5 * time.Second):
		t.Fatal("no hello event")
	}
	return out, func() { resp.Body.Close() }
}

// upTo reads events until the end event of generation id and returns the generation ids seen and the raw
// events.
func upTo(t *testing.T, ch <-chan string, id string) (map[string]bool, string) {
	t.Helper()
	ids := map[string]bool{}
	var raw strings.Builder
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-ch:
			require.True(t, ok, "the event stream ended before %s did", id)
			raw.WriteString(line + "\n")
			var ev struct{ Type, ID string }
			require.NoError(t, json.Unmarshal([]byte(line), &ev))
			if ev.ID != "" {
				ids[ev.ID] = true
			}
			if ev.ID == id && ev.Type == "end" {
				return ids, raw.String()
			}
		case <-timeout:
			t.Fatalf("no end event for %s", id)
		}
	}
}

// Tenant B's /v1/events never shows tenant A's generations (either API, streamed or not) nor any prompt
// text; the operator's shows both; a wrong key gets no stream.
func TestCrossTenantEvents(t *testing.T) {
	s := start(t, 0, 5e9)
	hc := client()
	defer hc.CloseIdleConnections()
	evB, closeB := subscribe(t, hc, s.url, keyB)
	defer closeB()
	evOp, closeOp := subscribe(t, hc, s.url, admin)
	defer closeOp()
	const secret = "the launch code is ZQXJVKWB"
	var idsA []string
	for _, c := range []struct{ path, body string }{
		{chatPath, chatBody(`"` + secret + `"`)},
		{msgPath, msgBody(`"` + secret + `"`)},
		{chatPath, `{"model":"toy","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"` + secret + `"}]}`},
		{msgPath, `{"model":"toy","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"` + secret + `"}]}`},
	} {
		a := send(t, hc, s.url, probe{name: "events: A generates on " + c.path, method: "POST", path: c.path, body: c.body, want: ok200})
		if strings.Contains(c.body, `"stream":true`) {
			_, rest, _ := strings.Cut(string(a.body), `"id":"`)
			id, _, _ := strings.Cut(rest, `"`)
			idsA = append(idsA, id)
		} else {
			idsA = append(idsA, genID(t, a.body))
		}
	}
	b := send(t, hc, s.url, probe{name: "events: B generates", method: "POST", path: chatPath, body: chatBody(`"weather"`),
		hdr: asKey(keyB), want: ok200})
	idB := genID(t, b.body)
	seenB, rawB := upTo(t, evB, idB)
	assert.Equal(t, map[string]bool{idB: true}, seenB, "B's stream holds B's generation only")
	seenOp, rawOp := upTo(t, evOp, idB)
	for _, id := range idsA {
		require.NotEmpty(t, id)
		assert.False(t, seenB[id], "B never sees A's %s", id)
	}
	// The operator sees all five generations, by the ids their answers carry (chat and Messages alike).
	for _, id := range idsA {
		assert.True(t, seenOp[id], "the operator sees A's %s", id)
	}
	assert.Len(t, seenOp, 5, "the operator sees every tenant's generations")
	for _, raw := range []string{rawB, rawOp} {
		assert.NotContains(t, raw, "ZQXJVKWB", "no event carries prompt text")
		assert.NotContains(t, raw, "weather", "no event carries prompt text")
	}
	send(t, hc, s.url, probe{name: "events: a wrong key", method: "GET", path: "/v1/events", hdr: asKey("key-c"),
		want: []int{http.StatusUnauthorized}})
	send(t, hc, s.url, probe{name: "events: a key in the query", method: "GET", path: "/v1/events?key=" + keyA,
		hdr: map[string]string{"Authorization": ""}, want: []int{http.StatusUnauthorized}})
}
