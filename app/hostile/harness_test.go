package hostile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/internal/fakeengine"
	"github.com/higgs-go/higgs/app/serve"
	"github.com/higgs-go/higgs/ports"
)

// The tenants' keys and the operator's.
const (
	keyA  = "key-a"
	keyB  = "key-b"
	admin = "root"
)

// probeKeys are more tenants, each probing the cache once with a fresh partition of its own.
const probeKeys = 8

func probeKey(i int) string { return fmt.Sprintf("probe-%d", i) }

// server is one running higgsd: the real Server with both APIs over the fake engine.
type server struct {
	url    string
	target *fakeengine.Target
	cancel context.CancelFunc
	done   chan error
}

// start runs the real wiring on 127.0.0.1:0 with two tenant keys, an operator key, one allowed CORS origin
// and a prefix cache; every forward pass of the fake target takes delay. At the test's end it shuts the
// server down, checks that every target session was closed and that no goroutine was left, counting leaks.
func start(t *testing.T, delay, shutdown time.Duration) *server {
	t.Helper()
	before := goleak.IgnoreCurrent()
	cfg := app.DefaultConfig()
	cfg.Host, cfg.Port = "127.0.0.1", 0
	cfg.ShutdownTimeout = shutdown
	cfg.BodyTimeout = time.Second // a withheld body is answered 408 within the test's time
	cfg.APIKeys, cfg.AdminKey = []string{keyA, keyB}, admin
	for i := range probeKeys {
		cfg.APIKeys = append(cfg.APIKeys, probeKey(i))
	}
	cfg.CORSOrigins = []string{"https://good.example"}
	cfg.PrefixCacheBytes, cfg.PrefixCacheEvery = 64<<20, 4 // boundaries every 4 tokens: a guess at a start could hit
	p := fakeengine.New(4096, delay, true)
	eng := serve.Engine{Target: p.Target, Drafter: p.Drafter, Tokenizer: plainTokenizer{}, Template: p.Template,
		EOS: p.EOS, Name: "toy", Created: 1700000000}
	load := func(context.Context, func(done, total int64)) (serve.Engine, func() error, error) {
		return eng, func() error { return nil }, nil
	}
	log := zerolog.Nop()
	keys, err := app.ProvideKeys(cfg)
	require.NoError(t, err)
	svc, err := app.ProvideFleet(cfg, func(app.ModelSpec) app.LoadFunc { return load }, zerolog.Nop())
	require.NoError(t, err)
	host := app.ProvideHTTP(cfg, svc, log)
	api := app.ProvideAPI(cfg, svc, svc.Events(), svc, host, keys, log)
	srv := app.NewServer(cfg, svc, host, api, app.ProvideResponses(api), app.ProvideMessages(cfg, svc, host, keys, log), log)
	addr := make(chan net.Addr, 1)
	srv.OnListen = func(a net.Addr) { addr <- a }
	srv.Progress = func(int64, int64) {}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{target: p.Target, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- srv.Run(ctx) }()
	select {
	case a := <-addr:
		s.url = "http://" + a.String()
	case err := <-s.done:
		t.Fatalf("the server did not start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not listen")
	}
	hc := client()
	require.Eventually(t, func() bool {
		resp, err := hc.Get(s.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 5*time.Millisecond, "the model loaded")
	hc.CloseIdleConnections()
	t.Cleanup(func() {
		s.stop(t)
		leaked := false
		if !assert.Eventually(t, func() bool { return s.target.Open.Load() == 0 }, 10*time.Second, 5*time.Millisecond,
			"every target session closed") {
			leaked = true
		}
		if err := goleak.Find(before); err != nil {
			t.Errorf("goroutines left behind: %v", err)
			leaked = true
		}
		if leaked {
			tally.leaks.Add(1)
		}
	})
	return s
}

// plainTokenizer is the fake tokenizer with the plain-text ability real tokenizers have: inside a plain
// span, "<|end|>" is its seven characters (each outside the alphabet encodes as a space, as Encode does).
type plainTokenizer struct{ fakeengine.Tokenizer }

var _ ports.PlainEncoder = plainTokenizer{}

func (plainTokenizer) SpecialIn(text string) string {
	if strings.Contains(text, "<|end|>") {
		return "<|end|>"
	}
	return ""
}

func (p plainTokenizer) EncodePlain(text string, spans []ports.Span) ([]ports.Token, error) {
	var out []ports.Token
	pos := 0
	for _, sp := range spans {
		ids, err := p.Encode(text[pos:sp.Start])
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
		for i := sp.Start; i < sp.End; i++ {
			out = append(out, ports.Token(max(0, strings.IndexByte(fakeengine.Alphabet, text[i]))))
		}
		pos = sp.End
	}
	ids, err := p.Encode(text[pos:])
	return append(out, ids...), err
}

// stop shuts the server down (once) and returns Run's error; a Run that ended with anything but nil or
// ErrCut counts as a crash.
func (s *server) stop(t *testing.T) error {
	s.cancel()
	select {
	case err, ok := <-s.done:
		if !ok {
			return nil
		}
		close(s.done)
		if err != nil && !errors.Is(err, app.ErrCut) {
			tally.crashes.Add(1)
			t.Errorf("Run: %v", err)
		}
		return err
	case <-time.After(30 * time.Second):
		tally.crashes.Add(1)
		t.Error("Run did not return after shutdown")
		return nil
	}
}

// client is a fresh client whose idle connections the caller closes (the leak check counts them).
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
}

// probe is one hostile request and the statuses that are right for it.
type probe struct {
	name, method, path, body string
	// hdr overrides the defaults (a JSON content type and tenant A's key); an empty value removes a header.
	hdr  map[string]string
	host string // the Host header; empty: the listener's address
	want []int
	// check, if set, looks at a right answer further (its body).
	check func(t *testing.T, status int, h http.Header, body []byte)
}

// answer is what a probe got.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// send sends p and counts it: a case, a right status, an unexpected 5xx, a crash (no answer at all).
func send(t *testing.T, hc *http.Client, url string, p probe) answer {
	t.Helper()
	a := do(hc, url, p)
	tally.cases.Add(1)
	switch {
	case a.err != nil:
		tally.crashes.Add(1)
		t.Errorf("%s: no answer: %v", p.name, a.err)
		return a
	case a.status >= 500 && !slices.Contains(p.want, a.status):
		tally.fivexx.Add(1)
	}
	if slices.Contains(p.want, a.status) {
		tally.right.Add(1)
		if p.check != nil {
			p.check(t, a.status, a.header, a.body)
		}
	} else {
		t.Errorf("%s: status %d, want one of %v: %.300s", p.name, a.status, p.want, a.body)
	}
	if a.status >= 400 && a.status != http.StatusMethodNotAllowed && p.method != "OPTIONS" {
		assert.Contains(t, string(a.body), `"error"`, "%s: an error in the API's shape", p.name)
	}
	return a
}

func do(hc *http.Client, url string, p probe) answer {
	req, err := http.NewRequest(p.method, url+p.path, strings.NewReader(p.body))
	if err != nil {
		return answer{err: err}
	}
	if p.method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+keyA)
	for k, v := range p.hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	if p.host != "" {
		req.Host = p.host
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}
