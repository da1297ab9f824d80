package serve

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// TestCacheBreakpoints: a client's cache breakpoint (Anthropic's cache_control) makes an entry at the end of
// the marked turn, which a later request sharing the conversation up to it restores — on a hybrid target,
// whose recurrent state exists only at an entry's end, with the cache's interval off, so nothing else would
// place an entry there. The output is the cache-off output, the usage splits the prompt as Anthropic does,
// and cache_prompt false keeps a request out of the cache.
func TestCacheBreakpoints(t *testing.T) {
	seed := uint64(5)
	for _, bs := range []int{1, 4} {
		t.Run(fmt.Sprintf("bs%d", bs), func(t *testing.T) {
			e := cpuEngine(t, "qwen3_next", srvTemplate{})
			on, off := newServeWith(t, e, 64<<20, 0), newServeWith(t, e, 0, 0)
			sys := ports.ChatMessage{Role: "system", Content: "You are a terse helper for the breakpoint test"}
			req := func(breaks []int, msgs ...ports.ChatMessage) ports.GenerateRequest {
				return ports.GenerateRequest{Messages: msgs, MaxTokens: 8, BlockSize: bs, Seed: &seed, CacheBreakpoints: breaks}
			}
			both := func(r ports.GenerateRequest) ports.GenerateResult {
				want, got := gen(t, off, r), gen(t, on, r)
				assert.Equal(t, want.Content, got.Content, "the cache changes nothing")
				return got
			}
			sysTurn, err := srvTemplate{}.Render([]ports.ChatMessage{sys}, ports.ChatOptions{})
			assert.NoError(t, err)
			at := len(srvTokens(sysTurn))

			// Without a breakpoint a prompt sharing only the system turn finds nothing.
			plain := both(req(nil, sys, ports.ChatMessage{Role: "user", Content: "first question"}))
			assert.Zero(t, plain.CacheWriteTokens)
			miss := both(req(nil, sys, ports.ChatMessage{Role: "user", Content: "another one"}))
			assert.Zero(t, miss.CachedTokens, "no entry ends at the system turn")

			// With one on the system turn the first request writes it…
			first := both(req([]int{0}, sys, ports.ChatMessage{Role: "user", Content: "third try"}))
			assert.Zero(t, first.CachedTokens)
			assert.Equal(t, at, first.CacheWriteTokens, "written up to the breakpoint")
			// …and the next one reads it.
			second := both(req([]int{0}, sys, ports.ChatMessage{Role: "user", Content: "fourth"}))
			assert.Equal(t, at, second.CachedTokens, "restored from the breakpoint's entry")
			assert.Zero(t, second.CacheWriteTokens, "nothing new written up to the breakpoint")

			// A breakpoint at the end of the conversation (automatic caching) writes the whole history.
			u := ports.ChatMessage{Role: "user", Content: "fifth"}
			last := both(req([]int{1}, sys, u))
			assert.Equal(t, at, last.CachedTokens)
			hist, err := srvTemplate{}.Render([]ports.ChatMessage{sys, u}, ports.ChatOptions{})
			assert.NoError(t, err)
			assert.Equal(t, len(srvTokens(hist))-at, last.CacheWriteTokens)

			// cache_prompt false: nothing read, nothing written.
			before := on.PrefixCacheStats()
			r := req([]int{0}, sys, ports.ChatMessage{Role: "user", Content: "fourth"})
			r.NoCache = true
			none := both(r)
			assert.Zero(t, none.CachedTokens)
			assert.Zero(t, none.CacheWriteTokens)
			after := on.PrefixCacheStats()
			assert.Equal(t, before.Hits+before.Misses, after.Hits+after.Misses, "no lookup")
			assert.Equal(t, before.Entries, after.Entries, "no insert")
		})
	}
}

// TestCacheControlUsageOverHTTP: over the Messages API, usage splits the prompt as Anthropic does —
// input_tokens + cache_creation_input_tokens + cache_read_input_tokens is the prompt count_tokens gives —
// with the marked system turn written by the first request and read by the next, streamed or not.
func TestCacheControlUsageOverHTTP(t *testing.T) {
	h := newHarness(t, harnessOpts{cacheBytes: 16 << 20})
	body := func(user string, stream bool) string {
		return fmt.Sprintf(`{"model":"toy","max_tokens":4,"temperature":0,"stream":%v,`+
			`"system":[{"type":"text","text":"a long and stable system prompt","cache_control":{"type":"ephemeral"}}],`+
			`"messages":[{"role":"user","content":%q}]}`, stream, user)
	}
	type usage struct {
		Input    int `json:"input_tokens"`
		Creation int `json:"cache_creation_input_tokens"`
		Read     int `json:"cache_read_input_tokens"`
	}
	count := func(user string) int {
		status, _, raw := h.do("POST", "/v1/messages/count_tokens", fmt.Sprintf(`{"model":"toy","system":"a long and stable system prompt","messages":[{"role":"user","content":%q}]}`, user), nil)
		require.Equal(t, 200, status, string(raw))
		var c struct {
			N int `json:"input_tokens"`
		}
		require.NoError(t, json.Unmarshal(raw, &c))
		return c.N
	}
	message := func(user string) usage {
		status, _, raw := h.do("POST", "/v1/messages", body(user, false), nil)
		require.Equal(t, 200, status, string(raw))
		var m struct{ Usage usage }
		require.NoError(t, json.Unmarshal(raw, &m))
		return m.Usage
	}
	first := message("one")
	assert.Equal(t, count("one"), first.Input+first.Creation+first.Read)
	assert.Positive(t, first.Creation, "the marked system turn was written")
	second := message("two")
	assert.Equal(t, count("two"), second.Input+second.Creation+second.Read)
	assert.GreaterOrEqual(t, second.Read, first.Creation, "the marked system turn was read")

	// Streamed: the final message_delta carries the same split.
	status, _, raw := h.do("POST", "/v1/messages", body("three", true), nil)
	require.Equal(t, 200, status)
	var last usage
	for _, line := range strings.Split(string(raw), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"message_delta"`) {
			var ev struct{ Usage usage }
			require.NoError(t, json.Unmarshal([]byte(d), &ev))
			last = ev.Usage
		}
	}
	assert.Equal(t, count("three"), last.Input+last.Creation+last.Read)
	assert.GreaterOrEqual(t, last.Read, first.Creation)
}
