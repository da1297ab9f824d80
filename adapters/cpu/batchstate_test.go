package cpu

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// The batched attention and recurrence (one pool loop over every sequence's work items) give each sequence
// the bits of its solo forward: logits, taps, the taped rollback and the state the next rounds read, with
// sequences at mixed positions and mixed row counts, in varying batch company, on 1 and 3 workers, exact
// and fast kernels, dense and hybrid targets.
func TestBatchStatesMatchSolo(t *testing.T) {
	var _ model.BatchStates[act, *weight] = ops{}
	for _, f := range []testmodel.TargetSpec{
		{Family: "qwen3", Seed: 71, Layers: 2},
		{Family: "qwen3_next", Seed: 72, Layers: 4},
		{Family: "qwen3_5", Seed: 73, Layers: 4, OutputGate: true, PartialRotary: 0.25},
	} {
		for _, threads := range []int{1, 3} {
			for _, mode := range []kernel.Mode{kernel.ModeExact, kernel.ModeFast} {
				t.Run(fmt.Sprintf("%s/threads%d/mode%d", f.Family, threads, mode), func(t *testing.T) {
					t.Parallel()
					f := f
					f.Context = 64
					tg, err := Load(context.Background(), testmodel.Target(t, f), LoadOptions{Threads: threads, Kernels: mode})
					require.NoError(t, err)
					t.Cleanup(func() { _ = tg.Close() })
					batchStatesRounds(t, tg, []int{f.Layers - 1, 0})
				})
			}
		}
	}
}

func batchStatesRounds(t *testing.T, tg *Target, taps []int) {
	const n = 5
	V := tg.m.Arch.Vocab
	solo, batched := make([]*Session, n), make([]*Session, n)
	for i := range n {
		solo[i], batched[i] = openSession(t, tg, taps), openSession(t, tg, taps)
		prefix := make([]ports.Token, []int{0, 9, 3, 14, 6}[i])
		for j := range prefix {
			prefix[j] = ports.Token((j*31 + i*17 + 3) % V)
		}
		if len(prefix) > 0 {
			for _, s := range []*Session{solo[i], batched[i]} {
				_, err := s.Forward(t.Context(), prefix, ports.ForwardOptions{Rows: 1})
				require.NoError(t, err)
			}
		}
	}
	// Each round: which sequences join, in which order, and their block sizes; taped blocks roll back to
	// keep rows.
	rounds := []struct{ seqs, rows []int }{
		{seqs: []int{0, 1, 2, 3, 4}, rows: []int{4, 1, 3, 2, 5}},
		{seqs: []int{3, 0, 4}, rows: []int{1, 4, 4}},
		{seqs: []int{2, 4, 1, 0}, rows: []int{3, 1, 2, 1}},
		{seqs: []int{4, 3, 2, 1, 0}, rows: []int{2, 3, 1, 4, 1}},
	}
	for r, rd := range rounds {
		items := make([]ports.BatchItem, len(rd.seqs))
		for k, i := range rd.seqs {
			toks := make([]ports.Token, rd.rows[k])
			for j := range toks {
				toks[j] = ports.Token((j*53 + i*7 + r*13 + 1) % V)
			}
			items[k] = ports.BatchItem{Session: batched[i], Tokens: toks, Opts: ports.ForwardOptions{Taps: true, Logits: true, RecordTape: rd.rows[k] > 1}}
		}
		res, err := tg.ForwardBatch(t.Context(), items)
		require.NoError(t, err)
		for k, i := range rd.seqs {
			require.NoError(t, res[k].Err)
			base := solo[i].Len()
			want, err := solo[i].Forward(t.Context(), items[k].Tokens, items[k].Opts)
			require.NoError(t, err)
			got := res[k].Result
			require.Equal(t, want.Logits, got.Logits, "round %d sequence %d: logits", r, i)
			wt, err := hostRows(want.Taps)
			require.NoError(t, err)
			gt, err := hostRows(got.Taps)
			require.NoError(t, err)
			require.Equal(t, wt, gt, "round %d sequence %d: taps", r, i)
			if keep := (rd.rows[k] + 1) / 2; got.Tape != nil && keep < rd.rows[k] {
				require.NoError(t, solo[i].TrimKV(base+keep))
				require.NoError(t, solo[i].ReplayTape(t.Context(), want.Tape, keep))
				require.NoError(t, batched[i].TrimKV(base+keep))
				require.NoError(t, batched[i].ReplayTape(t.Context(), got.Tape, keep))
			}
		}
	}
	// The states every round left behind agree: one more token each, alone.
	for i := range n {
		tok := []ports.Token{ports.Token(i + 2)}
		want, err := solo[i].Forward(t.Context(), tok, ports.ForwardOptions{Logits: true})
		require.NoError(t, err)
		got, err := batched[i].Forward(t.Context(), tok, ports.ForwardOptions{Logits: true})
		require.NoError(t, err)
		require.Equal(t, want.Logits, got.Logits, "sequence %d after the rounds", i)
	}
}
