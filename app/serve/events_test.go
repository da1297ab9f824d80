package serve

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// subscribeEvents opens GET /v1/events and returns the events as they come (the channel closes with the stream).
func subscribeEvents(t *testing.T, h *harness) <-chan ports.Event {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", h.srv.URL+"/v1/events", nil)
	require.NoError(t, err)
	resp, err := h.hc.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	out := make(chan ports.Event, 4096)
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
				out <- ev
			}
		}
	}()
	select {
	case ev := <-out:
		require.Equal(t, "hello", ev.Type, "a subscription starts with hello")
		require.NotNil(t, ev.Hello)
		assert.Equal(t, "toy", ev.Hello.Model)
		assert.Equal(t, 4, ev.Hello.MaxBlockSize)
	case <-time.After(5 * time.Second):
		t.Fatal("no hello event")
	}
	return out
}

// eventsUntilEnd collects the events of generation id up to its end event.
func eventsUntilEnd(t *testing.T, ch <-chan ports.Event, id string) []ports.Event {
	t.Helper()
	var got []ports.Event
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			require.True(t, ok, "event stream ended before the end of %s", id)
			if ev.ID != id {
				continue
			}
			got = append(got, ev)
			if ev.Type == "end" {
				return got
			}
		case <-timeout:
			t.Fatalf("no end event for %s (got %d events)", id, len(got))
		}
	}
}

func TestEventsAccountForEveryRound(t *testing.T) {
	for _, adaptive := range []bool{false, true} {
		h := newHarness(t, harnessOpts{blockSize: 4, adaptive: adaptive, noEOS: true})
		ch := subscribeEvents(t, h)
		code, _, body := h.do("POST", "/v1/completions", `{"prompt":"abc","max_tokens":40,"temperature":0}`, nil)
		require.Equal(t, http.StatusOK, code, string(body))
		var resp struct {
			ID    string `json:"id"`
			Usage struct {
				CompletionTokens int             `json:"completion_tokens"`
				Speculative      ports.SpecUsage `json:"speculative"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(body, &resp))
		evs := eventsUntilEnd(t, ch, resp.ID)
		require.Equal(t, "start", evs[0].Type)
		assert.Equal(t, 4, evs[0].Start.BlockSize)
		assert.Equal(t, adaptive, evs[0].Start.Adaptive)

		kinds := map[string]int{}
		draftRounds, plain, committed, policies := 0, 0, 1, 0 // the first token comes from the prefill
		for _, ev := range evs {
			switch ev.Type {
			case "round":
				r := ev.Round
				if r.BlockSize > 1 {
					draftRounds++
				} else {
					plain++
				}
				committed += r.Committed
				for _, tk := range r.Tokens {
					kinds[tk.Kind]++
					assert.NotEmpty(t, tk.Text)
				}
				assert.GreaterOrEqual(t, r.Tau, 1.0)
			case "policy":
				policies++
				assert.NotEmpty(t, ev.Policy.Reason)
				assert.Contains(t, []string{"speculative", "plain"}, ev.Policy.Mode)
			}
		}
		spec := resp.Usage.Speculative
		end := evs[len(evs)-1].End
		assert.Equal(t, "length", end.Finish)
		assert.Equal(t, spec, end.Usage, "the end event carries the response's usage.speculative")
		assert.Equal(t, spec.Accepted, kinds[ports.TokenAccepted], "adaptive %v", adaptive)
		assert.Equal(t, spec.Drafted, kinds[ports.TokenAccepted]+kinds[ports.TokenRejected]+kinds[ports.TokenDrafted])
		assert.Equal(t, spec.Rounds, draftRounds)
		assert.Equal(t, spec.PlainSteps, plain)
		assert.Equal(t, spec.PlainSteps, kinds[ports.TokenPlain])
		assert.Equal(t, resp.Usage.CompletionTokens, committed)
		assert.Positive(t, policies, "the first decision is announced")
		if !adaptive {
			assert.LessOrEqual(t, policies, 2, "a fixed block size is one decision, plus the budget-shortened last rounds")
			assert.Positive(t, spec.Rounds)
			assert.Zero(t, spec.PlainSteps)
		}
	}
}

func TestEventsReportQueue(t *testing.T) {
	h := newHarness(t, harnessOpts{blockSize: 4, noEOS: true})
	ch := subscribeEvents(t, h)
	code, _, _ := h.do("POST", "/v1/completions", `{"prompt":"abc","max_tokens":5}`, nil)
	require.Equal(t, http.StatusOK, code)
	var running []int
	timeout := time.After(5 * time.Second)
	for len(running) < 2 {
		select {
		case ev := <-ch:
			if ev.Type == "queue" {
				running = append(running, ev.Queue.Running)
			}
		case <-timeout:
			t.Fatalf("queue events: %v", running)
		}
	}
	assert.Equal(t, []int{1, 0}, running, "running goes up when a generation starts, down when it ends")
}

// A subscriber that does not read loses events instead of holding generation up.
func TestHubDropsForSlowSubscribers(t *testing.T) {
	hb := newHub(func() ports.Event { return ports.Event{Type: "hello"} })
	ch, cancel := hb.Subscribe(ports.EventScope{})
	defer cancel()
	assert.True(t, hb.active())
	for range eventBuffer + 10 {
		hb.broadcast(ports.Event{Type: "queue"})
	}
	<-ch // hello
	for range eventBuffer - 1 {
		<-ch
	}
	hb.broadcast(ports.Event{Type: "queue"})
	ev := <-ch
	assert.Equal(t, 11, ev.Dropped, "the next event delivered says how many were lost")
	cancel()
	assert.False(t, hb.active())
	_, open := <-ch
	assert.False(t, open, "cancel closes the channel")
}

// BenchmarkServeEvents measures a whole generation on the fake engine with nobody listening to the event
// stream and with one listener draining it: the first is the cost every request pays for the live view.
func BenchmarkServeEvents(b *testing.B) {
	for _, listen := range []bool{false, true} {
		name := "no-listener"
		if listen {
			name = "one-listener"
		}
		b.Run(name, func(b *testing.B) {
			serve, err := NewServe(ServeConfig{BlockSize: 4, MaxConcurrency: 1, QueueSize: 1}, zerolog.Nop())
			require.NoError(b, err)
			eng, _ := srvEngine(4096, 0, true)
			require.NoError(b, serve.SetEngine(eng))
			if listen {
				ch, cancel := serve.Events().Subscribe(ports.EventScope{})
				defer cancel()
				go func() {
					for range ch {
					}
				}()
			}
			req := ports.GenerateRequest{Prompt: "abc", MaxTokens: 64}
			for b.Loop() {
				if _, err := serve.Generate(b.Context(), req, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLiveObserveIdle is what each decoding step pays for the live view while nobody listens: the
// bookkeeping and one atomic load, against a step that costs tens of microseconds on the tiny demo model and
// milliseconds on real ones.
func BenchmarkLiveObserveIdle(b *testing.B) {
	serve, err := NewServe(ServeConfig{BlockSize: 4, MaxConcurrency: 1, QueueSize: 1}, zerolog.Nop())
	require.NoError(b, err)
	lv := &live{s: serve, tok: srvTokenizer{}, id: "x", last: []ports.Token{1, 2}}
	rs := speculative.RoundStats{Block: []ports.Token{1, 2, 3, 4}, BlockSize: 4, Accepted: 1, Committed: 2,
		DraftTime: time.Microsecond, VerifyTime: time.Microsecond, Policy: "fixed"}
	for b.Loop() {
		lv.observe(rs)
	}
}
