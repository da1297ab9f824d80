package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// generate --json with a DFlash2 drafter: the same tokens as autoregressive decoding, and the drafter's
// generation, dialect and features reported; the text form names them too.
func TestGenerateReportsDFlash2Drafter(t *testing.T) {
	d2 := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 3, Taps: []int{0, 2, 3}, Mask: 63, BlockSize: 8, Nested: true, DFlash2: true})
	testmodel.EditConfig(t, d2, func(cfg map[string]any) { cfg["final_logit_softcapping"] = 30.0 })
	ar := runCLI(t, "generate", "--model", fixtures.hybrid, "--tokens", "5,9,13", "--max-tokens", "24", "--json")
	require.Equal(t, 0, ar.code, ar.stderr)
	var a genOut
	oneJSON(t, ar.stdout, &a)
	sp := runCLI(t, "generate", "--model", fixtures.hybrid, "--draft", d2, "--tokens", "5,9,13", "--max-tokens", "24", "--json")
	require.Equal(t, 0, sp.code, sp.stderr)
	var s genOut
	oneJSON(t, sp.stdout, &s)
	assert.Equal(t, a.Tokens, s.Tokens)
	var full struct {
		Drafter *hfmodel.DrafterInfo `json:"drafter"`
	}
	require.NoError(t, json.Unmarshal([]byte(sp.stdout), &full))
	require.NotNil(t, full.Drafter)
	assert.Equal(t, "DFlash2", full.Drafter.Generation)
	assert.Equal(t, "DFlash2DraftModel", full.Drafter.Architecture)
	assert.Contains(t, full.Drafter.Dialect, "dflash_config.block_size")
	assert.Contains(t, full.Drafter.Dialect, "final_logit_softcapping")
	assert.Contains(t, full.Drafter.Features, "final_logit_softcapping 30")
	assert.Equal(t, 8, full.Drafter.BlockSize)
	assert.Equal(t, []int{0, 2, 3}, full.Drafter.TapLayers)

	txt := runCLI(t, "generate", "--model", fixtures.hybrid, "--draft", d2, "--tokens", "5,9,13", "--max-tokens", "8")
	require.Equal(t, 0, txt.code, txt.stderr)
	assert.Contains(t, txt.stdout, "DFlash2, block size")
	assert.Contains(t, txt.stdout, "drafter: DFlash2 (DFlash2DraftModel), dialect dflash_config.block_size")

	plain := runCLI(t, "generate", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--tokens", "5", "--max-tokens", "4", "--json")
	require.Equal(t, 0, plain.code, plain.stderr)
	require.NoError(t, json.Unmarshal([]byte(plain.stdout), &full))
	require.NotNil(t, full.Drafter)
	assert.Equal(t, "DFlash", full.Drafter.Generation)
	assert.Contains(t, full.Drafter.Dialect, "block_size", "the synthetic v1 drafter uses the top-level layout")
}

// synth --dflash2 writes a DFlash2 drafter (bf16 and 4-bit) that generate loads and drafts losslessly with.
func TestSynthDFlash2(t *testing.T) {
	for _, bits := range []string{"0", "4"} {
		dir := t.TempDir()
		r := runCLI(t, "synth", "--out", dir, "--wide", "2", "--layers", "4", "--vocab", "256", "--bits", bits,
			"--group-size", "32", "--dflash2", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var out struct{ Target, Drafter string }
		oneJSON(t, r.stdout, &out)
		ar := runCLI(t, "generate", "--model", out.Target, "--tokens", "1,2,3", "--max-tokens", "12", "--json")
		require.Equal(t, 0, ar.code, ar.stderr)
		sp := runCLI(t, "generate", "--model", out.Target, "--draft", out.Drafter, "--tokens", "1,2,3", "--max-tokens", "12",
			"--block-size", "4", "--json")
		require.Equal(t, 0, sp.code, sp.stderr)
		var a, s genOut
		oneJSON(t, ar.stdout, &a)
		oneJSON(t, sp.stdout, &s)
		assert.Equal(t, a.Tokens, s.Tokens, "bits %s", bits)
		assert.NotEmpty(t, s.Rounds)
		var full struct {
			Drafter *hfmodel.DrafterInfo `json:"drafter"`
		}
		require.NoError(t, json.Unmarshal([]byte(sp.stdout), &full))
		require.NotNil(t, full.Drafter)
		assert.Equal(t, "DFlash2", full.Drafter.Generation)
	}
}
