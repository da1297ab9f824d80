package models

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// TestIdentity: the disk tier's identity changes with the weights, the backend (kernel mode included) and the
// drafter, is stable otherwise, and is empty when the weights cannot be fingerprinted.
func TestIdentity(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 3})
	other := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 3, Vocab: 300})
	drafter := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 4, Taps: []int{0, 1}})
	base := &Models{TargetDir: dir, Backend: BackendCPU}
	id := Identity(base)
	require.NotEmpty(t, id)
	assert.Equal(t, id, Identity(&Models{TargetDir: dir, Backend: BackendCPU}), "stable")
	assert.NotEqual(t, id, Identity(&Models{TargetDir: dir, Backend: BackendCPUFast}), "the fast kernels")
	assert.NotEqual(t, id, Identity(&Models{TargetDir: other, Backend: BackendCPU}), "other weights")
	assert.NotEqual(t, id, Identity(&Models{TargetDir: dir, Backend: BackendCPU, KVBits: 8}), "8-bit KV")
	withDrafter := &Models{TargetDir: dir, Backend: BackendCPU, Drafter: (*cpu.Drafter)(nil), DrafterDir: drafter}
	assert.NotEqual(t, id, Identity(withDrafter), "a drafter's context is part of the records")

	assert.Empty(t, Identity(&Models{Backend: BackendCPU}), "no model directory")
	assert.Empty(t, Identity(&Models{TargetDir: filepath.Join(t.TempDir(), "missing"), Backend: BackendCPU}))
}
