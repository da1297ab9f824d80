package serve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// cachedFor sends prompt as a chat with key and returns the response's cached_tokens.
func cachedFor(t *testing.T, h *harness, key, prompt string) int64 {
	t.Helper()
	var opts []option.RequestOption
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	resp, err := h.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "toy",
		Messages: userMsg(prompt), MaxTokens: openai.Int(4), Temperature: openai.Float(0)}, opts...)
	require.NoError(t, err)
	return resp.Usage.PromptTokensDetails.CachedTokens
}

// The prefix cache is partitioned by tenant: another key's client never restores (nor sees in
// cached_tokens) a prefix it did not send itself, while the same key's repeat does; without keys there is one
// tenant; --prefix-cache-shared shares the cache again.
func TestTenantPrefixCache(t *testing.T) {
	leakCheck(t)
	const pin = "const pin is fourseveneleven and the rest of a long prompt"
	t.Run("two keys", func(t *testing.T) {
		h := newHarness(t, harnessOpts{keys: []string{"key-a", "key-b", "key-c"}, cacheBytes: 64 << 20})
		assert.Zero(t, cachedFor(t, h, "key-a", pin), "a cold cache")
		assert.Zero(t, cachedFor(t, h, "key-b", pin), "B restores nothing of A's prompt")
		assert.Zero(t, cachedFor(t, h, "key-c", "const pin is fourseven and"), "nor does C's guess at a part of it")
		assert.Positive(t, cachedFor(t, h, "key-a", pin), "A's repeat restores A's prefix")
		assert.Positive(t, cachedFor(t, h, "key-b", pin), "B's own repeat restores B's prefix")
		st := h.serve.PrefixCacheStats()
		assert.Equal(t, int64(2), st.Hits, "exactly the two repeats hit")
	})
	t.Run("no keys: one tenant", func(t *testing.T) {
		h := newHarness(t, harnessOpts{cacheBytes: 64 << 20})
		assert.Zero(t, cachedFor(t, h, "", pin))
		assert.Positive(t, cachedFor(t, h, "", pin))
	})
	t.Run("shared", func(t *testing.T) {
		h := newHarness(t, harnessOpts{keys: []string{"key-a", "key-b"}, cacheBytes: 64 << 20, sharedCache: true})
		assert.Zero(t, cachedFor(t, h, "key-a", pin))
		assert.Positive(t, cachedFor(t, h, "key-b", pin), "a shared cache serves B what A cached")
	})
}

// tapped is one event with its raw JSON line.
type tapped struct {
	ev  ports.Event
	raw string
}

// subscribeAs opens GET /v1/events as the page does (the key as a Bearer header) and returns its events.
func subscribeAs(t *testing.T, h *harness, key string) <-chan tapped {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", h.srv.URL+"/v1/events", nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := h.hc.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := make(chan tapped, 4096)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev ports.Event
			if json.Unmarshal([]byte(line), &ev) == nil {
				out <- tapped{ev, line}
			}
		}
	}()
	select {
	case tp := <-out:
		require.Equal(t, "hello", tp.ev.Type)
	case <-time.After(5 * time.Second):
		t.Fatal("no hello event")
	}
	return out
}

// until collects a subscription's events up to the end event of generation id.
func until(t *testing.T, ch <-chan tapped, id string) []tapped {
	t.Helper()
	var got []tapped
	timeout := time.After(10 * time.Second)
	for {
		select {
		case tp, ok := <-ch:
			require.True(t, ok, "the stream ended before the end of %s", id)
			got = append(got, tp)
			if tp.ev.ID == id && tp.ev.Type == "end" {
				return got
			}
		case <-timeout:
			t.Fatalf("no end event for %s (got %d events)", id, len(got))
		}
	}
}

// generations returns the generation ids among events.
func generations(evs []tapped) map[string]bool {
	ids := map[string]bool{}
	for _, tp := range evs {
		if tp.ev.ID != "" {
			ids[tp.ev.ID] = true
		}
	}
	return ids
}

// /v1/events shows a tenant only its own generations, on either API; the operator key shows every tenant's;
// no event carries prompt text.
func TestTenantEvents(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{keys: []string{"key-a", "key-b"}, adminKey: "root", cacheBytes: 64 << 20})
	evA, evB, evOp := subscribeAs(t, h, "key-a"), subscribeAs(t, h, "key-b"), subscribeAs(t, h, "root")
	const secret = "the launch code is ZQXJVKWB and nobody else may know it"
	chat := func(key, prompt string) string {
		resp, err := h.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "toy",
			Messages: userMsg(prompt), MaxTokens: openai.Int(8), Temperature: openai.Float(0)}, option.WithAPIKey(key))
		require.NoError(t, err)
		return resp.ID
	}
	a1 := chat("key-a", secret)
	// A's Messages request too: both APIs run as the key's tenant.
	code, _, body := h.do("POST", "/v1/messages", `{"model":"toy","max_tokens":8,"messages":[{"role":"user","content":"`+secret+`"}]}`,
		map[string]string{"x-api-key": "key-a"})
	require.Equal(t, http.StatusOK, code, string(body))
	b1 := chat("key-b", "what is the weather")

	// B's stream, read up to the end of B's own generation (which started after A's had ended), holds B's
	// generation and nothing of A's.
	gotB := until(t, evB, b1)
	assert.Equal(t, map[string]bool{b1: true}, generations(gotB), "B sees only its own generation")
	a2 := chat("key-a", "one more")
	// A sees its three (two chats and the Messages request), read up to the end of the last; not B's.
	gotA := until(t, evA, a2)
	idsA := generations(gotA)
	assert.Len(t, idsA, 3, "A sees each of its generations")
	assert.True(t, idsA[a1] && idsA[a2])
	assert.False(t, idsA[b1], "A never sees B's generation")
	// The operator sees everything.
	gotOp := until(t, evOp, a2)
	idsOp := generations(gotOp)
	assert.Len(t, idsOp, 4)
	assert.True(t, idsOp[a1] && idsOp[b1] && idsOp[a2])

	// No event carries prompt text: a start says how long the prompt was, nothing more.
	for _, tp := range append(append(gotA, gotB...), gotOp...) {
		assert.NotContains(t, tp.raw, "ZQXJVKWB")
		assert.NotContains(t, tp.raw, "launch code")
		assert.NotContains(t, tp.raw, "weather")
		if tp.ev.Type == "start" {
			var raw struct {
				Start map[string]any `json:"start"`
			}
			require.NoError(t, json.Unmarshal([]byte(tp.raw), &raw))
			keys := make([]string, 0, len(raw.Start))
			for k := range raw.Start {
				keys = append(keys, k)
			}
			assert.ElementsMatch(t, []string{"model", "chat", "prompt_tokens", "max_tokens", "block_size", "adaptive"}, keys)
		}
	}
	// Server-wide load still reaches every subscriber.
	sawQueue := false
	for _, tp := range gotB {
		sawQueue = sawQueue || tp.ev.Type == "queue"
	}
	assert.True(t, sawQueue, "queue events are server-wide")

	// A wrong key gets no stream.
	code, _, _ = h.do("GET", "/v1/events", "", map[string]string{"Authorization": "Bearer key-c"})
	assert.Equal(t, http.StatusUnauthorized, code)
}
