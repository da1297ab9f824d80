package models

import (
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

func TestKVBitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     ModelConfig
		wantErr string
	}{
		{"default", ModelConfig{}, ""},
		{"8 on cpu", ModelConfig{Backend: BackendCPU, KVBits: 8}, ""},
		{"32 on cpu", ModelConfig{Backend: BackendCPU, KVBits: 32}, ""},
		{"8 on auto", ModelConfig{Backend: BackendAuto, KVBits: 8}, ""},
		{"8 on mlx", ModelConfig{Backend: BackendMLX, KVBits: 8}, ""},
		{"8 distributed", ModelConfig{Backend: BackendMLX, KVBits: 8, Distributed: true}, "kv bits 8 is not available with --distributed"},
		{"32 on mlx", ModelConfig{Backend: BackendMLX, KVBits: 32}, "kv bits 32 needs the cpu backend"},
		{"4", ModelConfig{KVBits: 4}, "kv bits 4: want 0 (full precision), 32 (cpu) or 8"},
		{"16", ModelConfig{KVBits: 16}, "kv bits 16"},
		{"negative", ModelConfig{KVBits: -8}, "kv bits -8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// LoadModels hands --kv-bits to the cpu backend and reports the format; the 8-bit session prices less.
func TestLoadModelsKVBits(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 9})
	load := func(bits int) *Models {
		m, err := LoadModels(t.Context(), ModelConfig{Model: dir, Backend: BackendCPU, Threads: 1, KVBits: bits}, zerolog.Nop(), nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	full, q8 := load(0), load(8)
	assert.Equal(t, 32, full.KVBits)
	assert.Equal(t, 8, q8.KVBits)
	d := ports.MemoryDemand{Positions: 2048, Rows: 64, Block: 1}
	assert.Less(t, q8.Target.(ports.MemoryPricer).SessionBytes(d), full.Target.(ports.MemoryPricer).SessionBytes(d))
}
