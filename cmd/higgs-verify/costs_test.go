package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBenchKernelCosts: bench --kernel-costs adds a "costs" object (existing keys untouched) with every figure
// positive and finite and one entry per verify row count, on a 4-bit synth hybrid under both kernel modes
// (recurrent state restored between Forwards) and on a dense fixture (attention only); text mode prints the table.
func TestBenchKernelCosts(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, "synth", "--out", dir, "--wide", "1", "--layers", "4", "--vocab", "256", "--bits", "4",
		"--group-size", "32", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var syn struct {
		Target, Drafter string
		Params          int64
	}
	oneJSON(t, r.stdout, &syn)
	costArgs := []string{"--tokens", "1,2,3,4,5", "--max-tokens", "2", "--repeats", "1", "--warmup", "0",
		"--kernel-costs", "--cost-rows", "2,4,8,16", "--cost-context", "8", "--cost-repeats", "1"}
	for _, tc := range []struct {
		name  string
		model []string
	}{
		{"synth q4 exact", []string{"--model", syn.Target, "--draft", syn.Drafter, "--kernels", "exact"}},
		{"synth q4 fast", []string{"--model", syn.Target, "--draft", syn.Drafter, "--kernels", "fast"}},
		{"dense", []string{"--model", fixtures.dense, "--draft", fixtures.drafter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, append(append(append([]string{"bench"}, tc.model...), costArgs...), "--json")...)
			require.Equal(t, 0, r.code, r.stderr)
			var out map[string]any
			oneJSON(t, r.stdout, &out)
			for _, k := range []string{"model", "backend", "ar", "spec", "speedup", "prompts", "max_tokens", "repeats", "warmup"} {
				assert.Contains(t, out, k, "existing key kept")
			}
			costs, ok := out["costs"].(map[string]any)
			require.True(t, ok, "costs object: %v", out["costs"])
			for _, k := range []string{"prefill_tokens_per_s", "decode_ms_per_token", "weight_bytes", "params",
				"bandwidth_gb_per_s", "gflop_per_s", "context_tokens", "repeats"} {
				v, ok := costs[k].(float64)
				if assert.True(t, ok, "%s present and a number", k) {
					assert.True(t, v > 0 && !math.IsInf(v, 0), "%s = %v", k, v)
				}
			}
			assert.Equal(t, out["backend"], costs["backend"])
			cpu, ok := costs["cpu"].(map[string]any)
			require.True(t, ok)
			assert.NotEmpty(t, cpu["arch"])
			assert.Contains(t, cpu, "avx512vnni")
			assert.Contains(t, cpu, "amx_int8")
			verify, ok := costs["verify"].([]any)
			require.True(t, ok)
			require.Len(t, verify, 4)
			for i, rows := range []float64{2, 4, 8, 16} {
				v := verify[i].(map[string]any)
				assert.Equal(t, rows, v["rows"])
				for _, k := range []string{"ms", "decode_steps", "gflop_per_s"} {
					f, ok := v[k].(float64)
					if assert.True(t, ok, "verify %v %s", rows, k) {
						assert.True(t, f > 0 && !math.IsInf(f, 0), "verify %v %s = %v", rows, k, f)
					}
				}
			}
			if tc.name != "dense" {
				// Untied: a token gathers one row of the embedding, so all weights but the [256, 64] embedding count.
				assert.Equal(t, float64(syn.Params-256*64), costs["params"], "per-token multiply-accumulates")
			}
		})
	}
	r = runCLI(t, append([]string{"bench", "--model", syn.Target, "--draft", syn.Drafter}, costArgs...)...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "kernel costs (cpu")
	assert.Contains(t, r.stdout, "decode steps")
	assert.Contains(t, r.stdout, "16 rows")

	for _, bad := range [][]string{{"--cost-rows", "1"}, {"--cost-context", "0"}, {"--cost-repeats", "0"}, {"--cost-rows", "2,x"}} {
		r := runCLI(t, append(append([]string{"bench", "--model", syn.Target, "--draft", syn.Drafter}, costArgs...), bad...)...)
		assert.Equal(t, 2, r.code, "%v", bad)
		assert.Contains(t, r.stderr, bad[0], "%v names the flag", bad)
	}
}
