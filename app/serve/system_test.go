package serve

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

func systemOf(t *testing.T, h *harness, key string) (int, oaiapi.System, []byte) {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Authorization"] = "Bearer " + key
	}
	code, _, body := h.do("GET", "/v1/system", "", hdr)
	var s oaiapi.System
	if code == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &s), string(body))
	}
	return code, s, body
}

// GET /v1/system over the real HTTP adapter and the fake engine: no models while loading, then the loaded one
// as /v1/models describes it, and the memory figures (no device on a backend without an accelerator).
func TestE2ESystem(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{notReady: true, cacheBytes: 1 << 20})
	code, s, body := systemOf(t, h, "")
	require.Equal(t, http.StatusOK, code, string(body))
	assert.Equal(t, "system", s.Object)
	assert.Empty(t, s.Models, "nothing is loaded yet")
	require.NotNil(t, s.Memory, "a server without keys shows its one user everything")
	assert.Zero(t, s.Memory.BudgetBytes, "no budget before a model is loaded")

	require.NoError(t, h.serve.SetEngine(h.engine))
	code, s, body = systemOf(t, h, "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Len(t, s.Models, 1)
	assert.Equal(t, "toy", s.Models[0].ID)
	require.NotNil(t, s.Models[0].Speculation)
	require.NotNil(t, s.Models[0].Drafter, "the fake engine has a drafter")
	assert.Positive(t, s.Models[0].Drafter.BlockSize)
	assert.Equal(t, 4096, s.Models[0].ContextLength)
	assert.GreaterOrEqual(t, s.UptimeSeconds, 0.0)
	assert.Positive(t, s.Started)
	m := s.Memory
	require.NotNil(t, m)
	assert.Positive(t, m.BudgetBytes)
	assert.Zero(t, m.ReservedBytes, "no request is running")
	assert.Equal(t, int64(1<<20), m.PrefixCacheBytes)
	assert.Nil(t, m.Device)
	if runtime.GOOS == "linux" {
		assert.Positive(t, m.ProcessRSSBytes)
		assert.GreaterOrEqual(t, m.ProcessPeakRSSBytes, m.ProcessRSSBytes)
		assert.Positive(t, m.MachineBytes)
	}
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &raw))
	for _, k := range []string{"object", "version", "started", "uptime_seconds", "memory", "models"} {
		assert.Contains(t, raw, k)
	}
	code, _, _ = h.do("POST", "/v1/system", "{}", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, code)
}

// With keys: a wrong key is refused, a tenant key sees the models without the memory figures (they move with
// other tenants' requests), the operator key sees everything.
func TestE2ESystemKeys(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{apiKey: "tenant-a", adminKey: "operator-key"})
	tests := []struct {
		key        string
		wantCode   int
		wantMemory bool
	}{
		{key: "", wantCode: http.StatusUnauthorized},
		{key: "wrong", wantCode: http.StatusUnauthorized},
		{key: "tenant-a", wantCode: http.StatusOK},
		{key: "operator-key", wantCode: http.StatusOK, wantMemory: true},
	}
	for _, tc := range tests {
		code, s, body := systemOf(t, h, tc.key)
		require.Equal(t, tc.wantCode, code, "key %q: %s", tc.key, body)
		if code != http.StatusOK {
			continue
		}
		assert.Len(t, s.Models, 1, tc.key)
		assert.Equal(t, tc.wantMemory, s.Memory != nil, "key %q: %s", tc.key, body)
	}
}

// An accelerator's allocator is reported as the engine reads it; a failure to read it is a 500 that says so.
func TestE2ESystemDevice(t *testing.T) {
	leakCheck(t)
	h := newHarness(t, harnessOpts{notReady: true})
	h.engine.DeviceMemory = func() (ports.DeviceMemory, error) {
		return ports.DeviceMemory{Backend: "mlx", Active: 300, Peak: 500, Cache: 70}, nil
	}
	require.NoError(t, h.serve.SetEngine(h.engine))
	code, s, body := systemOf(t, h, "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.NotNil(t, s.Memory.Device)
	assert.Equal(t, oaiapi.DeviceMemory{Backend: "mlx", ActiveBytes: 300, PeakBytes: 500, CacheBytes: 70}, *s.Memory.Device)

	h2 := newHarness(t, harnessOpts{notReady: true})
	h2.engine.DeviceMemory = func() (ports.DeviceMemory, error) { return ports.DeviceMemory{}, errors.New("device lost") }
	require.NoError(t, h2.serve.SetEngine(h2.engine))
	code, _, body = systemOf(t, h2, "")
	assert.Equal(t, http.StatusInternalServerError, code, string(body))
}

// GET /v1/system on the CPU backend: the demo model loaded by LoadModels, its backend, kernels and drafter.
func TestE2ESystemCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the real demo models; skipped with -short")
	}
	root := filepath.Join("..", "..", models.DemoTargetDir)
	if _, err := os.Stat(filepath.Join(root, "config.json")); err != nil {
		t.Fatalf("the bundled demo model %s is absent", root)
	}
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: root, Draft: filepath.Join("..", "..", models.DemoDrafterDir),
		Kernels: models.KernelsExact}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	serve, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 4, MemoryBudget: 64 << 20, Version: "higgsd test"}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, serve.SetEngine(EngineFromModels(m)))
	srv := httptest.NewServer(oaiapi.New(serve, oaiapi.Options{Log: zerolog.Nop(), System: serve}))
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	resp, err := hc.Get(srv.URL + "/v1/system")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s oaiapi.System
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	assert.Equal(t, "higgsd test", s.Version)
	require.Len(t, s.Models, 1)
	got := s.Models[0]
	assert.Equal(t, "demo", got.ID)
	assert.Equal(t, "cpu", got.Backend)
	assert.Equal(t, "exact", got.Kernels)
	require.NotNil(t, got.Drafter)
	assert.Equal(t, "demo/drafter", got.Drafter.Name)
	assert.NotEmpty(t, got.Drafter.Generation)
	assert.Positive(t, got.Drafter.BlockSize)
	require.NotNil(t, got.Speculation)
	assert.Positive(t, got.ContextLength)
	require.NotNil(t, s.Memory)
	assert.Equal(t, int64(64<<20), s.Memory.BudgetBytes)
	assert.Nil(t, s.Memory.Device, "the CPU backend has no device allocator")
}

func TestParseProcStatus(t *testing.T) {
	tests := []struct {
		in        string
		rss, peak int64
		wantErr   bool
	}{
		{in: "Name:\thiggsd\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads: 9\n", rss: 1 << 20, peak: 2 << 20},
		{in: "Name:\tkthreadd\n", rss: 0, peak: 0},
		{in: "VmRSS:\t12 MB\n", wantErr: true},
		{in: "VmRSS:\t-3 kB\n", wantErr: true},
		{in: "VmHWM:\tlots kB\n", wantErr: true},
	}
	for _, tc := range tests {
		rss, peak, err := parseProcStatus(tc.in)
		if tc.wantErr {
			assert.Error(t, err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.rss, rss, "%q", tc.in)
		assert.Equal(t, tc.peak, peak, "%q", tc.in)
	}
}

func FuzzParseProcStatus(f *testing.F) {
	for _, s := range []string{"VmRSS:\t1024 kB\n", "VmHWM: 1 kB\nVmRSS: 2 kB", "VmRSS:", "VmRSS: 99999999999999999999 kB", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rss, peak, err := parseProcStatus(s)
		if err == nil {
			assert.GreaterOrEqual(t, rss, int64(0))
			assert.GreaterOrEqual(t, peak, int64(0))
		}
	})
}

// GET /v1/system on the MLX backend (skipped where libmlxc is not found): MLX's allocator is reported.
func TestE2ESystemMLX(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the real demo models; skipped with -short")
	}
	cfg := models.ModelConfig{Model: filepath.Join("..", "..", models.DemoTargetDir), NoDraft: true, Backend: models.BackendMLX}
	if _, err := models.ChooseBackend(cfg); err != nil {
		t.Skipf("MLX backend not available: %v", err)
	}
	m, err := models.LoadModels(t.Context(), cfg, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	serve, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 4}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, serve.SetEngine(EngineFromModels(m)))
	srv := httptest.NewServer(oaiapi.New(serve, oaiapi.Options{Log: zerolog.Nop(), System: serve}))
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	resp, err := hc.Get(srv.URL + "/v1/system")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s oaiapi.System
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	require.Len(t, s.Models, 1)
	assert.Equal(t, "mlx", s.Models[0].Backend)
	require.NotNil(t, s.Memory)
	require.NotNil(t, s.Memory.Device)
	assert.Equal(t, "mlx", s.Memory.Device.Backend)
	assert.Positive(t, s.Memory.Device.ActiveBytes, "the weights are live MLX arrays")
	assert.GreaterOrEqual(t, s.Memory.Device.PeakBytes, s.Memory.Device.ActiveBytes)
}
