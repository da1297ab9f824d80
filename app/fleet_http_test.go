package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/app/fleet"
	"github.com/higgs-go/higgs/app/internal/fakeengine"
	"github.com/higgs-go/higgs/app/serve"
)

// fleetRun runs the real Server over cfg's models, wired as higgsd wires them, with load giving each model
// its loader; it returns the base URL and the log.
func fleetRun(t *testing.T, cfg Config, load Loader) (string, *strings.Builder) {
	t.Helper()
	logs := &strings.Builder{}
	log := zerolog.New(&syncWriter{w: logs})
	cfg.Port = 0
	f, err := ProvideFleet(cfg, load, log)
	require.NoError(t, err)
	host := ProvideHTTP(cfg, f, log)
	keys, err := ProvideKeys(cfg)
	require.NoError(t, err)
	api := ProvideAPI(cfg, f, f.Events(), f, host, keys, log)
	srv := NewServer(cfg, f, host, api, ProvideResponses(api), ProvideMessages(cfg, f, host, keys, log), log)
	addr := make(chan net.Addr, 1)
	srv.OnListen = func(a net.Addr) { addr <- a }
	srv.Progress = func(int64, int64) {}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	select {
	case a := <-addr:
		return "http://" + a.String(), logs
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not listen")
	}
	return "", nil
}

// fakeLoader loads a fake engine for every model, counting loads per model.
type fakeLoader struct {
	mu    sync.Mutex
	loads map[string]int
}

func (l *fakeLoader) loader(spec ModelSpec) LoadFunc {
	return func(context.Context, func(done, total int64)) (serve.Engine, func() error, error) {
		l.mu.Lock()
		l.loads[spec.Name]++
		l.mu.Unlock()
		if spec.Name == "broken" {
			return serve.Engine{}, nil, errors.New("no config.json in " + spec.Path)
		}
		p := fakeengine.New(4096, 0, true)
		return serve.Engine{Target: p.Target, Drafter: p.Drafter, Tokenizer: p.Tokenizer, Template: p.Template,
			EOS: p.EOS, Name: "toy", Created: 1700000000, WeightBytes: 1 << 20}, func() error { return nil }, nil
	}
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &out), "%s", b)
	return resp.StatusCode, out
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
}

type modelList struct {
	Data []struct {
		ID          string   `json:"id"`
		State       string   `json:"state"`
		Aliases     []string `json:"aliases"`
		Speculation *struct {
			Mode string `json:"mode"`
		} `json:"speculation"`
		Drafter *struct {
			Name string `json:"name"`
		} `json:"drafter"`
	} `json:"data"`
}

func (l modelList) states() map[string]string {
	out := map[string]string{}
	for _, m := range l.Data {
		out[m.ID] = m.State
	}
	return out
}

func TestFleetOverHTTPRoutesAndRefusesUnknownModels(t *testing.T) {
	cfg, err := LoadConfig([]string{"--model", "coder=/models/coder,alias=gocoder", "--model", "demo=/models/demo",
		"--model", "broken=/models/broken"}, env(nil), io.Discard)
	require.NoError(t, err)
	fl := &fakeLoader{loads: map[string]int{}}
	url, logs := fleetRun(t, cfg, fl.loader)

	var list modelList
	getJSON(t, url+"/v1/models", &list)
	assert.Equal(t, map[string]string{"coder": "not loaded", "demo": "not loaded", "broken": "not loaded"}, list.states())
	assert.Equal(t, []string{"gocoder"}, list.Data[0].Aliases)

	status, body := post(t, url+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	require.Equal(t, http.StatusOK, status, "%v", body)
	assert.Equal(t, "demo", body["model"])
	status, body = post(t, url+"/v1/messages", `{"model":"gocoder","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, status, "%v", body)
	assert.Equal(t, "coder", body["model"], "an alias answers as its model")
	status, body = post(t, url+"/v1/completions", `{"prompt":"hi","max_tokens":3}`)
	require.Equal(t, http.StatusOK, status, "%v", body)
	assert.Equal(t, "coder", body["model"], "no model: the first")
	assert.Equal(t, map[string]int{"coder": 1, "demo": 1}, fl.loads)

	getJSON(t, url+"/v1/models", &list)
	assert.Equal(t, map[string]string{"coder": "loaded", "demo": "loaded", "broken": "not loaded"}, list.states())
	assert.NotNil(t, list.Data[0].Speculation, "a loaded model's card keeps today's fields")
	var sys struct {
		Memory struct {
			Budget int64 `json:"budget_bytes"`
		} `json:"memory"`
		Models []struct {
			ID string `json:"id"`
		} `json:"models"`
	}
	getJSON(t, url+"/v1/system", &sys)
	assert.Len(t, sys.Models, 2, "/v1/system lists the loaded models")
	assert.Equal(t, fleet.DefaultBudget(), sys.Memory.Budget, "the one shared budget")
	var one struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	getJSON(t, url+"/v1/models/gocoder", &one)
	assert.Equal(t, "coder", one.ID, "an alias finds its model")

	// A model that cannot load is a 503 naming it and why, on both APIs; the server goes on.
	status, body = post(t, url+"/v1/chat/completions", `{"model":"broken","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	b, _ := json.Marshal(body)
	assert.Contains(t, string(b), `model load failed: model \"broken\": no config.json in /models/broken`)
	assert.Contains(t, string(b), `"code":"model_load_failed"`)
	status, body = post(t, url+"/v1/messages", `{"model":"broken","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	b, _ = json.Marshal(body)
	assert.Contains(t, string(b), `no config.json in /models/broken`)
	assert.Equal(t, 2, fl.loads["broken"], "each request tries again")

	const choices = `the model \"gpt-4o\" does not exist; this server serves \"coder\" (aliases \"gocoder\"), \"demo\", \"broken\"`
	status, body = post(t, url+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusNotFound, status)
	b, _ = json.Marshal(body)
	assert.Contains(t, string(b), choices)
	assert.Contains(t, string(b), `"code":"model_not_found"`)
	status, body = post(t, url+"/v1/messages", `{"model":"gpt-4o","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusNotFound, status)
	b, _ = json.Marshal(body)
	assert.Contains(t, string(b), choices)
	assert.Contains(t, string(b), `"type":"not_found_error"`)
	status, body = post(t, url+"/v1/messages/count_tokens", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusNotFound, status, "%v", body)

	assert.Contains(t, logs.String(), `"model":"demo"`)
	assert.Contains(t, logs.String(), `"message":"model loaded"`)
	assert.Contains(t, logs.String(), `"took":`)
}

// Two real models from the bundled checkpoints, one with its drafter and one without, served by one wiring
// on the CPU: each answers under its name, and both are listed with their drafter or none.
func TestFleetServesTwoRealModels(t *testing.T) {
	if testing.Short() {
		t.Skip("loads two real models")
	}
	cfg, err := LoadConfig([]string{"--model", "coder=../models/gocoder/target,draft=../models/gocoder/drafter,alias=gocoder",
		"--model", "demo=../models/demo/target", "--threads", "2", "--prefix-cache-bytes", "16MiB"}, env(nil), io.Discard)
	require.NoError(t, err)
	url, _ := fleetRun(t, cfg, ProvideLoader(cfg, zerolog.Nop()))

	var wg sync.WaitGroup
	type answer struct {
		status int
		body   map[string]any
	}
	answers := make([]answer, 4)
	reqs := []string{
		`{"model":"gocoder","messages":[{"role":"user","content":"Write a Go function that adds two ints."}],"max_tokens":8,"temperature":0}`,
		`{"model":"demo","prompt":"Once upon a time","max_tokens":8,"temperature":0}`,
		`{"model":"coder","prompt":"func main() {","max_tokens":8,"temperature":0}`,
		`{"model":"demo","prompt":"The cat","max_tokens":8,"temperature":0}`,
	}
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/v1/completions"
			if strings.Contains(r, "messages") {
				path = "/v1/chat/completions"
			}
			s, b := post(t, url+path, r)
			answers[i] = answer{s, b}
		}()
	}
	wg.Wait()
	for i, a := range answers {
		require.Equal(t, http.StatusOK, a.status, "%s: %v", reqs[i], a.body)
		usage := a.body["usage"].(map[string]any)
		assert.Equal(t, 8.0, usage["completion_tokens"], reqs[i])
	}
	assert.Equal(t, "coder", answers[0].body["model"])
	assert.Equal(t, "demo", answers[1].body["model"])

	var list modelList
	getJSON(t, url+"/v1/models", &list)
	require.Len(t, list.Data, 2)
	assert.Equal(t, map[string]string{"coder": "loaded", "demo": "loaded"}, list.states())
	require.NotNil(t, list.Data[0].Drafter, "coder speculates with its drafter")
	assert.Equal(t, "gocoder/drafter", list.Data[0].Drafter.Name)
	assert.Nil(t, list.Data[1].Drafter, "demo has none")
	assert.Equal(t, "off", list.Data[1].Speculation.Mode)
}
