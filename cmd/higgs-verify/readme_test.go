package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/internal/readme"
)

// TestREADMECommands runs every higgs-verify command README.md and docs/*.md show in their shell blocks, as
// written, from the repository root (where the README says to run them), with smaller limits appended (a later
// flag wins) so the suite stays fast: fewer generated tokens, one bench pass, a small synth model in a temp dir.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the demo and golden models; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	files, err := readme.Files(root)
	require.NoError(t, err)
	t.Chdir(root)
	ran := map[string]bool{}
	for _, f := range files {
		cmds, _, err := readme.Commands(f, map[string]string{"HOME": t.TempDir()})
		require.NoError(t, err)
		name, err := filepath.Rel(root, f)
		require.NoError(t, err)
		for _, c := range cmds {
			args := c.Args
			switch {
			case args[0] == "bin/higgs-verify":
				args = args[1:]
			case len(args) > 2 && args[0] == "go" && args[1] == "run" && args[2] == "./cmd/higgs-verify":
				args = args[3:]
			default:
				continue
			}
			require.NotEmpty(t, args, "%s:%d: higgs-verify without a command", name, c.Line)
			sub := args[0]
			args = slices.Clone(args)
			switch sub {
			case "generate", "lossless":
				args = append(args, "--max-tokens", "8")
			case "bench":
				args = append(args, "--max-tokens", "8", "--repeats", "1", "--warmup", "0")
				if slices.Contains(args, "--multi-turn") {
					args = append(args, "--system-tokens", "64", "--turns", "2")
				}
			case "certify":
				// Never beside the bundled model: the repository stays clean.
				args = append(args, "--max-tokens", "8", "--samples", "20", "--block-sizes", "1,4,16", "--tree-budgets", "8",
					"--out", filepath.Join(t.TempDir(), "certificate.json"))
			case "synth":
				if i := slices.Index(args, "--out"); i >= 0 && i+1 < len(args) {
					args[i+1] = t.TempDir()
				}
				args = append(args, "--wide", "2", "--layers", "4", "--vocab", "256", "--group-size", "32")
			}
			t.Run(sub, func(t *testing.T) {
				ran[sub] = true
				r := runCLI(t, args...)
				if slices.Contains(args, "mlx") && mlx.Available() != nil {
					// As the README says: without the library the MLX side fails with one clear error.
					assert.Equal(t, 2, r.code, "%s:%d: %s", name, c.Line, r.stderr)
					assert.Contains(t, r.stderr, "MLX backend not available", "%s:%d", name, c.Line)
					return
				}
				require.Equal(t, 0, r.code, "%s:%d: higgs-verify %s\nstderr: %s", name, c.Line, strings.Join(args, " "), r.stderr)
				assert.NotEmpty(t, r.stdout, "%s:%d", name, c.Line)
				if slices.Contains(args, "--json") {
					var v map[string]any
					oneJSON(t, r.stdout, &v)
				}
				if sub == "bench" {
					// One row per configuration: the main block size is not repeated by the sweep.
					text := runCLI(t, slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--json" })...)
					require.Equal(t, 0, text.code, text.stderr)
					lines := strings.Split(strings.TrimSpace(text.stdout), "\n")
					seen := map[string]bool{}
					for _, l := range lines[2:] {
						if strings.TrimSpace(l) == "" {
							break // the multi-turn table follows
						}
						name := strings.Join(strings.Fields(l)[:2], " ")
						assert.False(t, seen[name], "bench row %q printed twice:\n%s", name, text.stdout)
						seen[name] = true
					}
				}
				if sub == "bench" && slices.Contains(args, "--json") {
					var b struct {
						Spec struct {
							BlockSize int `json:"block_size"`
						} `json:"spec"`
						Sweep []struct {
							BlockSize int `json:"block_size"`
						} `json:"sweep"`
					}
					require.NoError(t, json.Unmarshal([]byte(r.stdout), &b))
					for _, s := range b.Sweep {
						assert.NotEqual(t, b.Spec.BlockSize, s.BlockSize, "the sweep repeats the main block size")
					}
				}
			})
		}
	}
	for _, sub := range []string{"logits", "generate", "lossless", "tokenize", "parity", "bench", "synth", "certify"} {
		assert.True(t, ran[sub], "README.md and docs/ show no higgs-verify %s command any more: update this test", sub)
	}
}

// TestTableCommands checks the higgs-verify commands docs/*.md record in table cells (the measurements of
// docs/performance.md, too long to run here): each names a subcommand and its flags parse.
func TestTableCommands(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	files, err := readme.Files(root)
	require.NoError(t, err)
	n := 0
	for _, f := range files {
		cmds, err := readme.TableCommands(f, "higgs-verify", map[string]string{"HOME": t.TempDir()})
		require.NoError(t, err)
		name, err := filepath.Rel(root, f)
		require.NoError(t, err)
		for _, c := range cmds {
			n++
			cl := &cli{stdout: io.Discard, stderr: io.Discard}
			r := cl.root()
			cmd, rest, err := r.Find(c.Args[1:])
			require.NoError(t, err, "%s:%d", name, c.Line)
			if !assert.NotSame(t, r, cmd, "%s:%d: no subcommand", name, c.Line) {
				continue
			}
			if assert.NoError(t, cmd.ParseFlags(rest), "%s:%d: %s", name, c.Line, strings.Join(c.Args, " ")) {
				assert.Empty(t, cmd.Flags().Args(), "%s:%d: arguments that are not flags", name, c.Line)
			}
		}
	}
	assert.Positive(t, n, "docs/ record no higgs-verify command in a table")
}
