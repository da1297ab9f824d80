package mlx

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

func TestMicroBatches(t *testing.T) {
	tests := []struct {
		name        string
		sizes       []int
		m, rowsEach int
		want        []int32
	}{
		{"one sequence", []int{40}, 3, 1, []int32{1}},
		{"few rows pass whole", []int{1, 1, 1}, 3, 32, []int32{3}},
		{"one per rank", []int{1, 1, 1}, 3, 1, []int32{1, 1, 1}},
		{"fewer ranks than sequences", []int{1, 1, 1, 1, 1}, 2, 1, []int32{3, 2}},
		{"balanced by rows", []int{30, 2, 2, 30}, 2, 16, []int32{2, 2}},
		{"balanced by rows, uneven", []int{30, 2, 2, 2, 30}, 2, 16, []int32{3, 2}},
		{"rows decide the count", []int{20, 20, 20, 20}, 4, 32, []int32{2, 1, 1}},
		{"a heavy last sequence keeps one each", []int{1, 1, 100}, 3, 1, []int32{1, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := microBatches(tc.sizes, tc.m, tc.rowsEach)
			assert.Equal(t, tc.want, got)
			var n int32
			for _, c := range got {
				assert.Positive(t, c)
				n += c
			}
			assert.Equal(t, int32(len(tc.sizes)), n, "every sequence in one micro-batch")
		})
	}
}

// batchPrompts are batchedDecode's sequences (ragged): the first is distPrompt.
var batchPrompts = [][]ports.Token{distPrompt, {4, 8, 15, 16, 23}, {1, 2, 3, 5, 8, 13, 21, 34, 55, 6, 7}}

// batchedDecode decodes batchPrompts together, one ForwardBatch per round (the prompts' prefill first),
// for n tokens each: the first two greedily (the second recording tapes), the third sampled at temperature
// 0.9 from its own PCG as seededDecode does, every item with taps; it returns the sequences and the sum of
// each round's taps.
func batchedDecode(ctx context.Context, t ports.Target, n int) ([][]ports.Token, []float64, error) {
	bf, ok := t.(ports.BatchForwarder)
	if !ok {
		return nil, nil, errors.New("the target has no batched forward")
	}
	return lockstepDecode(ctx, t, n, bf.ForwardBatch)
}

// soloForward runs a round's items one Forward after another.
func soloForward(ctx context.Context, items []ports.BatchItem) ([]ports.BatchResult, error) {
	out := make([]ports.BatchResult, len(items))
	for i, it := range items {
		r, err := it.Session.Forward(ctx, it.Tokens, it.Opts)
		if err != nil {
			return nil, err
		}
		out[i].Result = r
	}
	return out, nil
}

// lockstepDecode is batchedDecode with each round run by fwd.
func lockstepDecode(ctx context.Context, t ports.Target, n int, fwd func(context.Context, []ports.BatchItem) ([]ports.BatchResult, error)) ([][]ports.Token, []float64, error) {
	sessions := make([]ports.Session, len(batchPrompts))
	for i := range sessions {
		s, err := t.NewSession(ctx, []int{1, 3})
		if err != nil {
			return nil, nil, err
		}
		defer s.Close()
		sessions[i] = s
	}
	rnd := rand.New(rand.NewPCG(7, 8))
	out := make([][]ports.Token, len(batchPrompts))
	var sums []float64
	for len(out[0]) < n {
		items := make([]ports.BatchItem, len(sessions))
		for i, s := range sessions {
			block := batchPrompts[i]
			if len(out[i]) > 0 {
				block = out[i][len(out[i])-1:]
			}
			opts := ports.ForwardOptions{Rows: 1, Taps: true, RecordTape: i == 1}
			if i == 2 {
				opts.Sampling = &ports.SamplingParams{Temperature: 0.9}
			}
			items[i] = ports.BatchItem{Session: s, Tokens: block, Opts: opts}
		}
		res, err := fwd(ctx, items)
		if err != nil {
			return nil, nil, err
		}
		var sum float64
		for i, r := range res {
			if r.Err != nil {
				return nil, nil, fmt.Errorf("sequence %d: %w", i, r.Err)
			}
			tok := r.Result.Greedy[0]
			if i == 2 {
				tok = r.Result.Dists[0].Sample(rnd.Float64(), ports.NoToken)
			}
			out[i] = append(out[i], tok)
			rows, err := readTaps(r.Result.Taps)
			if err != nil {
				return nil, nil, err
			}
			for _, row := range rows {
				for _, v := range row {
					sum += float64(v)
				}
			}
		}
		sums = append(sums, sum)
	}
	return out, sums, nil
}

// soloDecodes is what batchedDecode's sequences decode alone, one Forward at a time, and the sums of their
// taps in batchedDecode's rounds (every item run alone).
func soloDecodes(t *testing.T, tg ports.Target) ([][]ports.Token, []float64) {
	t.Helper()
	var out [][]ports.Token
	for _, p := range batchPrompts[:2] {
		g, err := porttest.Greedy(t.Context(), tg, p, distTokens)
		require.NoError(t, err)
		out = append(out, g)
	}
	s, err := seededDecode(t.Context(), tg, batchPrompts[2], distTokens, 7)
	require.NoError(t, err)
	out = append(out, s)
	lock, sums, err := lockstepDecode(t.Context(), tg, distTokens, soloForward)
	require.NoError(t, err)
	require.Equal(t, out, lock, "the lockstep solo decode is the solo decodes")
	return out, sums
}

// TestDistributedBatchSuite: the batched-forward and batched-draft conformance suite on rank 0 of a
// hybrid target split over 3 processes, every round cut into micro-batches: each item equals its solo
// call through the same pipeline within the single-process suite's tolerance (a micro-batch of several
// sequences rounds like a batched round in one process: MLX's products depend on the rows beside them).
func TestDistributedBatchSuite(t *testing.T) {
	requireRing(t)
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 95})
	ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 96, Taps: []int{1, 3}, Mask: 60})
	outs := runRanks(t, distSpec{Target: tdir, Drafter: ddir, Suite: true, MicroRows: 1}, 3, 3)
	for r, o := range outs[0].Ranks {
		t.Logf("rank %d: %d batched rounds in %d micro-batches: compute %v, wait %v, send %v", r, o.Batches, o.MicroBatches, o.BatchCompute, o.BatchWait, o.BatchSend)
		assert.Greater(t, o.MicroBatches, o.Batches, "rank %d cut rounds into micro-batches", r)
	}
}

// The timeout's error names the rank the round waited on: with 3+ ranks the first whose acknowledgement is
// missing, then the last rank's answer; on a worker its input or the acknowledgement it relays.
func TestPipelineLostNamesRank(t *testing.T) {
	tests := []struct {
		rank, size, waiting int
		want                string
	}{
		{0, 2, 1, "no answer from rank 1 within"},
		{0, 3, 0, "no answer from rank 1 within"},
		{0, 3, 1, "no answer from rank 1 within"},
		{0, 3, 2, "no answer from rank 2 within 1s (ranks 1..1 acknowledged"},
		{0, 4, 3, "no answer from rank 3 within 1s (ranks 1..2 acknowledged"},
		{0, 3, 3, "no answer from rank 2 within 1s (every worker acknowledged"},
		{1, 3, 0, "rank 1: no message from rank 0 within"},
		{1, 4, 3, "rank 1: no acknowledgement from rank 3 within"},
		{2, 3, 1, "rank 2: no message from rank 1 within"},
	}
	for _, tc := range tests {
		p := &pipeline{rank: tc.rank, size: tc.size}
		p.waiting.Store(int32(tc.waiting))
		err := p.lost(time.Second)
		require.ErrorIs(t, err, ErrRankLost)
		require.ErrorIs(t, err, ports.ErrBackendLost)
		assert.Contains(t, err.Error(), tc.want, "rank %d of %d waiting on %d", tc.rank, tc.size, tc.waiting)
	}
}
