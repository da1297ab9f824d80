package hostile_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gen is a generation request on one API, streamed or not.
func gen(path string, maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model":"toy","max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":"tell me a story"}]}`,
		maxTokens, stream)
}

// ended reports whether a streamed body ends with its API's terminal event: OpenAI's [DONE], Anthropic's
// message_stop or error.
func ended(path, body string) bool {
	ev := strings.Split(strings.TrimSpace(body), "\n\n")
	last := ev[len(ev)-1]
	if path == msgPath {
		return strings.HasPrefix(last, "event: message_stop") || strings.HasPrefix(last, "event: error")
	}
	return last == "data: [DONE]"
}

// idle waits until no target session is open: a client that left stops costing the engine.
func idle(t *testing.T, s *server, what string) bool {
	t.Helper()
	return assert.Eventually(t, func() bool { return s.target.Open.Load() == 0 }, 5*time.Second, 2*time.Millisecond,
		"%s: the engine let go", what)
}

// raw sends bytes over a fresh TCP connection, pausing between pieces, then reads what comes back until the
// server closes or the deadline passes.
func raw(addr string, pieces []string, pause time.Duration, deadline time.Duration) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(deadline))
	for _, p := range pieces {
		if _, err := io.WriteString(c, p); err != nil {
			return "", err
		}
		time.Sleep(pause)
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Slow clients and clients that leave: a body trickled byte by byte is still answered; half a body or half
// a header then silence costs nothing once the client goes; a body withheld by a client that stays is
// answered 408 after --body-timeout, and a refused request's withheld body is not waited for; a reader that stalls mid-stream still gets the
// whole stream; a client that disconnects mid-stream or before a non-streamed answer frees the engine
// within moments, on both APIs; afterwards the server answers normally.
func TestSlowAndVanishingClients(t *testing.T) {
	s := start(t, time.Millisecond, 5e9)
	addr := strings.TrimPrefix(s.url, "http://")
	hc := client()
	defer hc.CloseIdleConnections()
	count := func(name string, right bool, err error) {
		tally.cases.Add(1)
		if right {
			tally.right.Add(1)
		} else {
			t.Errorf("%s: wrong outcome (err %v)", name, err)
		}
	}
	for _, path := range []string{chatPath, msgPath} {
		body := gen(path, 4, false)
		head := "POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
			keyA + "\r\nConnection: close\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n"
		// A body trickled one byte every 2 ms.
		pieces := []string{head}
		for i := range len(body) {
			pieces = append(pieces, body[i:i+1])
		}
		got, err := raw(addr, pieces, 2*time.Millisecond, 10*time.Second)
		count(path+": a trickled body", strings.HasPrefix(got, "HTTP/1.1 200"), err)
		if strings.Contains(got, " 500 ") {
			tally.fivexx.Add(1)
		}
		// Half a body, then the client goes.
		_, err = raw(addr, []string{head, body[:len(body)/2]}, 50*time.Millisecond, 100*time.Millisecond)
		count(path+": half a body then gone", true, err)
		// Half a body, then silence while the client stays: 408 after --body-timeout, not a held connection.
		begun := time.Now()
		got, err = raw(addr, []string{head, body[:len(body)/2]}, 0, 5*time.Second)
		count(path+": half a body then silence", strings.HasPrefix(got, "HTTP/1.1 408") && time.Since(begun) < 4*time.Second, err)
		// A refused request (the wrong content type) that declares a body it never sends: refused at once.
		begun = time.Now()
		got, err = raw(addr, []string{strings.Replace(head, "application/json", "text/plain", 1)}, 0, 5*time.Second)
		count(path+": a refused request withholding its body", strings.HasPrefix(got, "HTTP/1.1 415") && time.Since(begun) < 500*time.Millisecond, err)
		// Half a header, then the client goes.
		_, err = raw(addr, []string{"POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Ty"}, 50*time.Millisecond, 100*time.Millisecond)
		count(path+": half a header then gone", true, err)
		// A garbage request line.
		got, err = raw(addr, []string{"\x00\x01\x02 GARBAGE\r\n\r\n"}, 0, 2*time.Second)
		count(path+": a garbage request line", strings.HasPrefix(got, "HTTP/1.1 400"), err)

		// A reader that stalls mid-stream still gets the whole stream with its ending.
		req, _ := http.NewRequest("POST", s.url+path, strings.NewReader(gen(path, 200, true)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+keyA)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		br := bufio.NewReader(resp.Body)
		first, _ := br.ReadString('\n')
		time.Sleep(300 * time.Millisecond)
		rest, err := io.ReadAll(br)
		resp.Body.Close()
		count(path+": a stalled reader", resp.StatusCode == http.StatusOK && ended(path, first+string(rest)), err)

		// A client that disconnects mid-stream.
		ctx, cancel := context.WithCancel(context.Background())
		req, _ = http.NewRequestWithContext(ctx, "POST", s.url+path, strings.NewReader(gen(path, 3000, true)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+keyA)
		resp, err = hc.Do(req)
		require.NoError(t, err)
		_, _ = bufio.NewReader(resp.Body).ReadString('\n')
		cancel()
		resp.Body.Close()
		count(path+": gone mid-stream", resp.StatusCode == http.StatusOK && idle(t, s, path+" mid-stream"), nil)

		// A client that gives up before a non-streamed answer.
		quick := &http.Client{Transport: &http.Transport{}, Timeout: 50 * time.Millisecond}
		req, _ = http.NewRequest("POST", s.url+path, strings.NewReader(gen(path, 3000, false)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+keyA)
		_, err = quick.Do(req)
		quick.CloseIdleConnections()
		count(path+": gone before the answer", err != nil && idle(t, s, path+" before the answer"), err)
	}
	send(t, hc, s.url, probe{name: "chat after the slow clients", method: "POST", path: chatPath, body: gen(chatPath, 4, false), want: ok200})
	send(t, hc, s.url, probe{name: "messages after the slow clients", method: "POST", path: msgPath, body: gen(msgPath, 4, false), want: ok200})
}

// busy are the right answers to work while the queue may be full: 200, or the API's documented busy status
// (OpenAI 429; Anthropic 529 overloaded_error, docs/http-api.md).
func busy(path string) []int {
	if path == msgPath {
		return []int{http.StatusOK, 529}
	}
	return []int{http.StatusOK, http.StatusTooManyRequests}
}

// A burst of 100 requests over both APIs, streamed and not: each is answered 200 (streams with their
// ending) or the API's busy status (the queue is full), and the engine is idle afterwards.
func TestBurst(t *testing.T) {
	s := start(t, 0, 5e9)
	hc := client()
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := range 100 {
		path := []string{chatPath, msgPath}[i%2]
		stream := i%4 >= 2
		wg.Go(func() {
			send(t, hc, s.url, probe{name: fmt.Sprintf("burst %d %s stream=%v", i, path, stream), method: "POST", path: path,
				body: gen(path, 16, stream), hdr: asKey([]string{keyA, keyB}[i%3%2]),
				want: busy(path),
				check: func(t *testing.T, status int, _ http.Header, body []byte) {
					if status == http.StatusOK && stream {
						assert.True(t, ended(path, string(body)), "burst %d: the stream ends with its terminal event", i)
					}
				}})
		})
	}
	wg.Wait()
	idle(t, s, "after the burst")
}

// Shutdown under load on both APIs: requests still running at the deadline end with their API's terminal
// event (streams) or a 200 or 503 (not streamed), and those that end in time end normally; new work during the drain gets 503 on both APIs; Run
// returns ErrCut.
func TestShutdownUnderLoad(t *testing.T) {
	s := start(t, 2*time.Millisecond, 2*time.Second)
	hc := client()
	defer hc.CloseIdleConnections()
	type call struct {
		path   string
		stream bool
		max    int
	}
	var calls []call
	for _, path := range []string{chatPath, msgPath} {
		for _, stream := range []bool{false, true} {
			// One that the deadline cuts, one that finishes during the drain: eight in all, the batch's
			// size, so that every one is generating when the shutdown starts.
			calls = append(calls, call{path, stream, 3000}, call{path, stream, 40})
		}
	}
	answers := make([]chan answer, len(calls))
	for i, c := range calls {
		answers[i] = make(chan answer, 1)
		go func() {
			body := strings.Replace(gen(c.path, c.max, c.stream), `{`, `{"block_size":1,`, 1)
			answers[i] <- do(hc, s.url, probe{method: "POST", path: c.path, body: body})
		}()
	}
	require.Eventually(t, func() bool { return s.target.Open.Load() == int64(len(calls)) }, 10*time.Second, time.Millisecond,
		"every request is generating")
	stopped := make(chan error, 1)
	go func() { stopped <- s.stop(t) }()
	// New work while draining: 503 on both APIs (the server keeps its listener until the drain ends).
	probeHC := client()
	defer probeHC.CloseIdleConnections()
	require.Eventually(t, func() bool {
		a := do(probeHC, s.url, probe{method: "GET", path: "/health"})
		return a.err == nil && a.status == http.StatusServiceUnavailable
	}, 5*time.Second, time.Millisecond, "the server drains")
	for _, path := range []string{chatPath, msgPath} {
		for _, stream := range []bool{false, true} {
			send(t, probeHC, s.url, probe{name: fmt.Sprintf("drain: new work on %s stream=%v", path, stream), method: "POST", path: path,
				body: gen(path, 4, stream), want: []int{http.StatusServiceUnavailable},
				check: func(t *testing.T, _ int, h http.Header, _ []byte) {
					assert.NotEmpty(t, h.Get("Retry-After"), "a refusal while draining says when to retry")
				}})
		}
	}
	for i, c := range calls {
		a := <-answers[i]
		name := fmt.Sprintf("shutdown: in flight %s stream=%v max_tokens=%d", c.path, c.stream, c.max)
		tally.cases.Add(1)
		switch {
		case a.err != nil:
			tally.crashes.Add(1)
			t.Errorf("%s: %v", name, a.err)
		case c.max == 40 && a.status == http.StatusOK && (!c.stream || ended(c.path, string(a.body))) &&
			strings.Contains(string(a.body), map[string]string{chatPath: `"finish_reason":"length"`, msgPath: `"stop_reason":"max_tokens"`}[c.path]):
			tally.right.Add(1)
		case c.max == 40:
			t.Errorf("%s: did not finish during the drain: %d %.300s", name, a.status, a.body)
		case c.stream && a.status == http.StatusOK && ended(c.path, string(a.body)):
			tally.right.Add(1)
		case !c.stream && (a.status == http.StatusOK || a.status == http.StatusServiceUnavailable):
			tally.right.Add(1)
		default:
			if a.status >= 500 && a.status != http.StatusServiceUnavailable {
				tally.fivexx.Add(1)
			}
			t.Errorf("%s: %d, ended %v: %.300s", name, a.status, ended(c.path, string(a.body)), a.body)
		}
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop")
	}
}
