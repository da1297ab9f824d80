package porttest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// Rollback names how Speculate rolls a partly rejected block back.
type Rollback int

const (
	// RollbackReplay replays the verify's tape (TapeReplayer; sessions without it, or whose Forward recorded
	// no tape, restore a snapshot and recompute); attention-only models only trim.
	RollbackReplay Rollback = iota
	// RollbackRecompute restores the snapshot taken before the verify and recomputes the kept positions.
	RollbackRecompute
)

func (r Rollback) String() string {
	if r == RollbackRecompute {
		return "recompute"
	}
	return "replay"
}

// Round is one draft–verify round of Speculate: the verified block (anchor first) and how many drafted
// tokens the target accepted.
type Round struct {
	Block    []ports.Token
	Accepted int
}

// Greedy decodes n tokens after prompt token by token on a fresh session of t.
func Greedy(ctx context.Context, t ports.Target, prompt []ports.Token, n int) ([]ports.Token, error) {
	sess, err := t.NewSession(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	res, err := sess.Forward(ctx, prompt, ports.ForwardOptions{Rows: 1})
	if err != nil {
		return nil, err
	}
	out := []ports.Token{res.Greedy[0]}
	for len(out) < n {
		if res, err = sess.Forward(ctx, out[len(out)-1:], ports.ForwardOptions{}); err != nil {
			return nil, err
		}
		out = append(out, res.Greedy[0])
	}
	return out, nil
}

// Speculate decodes n tokens after prompt greedily with drafter d proposing blocks of bs tokens (anchor
// included) for t to verify: a small restatement, through the ports only, of the loop the domain implements
// (docs/model-math.md#the-generation-loop), so a backend pair can be checked end to end without the domain. Each
// round the drafter receives the taps of the positions committed since its last call, the target verifies [anchor,
// drafts…] in one Forward, the longest agreeing prefix is kept with the target's own next token as the new
// anchor, and the rest is rolled back with TrimKV plus rb for recurrent layers.
func Speculate(ctx context.Context, t ports.Target, d ports.Drafter, prompt []ports.Token, bs int, rb Rollback, n int) ([]ports.Token, []Round, error) {
	if bs < 2 {
		return nil, nil, fmt.Errorf("block size %d must be ≥ 2", bs)
	}
	sess, err := t.NewSession(ctx, d.TapLayers())
	if err != nil {
		return nil, nil, err
	}
	defer sess.Close()
	ds, err := d.NewSession(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer ds.Close()
	res, err := sess.Forward(ctx, prompt, ports.ForwardOptions{Rows: 1, Taps: true})
	if err != nil {
		return nil, nil, err
	}
	out := []ports.Token{res.Greedy[0]}
	pending := res.Taps // the taps of committed positions the drafter has not seen
	var rounds []Round
	for len(out) < n {
		anchor := out[len(out)-1]
		prop, err := ds.Draft(ctx, anchor, pending, bs)
		if err != nil {
			return nil, nil, fmt.Errorf("round %d: draft: %w", len(rounds), err)
		}
		if len(prop.Tokens) != bs-1 {
			return nil, nil, fmt.Errorf("round %d: %d proposals for block size %d", len(rounds), len(prop.Tokens), bs)
		}
		block := append([]ports.Token{anchor}, prop.Tokens...)
		start := sess.Len()
		var snap ports.RecurrentSnapshot
		_, canReplay := sess.(ports.TapeReplayer)
		if rb == RollbackRecompute || !canReplay {
			if snap, err = sess.Snapshot(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
				return nil, nil, fmt.Errorf("round %d: snapshot: %w", len(rounds), err)
			}
		}
		v, err := sess.Forward(ctx, block, ports.ForwardOptions{Taps: true, RecordTape: rb == RollbackReplay && canReplay})
		if err != nil {
			return nil, nil, fmt.Errorf("round %d: verify: %w", len(rounds), err)
		}
		k := 0
		for k < bs-1 && prop.Tokens[k] == v.Greedy[k] {
			k++
		}
		rounds = append(rounds, Round{Block: block, Accepted: k})
		out = append(append(out, prop.Tokens[:k]...), v.Greedy[k])
		pending = v.Taps
		if keep := k + 1; keep < bs {
			if err := sess.TrimKV(start + keep); err != nil {
				return nil, nil, fmt.Errorf("round %d: trim: %w", len(rounds), err)
			}
			switch {
			case v.Tape != nil && canReplay:
				if err := sess.(ports.TapeReplayer).ReplayTape(ctx, v.Tape, keep); err != nil {
					return nil, nil, fmt.Errorf("round %d: replay: %w", len(rounds), err)
				}
			case snap != nil:
				if err := sess.TrimKV(start); err != nil {
					return nil, nil, err
				}
				if err := sess.Restore(snap); err != nil {
					return nil, nil, fmt.Errorf("round %d: restore: %w", len(rounds), err)
				}
				if v, err = sess.Forward(ctx, block[:keep], ports.ForwardOptions{Taps: true}); err != nil {
					return nil, nil, fmt.Errorf("round %d: recompute: %w", len(rounds), err)
				}
			}
			pending = v.Taps.Slice(keep)
		}
	}
	return out[:n], rounds, nil
}

// SpeculativeSuite checks a target and drafter end to end: greedy speculative decoding gives exactly the
// tokens of greedy decoding, for every prompt, block size and rollback, with the drafted block's first token
// always the last committed one.
type SpeculativeSuite struct {
	Target  ports.Target
	Drafter ports.Drafter
	// Prompts to decode from; nil means three fixed prompts (1, 4 and 27 tokens) over a vocabulary of
	// Target.Info().VocabSize.
	Prompts [][]ports.Token
	// BlockSizes to draft with; nil means 2, 4, 8, the drafter's block size and twice it (a block above the
	// configured one is drafted as asked, like any other).
	BlockSizes []int
	// Tokens to generate per run (default 24).
	Tokens int
}

// Run runs every combination; it returns the number of drafted tokens accepted over the suite (a suite
// whose drafter never agrees still passes: losslessness does not depend on it).
func (s SpeculativeSuite) Run(t *testing.T) int {
	require.NotNil(t, s.Target, "SpeculativeSuite.Target")
	require.NotNil(t, s.Drafter, "SpeculativeSuite.Drafter")
	V := s.Target.Info().VocabSize
	if s.Prompts == nil {
		long := make([]ports.Token, 27)
		for i := range long {
			long[i] = ports.Token((40 + i) % V)
		}
		s.Prompts = [][]ports.Token{{1 % ports.Token(V)}, {5 % ports.Token(V), 9 % ports.Token(V), 13 % ports.Token(V), 2}, long}
	}
	if s.BlockSizes == nil {
		for _, bs := range []int{2, 4, 8, s.Drafter.BlockSize(), 2 * s.Drafter.BlockSize()} {
			if len(s.BlockSizes) == 0 || s.BlockSizes[len(s.BlockSizes)-1] < bs {
				s.BlockSizes = append(s.BlockSizes, bs)
			}
		}
	}
	if s.Tokens == 0 {
		s.Tokens = 24
	}
	accepted := 0
	for pi, prompt := range s.Prompts {
		want, err := Greedy(t.Context(), s.Target, prompt, s.Tokens)
		require.NoError(t, err, "prompt %d: greedy", pi)
		for _, bs := range s.BlockSizes {
			for _, rb := range []Rollback{RollbackReplay, RollbackRecompute} {
				got, rounds, err := Speculate(t.Context(), s.Target, s.Drafter, prompt, bs, rb, s.Tokens)
				require.NoError(t, err, "prompt %d, block size %d, %s", pi, bs, rb)
				require.Equal(t, want, got, "prompt %d, block size %d, %s: speculative output differs from greedy", pi, bs, rb)
				seq := append([]ports.Token{}, prompt...)
				seq = append(seq, got...)
				emitted := len(prompt) + 1
				for i, r := range rounds {
					require.Equal(t, seq[emitted-1], r.Block[0], "prompt %d, block size %d, %s: round %d's anchor is the last committed token", pi, bs, rb, i)
					emitted += r.Accepted + 1
					accepted += r.Accepted
				}
			}
		}
	}
	return accepted
}
