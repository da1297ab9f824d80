package serve

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/httpapi"
	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/app/models"
)

// certModelDir writes a stand-in model directory (config.json and one safetensors file: what the
// fingerprint reads).
func certModelDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644))
	header := []byte(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`)
	data := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	data = append(append(data, header...), 0, 0, 0, 0)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), data, 0o644))
	return dir
}

// modelsJSON serves dir's stand-in model (the fake engine, with dir as its directory) and returns GET /v1/models.
func modelsJSON(t *testing.T, dir, backend string) map[string]any {
	eng, _ := srvEngine(256, 0, false)
	m := &models.Models{Target: eng.Target, Drafter: eng.Drafter, Tokenizer: eng.Tokenizer, Template: eng.Template,
		EOS: eng.EOS, Name: "toy", TargetDir: dir, Backend: backend}
	s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 1}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(EngineFromModels(m)))
	host := httpapi.New(s, httpapi.Options{Log: zerolog.Nop()})
	oaiapi.New(s, oaiapi.Options{Host: host, Log: zerolog.Nop()})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/models", nil)
	req.Host = "localhost" // httptest's example.com is not a name this server answers to (DNS-rebinding guard)
	host.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var list struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
	require.Len(t, list.Data, 1)
	return list.Data[0]
}

// TestModelsShowCertificate: /v1/models shows the certificate beside the model ("certified"), whether it
// matches the weights and backend served, a problem when it cannot be read, and nothing without one.
func TestModelsShowCertificate(t *testing.T) {
	dir := certModelDir(t)
	assert.NotContains(t, modelsJSON(t, dir, "cpu"), "certified", "no certificate, no field")

	fp, err := models.Fingerprint(dir)
	require.NoError(t, err)
	when := time.Date(2026, 12, 6, 4, 30, 0, 0, time.UTC)
	cert := map[string]any{"format": 1, "certified": true, "when": when, "build": "0123abc", "model": "toy",
		"drafter": "d", "backend": "cpu", "kernels": "exact", "fingerprint": fp, "tolerance": "greedy: exact",
		"scope": "chain, block sizes 1-16; trees not verified", "chain": map[string]any{"pass": true}}
	data, err := json.Marshal(cert)
	require.NoError(t, err)
	path := filepath.Join(dir, models.CertificateFile)
	require.NoError(t, os.WriteFile(path, data, 0o644))

	got := modelsJSON(t, dir, "cpu")
	assert.Equal(t, map[string]any{"pass": true, "when": "2026-12-06T04:30:00Z", "build": "0123abc", "backend": "cpu",
		"kernels": "exact", "drafter": "d", "tolerance": "greedy: exact", "scope": "chain, block sizes 1-16; trees not verified",
		"matches_loaded": true}, got["certified"])
	assert.Equal(t, "toy", got["id"])

	// Served on another backend: shown, but it does not vouch for it.
	assert.Equal(t, false, modelsJSON(t, dir, "cpu-fast")["certified"].(map[string]any)["matches_loaded"])

	// A certificate that verified trees: its head's summary shows as "trees".
	cert["scope"] = "chain, block sizes 1-16; tree, block sizes 3-16, budgets 4,8,16"
	cert["trees"] = map[string]any{"verified": true, "pass": true, "block_sizes": []int{3, 4}, "budgets": []int{4, 8, 16},
		"tree_rounds": 40, "draft_rounds": 52, "distribution_pass": true}
	data, err = json.Marshal(cert)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	assert.Equal(t, map[string]any{"verified": true, "pass": true, "block_sizes": []any{3.0, 4.0}, "budgets": []any{4.0, 8.0, 16.0},
		"tree_rounds": 40.0, "draft_rounds": 52.0, "distribution_pass": true},
		modelsJSON(t, dir, "cpu")["certified"].(map[string]any)["trees"])
	// Weights changed since: the same.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen3","x":1}`), 0o644))
	assert.Equal(t, false, modelsJSON(t, dir, "cpu")["certified"].(map[string]any)["matches_loaded"])

	// Unreadable: said so, never passed.
	require.NoError(t, os.WriteFile(path, []byte(`{"format":`), 0o644))
	c := modelsJSON(t, dir, "cpu")["certified"].(map[string]any)
	assert.Equal(t, false, c["pass"])
	assert.Contains(t, c["problem"], models.CertificateFile)
	require.NoError(t, os.WriteFile(path, []byte(`{"format":99,"certified":true}`), 0o644))
	c = modelsJSON(t, dir, "cpu")["certified"].(map[string]any)
	assert.Equal(t, false, c["pass"])
	assert.Contains(t, c["problem"], "format 99")
}
