package verify

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// demoTauFloor is the acceptance floor the bundled demo must keep: greedy DFlash at block 16 on held-out Go
// prompts, τ = committed tokens per round pooled over all prompts. The shipped drafter pools to 3.81 on this
// subset (the model card gives the figures over all 24 held-out prompts), so 3.0 — the goal — still leaves
// room for kernel-level changes in the last bits of a logit without making the test flaky.
const demoTauFloor = 3.0

// TestDemoAcceptanceFloor runs the bundled demo target and drafter on fixed held-out prompts (files the target
// never saw in training, tools/train/eval_prompts.json) and checks both the acceptance floor and losslessness:
// speculative tokens must equal autoregressive tokens exactly.
func TestDemoAcceptanceFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 8 × 256 tokens twice on the demo models; skipped with -short")
	}
	root := filepath.Join("..", "..", models.DemoTargetDir)
	if _, err := os.Stat(filepath.Join(root, "config.json")); err != nil {
		t.Fatalf("the bundled demo model %s is absent", root)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "tools", "train", "eval_prompts.json"))
	require.NoError(t, err)
	var prompts []struct {
		Prompt string `json:"prompt"`
	}
	require.NoError(t, json.Unmarshal(raw, &prompts))
	require.GreaterOrEqual(t, len(prompts), 22)

	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: root, Draft: filepath.Join("..", "..", models.DemoDrafterDir)}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.NotNil(t, m.Drafter)
	require.NotNil(t, m.Tokenizer)

	committed, rounds := 0, 0
	for i := 0; i < 24 && i < len(prompts); i += 3 {
		ids, err := m.Tokenizer.Encode(prompts[i].Prompt)
		require.NoError(t, err)
		opts := GenerateOptions{Request: generation.Request{Prompt: ids, MaxTokens: 256, NoEOS: true}}
		ar, err := Generate(t.Context(), m, opts)
		require.NoError(t, err)
		opts.Speculative, opts.BlockSize = true, 16
		spec, err := Generate(t.Context(), m, opts)
		require.NoError(t, err)
		require.Equal(t, ar.Tokens, spec.Tokens, "prompt %d: speculative output differs from autoregressive", i)
		for _, r := range spec.Rounds {
			committed += r.Committed
		}
		rounds += len(spec.Rounds)
		t.Logf("prompt %2d: tau %.2f over %d rounds", i, spec.Stats.Tau, spec.Stats.Rounds)
	}
	require.Positive(t, rounds)
	tau := float64(committed) / float64(rounds)
	t.Logf("pooled tau %.3f over %d rounds (floor %.1f)", tau, rounds, demoTauFloor)
	assert.GreaterOrEqual(t, tau, demoTauFloor, "demo drafter acceptance fell below the floor")
}
