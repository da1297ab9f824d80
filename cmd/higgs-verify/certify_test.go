package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports/portfake"
)

type certOut struct {
	Certified bool   `json:"certified"`
	Build     string `json:"build"`
	Backend   string `json:"backend"`
	Kernels   string `json:"kernels"`
	Scope     string `json:"scope"`
	File      string `json:"file"`
	Chain     struct {
		Pass       bool  `json:"pass"`
		BlockSizes []int `json:"block_sizes"`
		NotRun     []struct {
			BlockSize int    `json:"block_size"`
			Reason    string `json:"reason"`
		} `json:"not_run"`
		Cases []struct {
			BlockSize     int    `json:"block_size"`
			Mode          string `json:"mode"`
			Disagreements int    `json:"disagreements"`
		} `json:"cases"`
	} `json:"chain"`
	Tree struct {
		Verified   bool   `json:"verified"`
		Note       string `json:"note"`
		Pass       bool   `json:"pass"`
		BlockSizes []int  `json:"block_sizes"`
		Budgets    []int  `json:"budgets"`
		Width      int    `json:"width"`
		NotRun     []struct {
			BlockSize int    `json:"block_size"`
			Budget    int    `json:"budget"`
			Reason    string `json:"reason"`
		} `json:"not_run"`
		Cases []struct {
			BlockSize     int    `json:"block_size"`
			Budget        int    `json:"budget"`
			Mode          string `json:"mode"`
			DraftRounds   int    `json:"draft_rounds"`
			TreeRounds    int    `json:"tree_rounds"`
			Disagreements int    `json:"disagreements"`
		} `json:"cases"`
		Totals struct {
			TreeRounds  int `json:"tree_rounds"`
			DraftRounds int `json:"draft_rounds"`
		} `json:"totals"`
	} `json:"tree"`
	Trees *struct {
		Verified   bool  `json:"verified"`
		Pass       bool  `json:"pass"`
		Budgets    []int `json:"budgets"`
		TreeRounds int   `json:"tree_rounds"`
	} `json:"trees"`
	TreeDistribution *struct {
		Pass       bool `json:"pass"`
		Budget     int  `json:"budget"`
		TreeRounds int  `json:"tree_rounds"`
	} `json:"tree_distribution"`
	Disagreements []struct {
		Shape     string `json:"shape"`
		BlockSize int    `json:"block_size"`
		Budget    int    `json:"budget"`
		Mode      string `json:"mode"`
		Prompt    int    `json:"prompt"`
		Position  int    `json:"position"`
		Plain     int    `json:"plain_token"`
		Spec      int    `json:"spec_token"`
		Margin    *struct {
			Top1     int     `json:"top1"`
			LogitGap float64 `json:"logit_gap"`
		} `json:"margin"`
	} `json:"disagreements"`
	Distribution *struct {
		Pass bool `json:"pass"`
	} `json:"distribution"`
}

// TestCertifyCommand: certify passes on a correct backend, writes higgs-certificate.json beside the model
// (what higgsd then shows), runs block sizes above the drafter's configured 8, lists one past the context
// length as not run, and verifies trees at the sizes from 3 with the default budgets in every mode, the
// distribution test included; --tree-budgets, --tree-width and --no-trees change that.
func TestCertifyCommand(t *testing.T) {
	model := testmodel.Copy(t, fixtures.dense, nil)
	args := []string{"certify", "--model", model, "--draft", fixtures.drafter, "--tokens", "5,9,13", "--max-tokens", "6",
		"--block-sizes", "1,2,8,12,16777216", "--batch", "2", "--samples", "20"}
	r := runCLI(t, append(args, "--json")...)
	require.Equal(t, 0, r.code, r.stderr)
	var c certOut
	oneJSON(t, r.stdout, &c)
	assert.True(t, c.Certified)
	assert.True(t, c.Chain.Pass)
	assert.Equal(t, []int{1, 2, 8, 12}, c.Chain.BlockSizes)
	require.Len(t, c.Chain.NotRun, 1)
	assert.Equal(t, 16777216, c.Chain.NotRun[0].BlockSize)
	assert.Contains(t, c.Chain.NotRun[0].Reason, "not run: above the context length")
	assert.Len(t, c.Chain.Cases, 4*4)
	assert.True(t, c.Tree.Verified, c.Tree.Note)
	assert.True(t, c.Tree.Pass)
	assert.Equal(t, []int{8, 12}, c.Tree.BlockSizes)
	assert.Equal(t, []int{4, 8, 16}, c.Tree.Budgets)
	assert.Equal(t, 4, c.Tree.Width)
	assert.Len(t, c.Tree.Cases, 2*3*4)
	for _, cs := range c.Tree.Cases {
		assert.Equal(t, cs.DraftRounds, cs.TreeRounds, "%+v", cs)
		assert.Positive(t, cs.TreeRounds, "%+v", cs)
	}
	assert.Contains(t, c.Scope, "; tree, block sizes 8,12, budgets 4,8,16, alone, alone+prefix_hit, batch, batch+prefix_hit")
	require.NotNil(t, c.Trees)
	assert.True(t, c.Trees.Verified)
	assert.True(t, c.Trees.Pass)
	assert.Equal(t, c.Tree.Totals.TreeRounds, c.Trees.TreeRounds)
	require.NotNil(t, c.TreeDistribution)
	assert.True(t, c.TreeDistribution.Pass)
	assert.Equal(t, 16, c.TreeDistribution.Budget)
	assert.Positive(t, c.TreeDistribution.TreeRounds)
	require.NotNil(t, c.Distribution)
	assert.True(t, c.Distribution.Pass)
	assert.Equal(t, "cpu", c.Backend)
	assert.Equal(t, "exact", c.Kernels)
	assert.NotEmpty(t, c.Build)
	assert.Equal(t, filepath.Join(model, models.CertificateFile), c.File)
	card := models.Certification(model, "cpu")
	require.NotNil(t, card)
	assert.True(t, card.Pass)
	assert.True(t, card.Matches)

	// Text mode; --out; --no-write.
	out := filepath.Join(t.TempDir(), "c.json")
	r = runCLI(t, append(args, "--out", out, "--temperature", "0")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "tree: block sizes 8,12; budgets 4,8,16; width 4; modes alone, alone+prefix_hit, batch, batch+prefix_hit")
	assert.Contains(t, r.stdout, "  block  8 budget 16 batch               2 runs    12 tokens")
	assert.Contains(t, r.stdout, "tree rounds 10 of 10")
	assert.Contains(t, r.stdout, "block 16777216 not run: above the context length")
	assert.Contains(t, r.stdout, "certified: true")
	assert.Contains(t, r.stdout, "written: "+out)
	assert.NotContains(t, r.stdout, "distribution test")
	assert.FileExists(t, out)
	r = runCLI(t, append(args, "--out", out)...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "tree distribution test T=0.7 (match, block 12, budget 16, tree rounds ")

	// Budgets a tree cannot hold at a size are listed as not run; --no-trees leaves trees out.
	r = runCLI(t, append(args, "--no-write", "--temperature", "0", "--block-sizes", "3,4", "--tree-budgets", "4,8",
		"--tree-width", "2", "--json")...)
	require.Equal(t, 0, r.code, r.stderr)
	c = certOut{}
	oneJSON(t, r.stdout, &c)
	assert.True(t, c.Tree.Verified)
	assert.Equal(t, 2, c.Tree.Width)
	require.Len(t, c.Tree.NotRun, 1)
	assert.Equal(t, 3, c.Tree.NotRun[0].BlockSize)
	assert.Equal(t, 8, c.Tree.NotRun[0].Budget)
	assert.Contains(t, c.Tree.NotRun[0].Reason, "holds at most 7 nodes")
	r = runCLI(t, append(args, "--no-write", "--temperature", "0", "--no-trees")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "tree: not verified: trees left out (--no-trees)")
	assert.Contains(t, r.stdout, "trees not verified (--no-trees)")
	r = runCLI(t, append(args, "--no-write", "--temperature", "0", "--json")...)
	require.Equal(t, 0, r.code, r.stderr)
	oneJSON(t, r.stdout, &certOut{})
	assert.NotContains(t, r.stdout, `"file"`)
}

// TestCertifyCommandReportsDisagreement: a target whose verify blocks perturb one row fails certification
// with exit 1; each disagreement names its position and the target's top-2 margin, and the failed
// certificate is still written.
func TestCertifyCommandReportsDisagreement(t *testing.T) {
	broken := func(ctx context.Context, cfg models.ModelConfig, log zerolog.Logger) (*models.Models, func(), error) {
		m, cleanup, err := initModels(ctx, cfg, log)
		if err == nil {
			m.Target = portfake.Perturbed(m.Target, 6, false)
		}
		return m, cleanup, err
	}
	out := filepath.Join(t.TempDir(), "c.json")
	args := []string{"certify", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "5,9,13",
		"--max-tokens", "8", "--block-sizes", "1,4", "--batch", "2", "--temperature", "0", "--out", out}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append(args, "--json"), &stdout, &stderr, broken)
	require.Equal(t, 1, code, stderr.String())
	assert.Contains(t, stderr.String(), "not certified")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr.String()), "\n")+1, "one line on stderr: %s", stderr.String())
	var c certOut
	oneJSON(t, stdout.String(), &c)
	assert.False(t, c.Certified)
	require.Len(t, c.Disagreements, 6, "block 4: alone, alone+prefix_hit, and both members of each batch of 2: %+v", c.Disagreements)
	for _, d := range c.Disagreements {
		assert.Equal(t, 4, d.BlockSize)
		// The row at position 6 predicts the token at 7: generated token 4 after a 3-token prompt.
		assert.Equal(t, 4, d.Position)
		assert.NotEqual(t, d.Plain, d.Spec)
		require.NotNil(t, d.Margin)
		assert.Equal(t, d.Plain, d.Margin.Top1)
		assert.Positive(t, d.Margin.LogitGap)
	}
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"certified": false`)

	stdout.Reset()
	stderr.Reset()
	code = run(t.Context(), args, &stdout, &stderr, broken)
	require.Equal(t, 1, code, stderr.String())
	assert.Contains(t, stdout.String(), "DISAGREEMENT chain block 4 alone prompt 0 position 4: plain ")
	assert.Contains(t, stdout.String(), "logit gap")
	assert.Contains(t, stdout.String(), "certified: false")
}

// TestCertifyCommandReportsTreeDisagreement: a target whose trees perturb one row fails certification with
// exit 1, and the text and JSON list each tree run's disagreement with its budget and the target's margin.
func TestCertifyCommandReportsTreeDisagreement(t *testing.T) {
	broken := func(ctx context.Context, cfg models.ModelConfig, log zerolog.Logger) (*models.Models, func(), error) {
		m, cleanup, err := initModels(ctx, cfg, log)
		if err == nil {
			m.Target = portfake.Perturbed(m.Target, 6, true)
		}
		return m, cleanup, err
	}
	args := []string{"certify", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "5,9,13",
		"--max-tokens", "8", "--block-sizes", "4", "--tree-budgets", "4,8", "--batch", "0", "--no-prefix-cache",
		"--temperature", "0", "--no-write"}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append(args, "--json"), &stdout, &stderr, broken)
	require.Equal(t, 1, code, stderr.String())
	assert.Contains(t, stderr.String(), "speculative tree runs differ")
	var c certOut
	oneJSON(t, stdout.String(), &c)
	assert.False(t, c.Certified)
	assert.True(t, c.Tree.Verified)
	assert.False(t, c.Tree.Pass)
	var budgets []int
	for _, d := range c.Disagreements {
		assert.Equal(t, 4, d.Position, "%+v", d)
		require.NotNil(t, d.Margin)
		assert.Equal(t, d.Plain, d.Margin.Top1)
		if d.Shape == "tree" {
			budgets = append(budgets, d.Budget)
		}
	}
	assert.Equal(t, []int{4, 8}, budgets)

	stdout.Reset()
	stderr.Reset()
	code = run(t.Context(), args, &stdout, &stderr, broken)
	require.Equal(t, 1, code, stderr.String())
	assert.Contains(t, stdout.String(), "DISAGREEMENT tree block 4 budget 8 alone prompt 0 position 4: plain ")
	assert.Contains(t, stdout.String(), "disagreements 1")
}

func TestCertifyCommandBadInput(t *testing.T) {
	for _, extra := range [][]string{
		{"--block-sizes", "0,2"},
		{"--block-sizes", "16777216"},
		{"--batch", "-1"},
		{"--no-write", "--out", "x.json"},
		{"--verify", "maybe"},
		{"--temperature", "-1"},
		{"--tree-budgets", "4,1"},
		{"--tree-budgets", "four"},
		{"--tree-width", "-1"},
	} {
		args := append([]string{"certify", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "5,9,13",
			"--max-tokens", "4", "--no-write"}, extra...)
		if extra[0] == "--no-write" {
			args = append([]string{"certify", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "5,9,13"}, extra...)
		}
		r := runCLI(t, args...)
		assert.Equal(t, 2, r.code, "%v: %s", extra, r.stderr)
		assert.Empty(t, r.stdout, "%v", extra)
	}
	r := runCLI(t, "certify", "--model", fixtures.dense, "--tokens", "5,9,13", "--no-write")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "drafter")
}
