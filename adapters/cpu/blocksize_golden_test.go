package cpu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/internal/golden"
	"github.com/higgs-go/higgs/ports"
)

// blockSizeTraces is testdata/goldens/blocksize_traces.json, written by tools/goldens/make_blocksize_goldens.py
// with the DFlash authors' dflash_generate at block sizes below, at and above each drafter's configured one
// (testdata/goldens/README.md documents it).
type blockSizeTraces struct {
	Target       string `json:"target"`
	MaxNewTokens int    `json:"max_new_tokens"`
	Cases        []struct {
		Drafter    string `json:"drafter"`
		Configured int    `json:"configured_block_size"`
		Runs       []struct {
			BlockSize int           `json:"block_size"`
			Prompt    []ports.Token `json:"prompt"`
			Tokens    []ports.Token `json:"tokens"`
			Rounds    []struct {
				Block    []ports.Token `json:"block"`
				Accepted int           `json:"accepted"`
				Margin   []float64     `json:"draft_top2_margin"`
			} `json:"rounds"`
		} `json:"runs"`
	} `json:"cases"`
}

// TestAuthorsBlockSizeTraces replays the authors' greedy loop at every recorded block size, round by round:
// each verified block (drafts compared where the reference's draft top-2 margin exceeds 1e-3; after the first
// low-margin difference the rounds may legitimately diverge, and only the final tokens are compared) and its
// accepted count, then the generated tokens exactly. Like the authors' loop, the last round's block is cut to
// the tokens left plus the anchor.
func TestAuthorsBlockSizeTraces(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(golden.Dir(), "blocksize_traces.json"))
	if os.IsNotExist(err) {
		t.Skip("testdata/goldens/blocksize_traces.json is absent: run tools/goldens/make_blocksize_goldens.py on the accelerator machine")
	}
	require.NoError(t, err)
	var tr blockSizeTraces
	require.NoError(t, json.Unmarshal(raw, &tr))
	require.NotEmpty(t, tr.Cases)
	target, err := Load(t.Context(), filepath.Join(golden.Dir(), tr.Target), LoadOptions{Threads: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = target.Close() })
	for _, c := range tr.Cases {
		t.Run(c.Drafter, func(t *testing.T) {
			d, err := LoadDrafter(t.Context(), filepath.Join(golden.Dir(), c.Drafter), target, DrafterOptions{})
			require.NoError(t, err)
			defer d.Close()
			require.Equal(t, c.Configured, d.BlockSize())
			above := false
			for ri, run := range c.Runs {
				above = above || run.BlockSize > c.Configured
				toks, rounds := authorsLoop(t, draftPair{target, d}, run.Prompt, run.BlockSize, tr.MaxNewTokens)
				assert.Equal(t, run.Tokens, toks, "run %d (block %d): tokens", ri, run.BlockSize)
				for i, w := range run.Rounds {
					require.Less(t, i, len(rounds), "run %d (block %d): rounds", ri, run.BlockSize)
					got := rounds[i]
					require.Len(t, got.block, len(w.Block), "run %d (block %d) round %d: block size", ri, run.BlockSize, i)
					same := true
					for j := 1; j < len(w.Block); j++ {
						if w.Block[j] == got.block[j] {
							continue
						}
						same = false
						assert.LessOrEqual(t, w.Margin[j-1], draftTraceMargin, "run %d (block %d) round %d: draft slot %d", ri, run.BlockSize, i, j)
					}
					if !same {
						break // a near-tie flipped: the rounds may diverge from here on
					}
					assert.Equal(t, w.Accepted, got.accepted, "run %d (block %d) round %d: accepted", ri, run.BlockSize, i)
				}
			}
			assert.True(t, above, "the goldens hold block sizes above the configured one")
		})
	}
}

type authorsRound struct {
	block    []ports.Token
	accepted int
}

// authorsLoop decodes n tokens after prompt greedily as the authors' dflash_generate does on an attention-only
// target: each round drafts min(bs, tokens left + 1) slots, verifies them in one forward, keeps the agreeing
// prefix and the target's next token, and trims the rest.
func authorsLoop(t *testing.T, p draftPair, prompt []ports.Token, bs, n int) ([]ports.Token, []authorsRound) {
	t.Helper()
	ctx := t.Context()
	sess, err := p.target.NewSession(ctx, p.drafter.TapLayers())
	require.NoError(t, err)
	defer sess.Close()
	ds, err := p.drafter.NewSession(ctx)
	require.NoError(t, err)
	defer ds.Close()
	fr, err := sess.Forward(ctx, prompt, ports.ForwardOptions{Rows: 1, Taps: true})
	require.NoError(t, err)
	out := []ports.Token{fr.Greedy[0]}
	pending := fr.Taps.Detach()
	var rounds []authorsRound
	for len(out) < n {
		vs := min(bs, n-len(out)+1)
		anchor := out[len(out)-1]
		prop, err := ds.Draft(ctx, anchor, pending, vs)
		require.NoError(t, err)
		block := append([]ports.Token{anchor}, prop.Tokens...)
		start := sess.Len()
		v, err := sess.Forward(ctx, block, ports.ForwardOptions{Taps: true})
		require.NoError(t, err)
		a := 0
		for a < vs-1 && prop.Tokens[a] == v.Greedy[a] {
			a++
		}
		rounds = append(rounds, authorsRound{block, a})
		out = append(append(out, prop.Tokens[:a]...), v.Greedy[a])
		require.NoError(t, sess.TrimKV(start+a+1))
		pending = v.Taps.Slice(a + 1).Detach()
	}
	return out[:n], rounds
}
