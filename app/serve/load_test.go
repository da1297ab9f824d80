package serve

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestE2ELoad runs 8 clients × 12 mixed requests (chat and completion, streamed and not, greedy and
// sampled) against one server with a queue large enough for all of them: every request must succeed.
func TestE2ELoad(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{concurrency: 2, queue: 16})
	const clients, per = 8, 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				path, body := "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"load %d %d"}],"max_tokens":24,"temperature":%v,"seed":%d,"stream":%v}`,
					c, i, float64(i%3)/2, c*per+i, i%2 == 0)
				if (c+i)%3 == 0 {
					path, body = "/v1/completions", fmt.Sprintf(`{"prompt":"load %d %d","max_tokens":24,"stream":%v}`, c, i, i%2 == 1)
				}
				req, err := http.NewRequestWithContext(t.Context(), "POST", h.srv.URL+path, strings.NewReader(body))
				if err != nil {
					panic(err)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := h.hc.Do(req)
				code := -1 // transport error
				if err == nil {
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
					if rerr != nil || strings.Contains(string(b), `"error"`) {
						code = -2 // broken or failed stream
					}
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, map[int]int{http.StatusOK: clients * per}, codes)
	assert.Zero(t, h.serve.QueueDepth())
	assert.Zero(t, h.target.Open.Load())
}

// BenchmarkE2EChat measures one greedy 32-token chat request through the whole server (HTTP, JSON, Serve,
// speculative decoder) on the toy model, i.e. the serving overhead around the engine.
func BenchmarkE2EChat(b *testing.B) { serveBench(b, false) }

// BenchmarkE2EChatStream is BenchmarkE2EChat streamed.
func BenchmarkE2EChatStream(b *testing.B) { serveBench(b, true) }

func serveBench(b *testing.B, stream bool) {
	h := newHarness(b, harnessOpts{})
	p := openai.ChatCompletionNewParams{Model: "toy", Messages: userMsg("benchmark"), MaxTokens: openai.Int(32),
		Temperature: openai.Float(0)}
	for b.Loop() {
		if stream {
			s := h.client.Chat.Completions.NewStreaming(b.Context(), p)
			for s.Next() {
			}
			require.NoError(b, s.Err())
			_ = s.Close()
			continue
		}
		_, err := h.client.Chat.Completions.New(b.Context(), p)
		require.NoError(b, err)
	}
}
