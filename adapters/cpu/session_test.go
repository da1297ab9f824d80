package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

func loadFixture(t testing.TB, f testmodel.TargetSpec, threads int) *Target {
	t.Helper()
	tg, err := Load(context.Background(), testmodel.Target(t, f), LoadOptions{Threads: threads})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	return tg
}

func openSession(t testing.TB, tg *Target, taps []int) *Session {
	t.Helper()
	s, err := tg.NewSession(t.Context(), taps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s.(*Session)
}

// run forwards tokens and returns every position's logits and taps.
func run(t testing.TB, s *Session, tokens []ports.Token, tape bool) (logits []float32, taps []float32, res ports.ForwardResult) {
	t.Helper()
	res, logits, err := s.forward(context.Background(), tokens, ports.ForwardOptions{Taps: true, RecordTape: tape})
	require.NoError(t, err)
	data, rows, _, _ := res.Taps.(*Taps).Host()
	require.Equal(t, len(tokens), rows)
	return logits, append([]float32(nil), data...), res
}

func requireBits(t testing.TB, want, got []float32, what string) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s: lengths", what)
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("%s: element %d differs: %v vs %v", what, i, want[i], got[i])
		}
	}
}

func tokensOf(seed, n int) []ports.Token {
	out := make([]ports.Token, n)
	x := uint32(seed*7919 + 13)
	for i := range out {
		x = x*1664525 + 1013904223
		out[i] = ports.Token(x >> 8 % testmodel.Vocab)
	}
	return out
}

var consistencyFixtures = map[string]testmodel.TargetSpec{
	"qwen3 tied":                 {Family: "qwen3", Seed: 1, Layers: 2, Tied: true},
	"qwen3 untied bf16":          {Family: "qwen3", Seed: 2, Layers: 2, BF16: true},
	"qwen3_5 gated partial":      {Family: "qwen3_5", Seed: 3, Layers: 4, OutputGate: true, PartialRotary: 0.25},
	"qwen3_5 ungated full rope":  {Family: "qwen3_5", Seed: 4, Layers: 4, PartialRotary: 1, Tied: true},
	"qwen3_5_moe norm_topk":      {Family: "qwen3_5_moe", Seed: 5, Layers: 4, OutputGate: true, MoE: true, NormTopK: true, ExpertLayout: testmodel.ExpertsFused},
	"qwen3_next mlp_only":        {Family: "qwen3_next", Seed: 6, Layers: 4, MoE: true, MLPOnlyLayers: []int{1}},
	"qwen3_next mlx switch q4":   {Family: "qwen3_next", Seed: 7, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
	"qwen3_5 q3 g32":             {Family: "qwen3_5", Seed: 8, Layers: 4, OutputGate: true, Quant: &quant.Spec{Bits: 3, GroupSize: 32}, MLXLayout: true},
	"qwen3 q8 tied quantized lm": {Family: "qwen3", Seed: 9, Layers: 2, Tied: true, Quant: &quant.Spec{Bits: 8, GroupSize: 64}},
}

// A block forward gives the same bits as token-by-token decoding and as any other split.
func TestBlockEqualsTokenByToken(t *testing.T) {
	for name, f := range consistencyFixtures {
		t.Run(name, func(t *testing.T) {
			tg := loadFixture(t, f, 2)
			taps := []int{0, f.Layers - 1}
			toks := tokensOf(1, 12)
			block := openSession(t, tg, taps)
			wantLogits, wantTaps, _ := run(t, block, toks, false)

			step := openSession(t, tg, taps)
			var gotLogits, gotTaps []float32
			for _, tok := range toks {
				l, tp, _ := run(t, step, []ports.Token{tok}, false)
				gotLogits = append(gotLogits, l...)
				gotTaps = append(gotTaps, tp...)
			}
			requireBits(t, wantLogits, gotLogits, "logits")
			requireBits(t, wantTaps, gotTaps, "taps")

			split := openSession(t, tg, taps)
			l1, _, _ := run(t, split, toks[:5], false)
			l2, _, _ := run(t, split, toks[5:], false)
			requireBits(t, wantLogits, append(l1, l2...), "5+7 split logits")
			for _, v := range wantLogits {
				require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0))
			}
		})
	}
}

// The same logical model stored in different forms gives bit-identical logits.
func TestStorageFormsAgree(t *testing.T) {
	groups := map[string][]testmodel.TargetSpec{
		"hybrid moe: next fused / 3.5 separate, per-expert / fused / switch, HF / MLX layout": {
			{Family: "qwen3_next", Seed: 11, Layers: 4, MoE: true, NormTopK: true},
			{Family: "qwen3_5_moe", Seed: 11, Layers: 4, MoE: true, NormTopK: true, OutputGate: true, ExpertLayout: testmodel.ExpertsFused},
			{Family: "qwen3_5_moe", Seed: 11, Layers: 4, MoE: true, NormTopK: true, OutputGate: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true},
			{Family: "qwen3_next", Seed: 11, Layers: 4, MoE: true, NormTopK: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true},
		},
		"tied / untied head": {
			{Family: "qwen3_5", Seed: 12, Layers: 2, Tied: true, OutputGate: true},
			{Family: "qwen3_5", Seed: 12, Layers: 2, HeadCopy: true, OutputGate: true, MLXLayout: true},
			{Family: "qwen3_5", Seed: 12, Layers: 2, HeadCopy: true, OutputGate: true, BF16: false},
		},
	}
	for name, fs := range groups {
		t.Run(name, func(t *testing.T) {
			toks := tokensOf(2, 9)
			var want []float32
			for i, f := range fs {
				s := openSession(t, loadFixture(t, f, 2), nil)
				got, _, _ := run(t, s, toks, false)
				if i == 0 {
					want = got
					continue
				}
				requireBits(t, want, got, fmt.Sprintf("form %d (%+v)", i, f))
			}
		})
	}
}

// A quantized model matches the f32 model holding its dequantized weights.
func TestQuantizedMatchesDequantized(t *testing.T) {
	for _, f := range []testmodel.TargetSpec{
		{Family: "qwen3_next", Seed: 21, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
		{Family: "qwen3", Seed: 22, Layers: 2, Tied: true, Quant: &quant.Spec{Bits: 6, GroupSize: 64}},
		{Family: "qwen3_5", Seed: 23, Layers: 2, OutputGate: true, Quant: &quant.Spec{Bits: 2, GroupSize: 32}},
		{Family: "qwen3_5", Seed: 24, Layers: 2, OutputGate: true, Quant: &quant.Spec{Bits: 5, GroupSize: 64}},
	} {
		t.Run(fmt.Sprintf("%s-q%d-g%d", f.Family, f.Quant.Bits, f.Quant.GroupSize), func(t *testing.T) {
			q := f
			q.MLXLayout = true
			d := f
			d.StoreDequantized = true
			toks := tokensOf(3, 10)
			lq, _, _ := run(t, openSession(t, loadFixture(t, q, 2), nil), toks, false)
			ld, _, _ := run(t, openSession(t, loadFixture(t, d, 2), nil), toks, false)
			for i := range lq {
				assert.InDelta(t, ld[i], lq[i], 1e-4*max(1, math.Abs(float64(ld[i]))), "logit %d", i)
			}
		})
	}
}

func TestDeterministicAcrossThreads(t *testing.T) {
	f := consistencyFixtures["qwen3_next mlx switch q4"]
	toks := tokensOf(4, 16)
	var want, wantTaps []float32
	for i, threads := range []int{1, 4, 3} {
		l, tp, _ := run(t, openSession(t, loadFixture(t, f, threads), []int{1, 2}), toks, false)
		if i == 0 {
			want, wantTaps = l, tp
			continue
		}
		requireBits(t, want, l, fmt.Sprintf("logits with %d threads", threads))
		requireBits(t, wantTaps, tp, fmt.Sprintf("taps with %d threads", threads))
	}
}

// stateOf copies a session's whole state for comparison.
func stateOf(s *Session) (kv [][]float32, conv [][]float32, ssm [][]float32) {
	for i := range s.kv {
		if st := s.kv[i]; st != nil {
			kv = append(kv, append(append([]float32(nil), st.k...), st.v...))
		}
		if g := s.gdn[i]; g != nil {
			conv = append(conv, append([]float32(nil), g.conv...))
			ssm = append(ssm, append([]float32(nil), g.s[g.cur]...))
		}
	}
	return
}

func requireSameState(t *testing.T, want, got *Session, what string) {
	t.Helper()
	require.Equal(t, want.Len(), got.Len(), "%s: Len", what)
	require.Equal(t, want.pos.Rec, got.pos.Rec, "%s: recurrent position", what)
	wk, wc, ws := stateOf(want)
	gk, gc, gs := stateOf(got)
	for i := range wk {
		requireBits(t, wk[i], gk[i], fmt.Sprintf("%s: KV %d", what, i))
	}
	for i := range wc {
		requireBits(t, wc[i], gc[i], fmt.Sprintf("%s: conv %d", what, i))
		requireBits(t, ws[i], gs[i], fmt.Sprintf("%s: SSM %d", what, i))
	}
}

// Rollback after a verified block: tape replay and snapshot+recompute both give exactly the state reached by
// feeding only the committed tokens, for every accepted count, on attention, GDN and MoE layers together.
func TestRollbackExact(t *testing.T) {
	f := testmodel.TargetSpec{Family: "qwen3_next", Seed: 31, Layers: 4, MoE: true, MLPOnlyLayers: []int{2}}
	tg := loadFixture(t, f, 2)
	prompt := tokensOf(5, 6)
	next := []ports.Token{7}
	for _, T := range []int{8, 16} {
		block := tokensOf(6+T, T)
		for n := 0; n <= T; n++ {
			t.Run(fmt.Sprintf("T=%d/n=%d", T, n), func(t *testing.T) {
				ref := openSession(t, tg, nil)
				run(t, ref, prompt, false)
				if n > 0 {
					run(t, ref, block[:n], false)
				}

				replay := openSession(t, tg, nil)
				run(t, replay, prompt, false)
				_, _, res := run(t, replay, block, true)
				require.NotNil(t, res.Tape)
				require.Equal(t, T, res.Tape.Len())
				require.NoError(t, replay.TrimKV(len(prompt)+n))
				require.NoError(t, replay.ReplayTape(t.Context(), res.Tape, n))
				requireSameState(t, ref, replay, "tape replay")

				recompute := openSession(t, tg, nil)
				run(t, recompute, prompt, false)
				snap, err := recompute.Snapshot()
				require.NoError(t, err)
				require.Equal(t, len(prompt), snap.Position())
				run(t, recompute, block, true)
				require.NoError(t, recompute.Restore(snap))
				require.NoError(t, recompute.TrimKV(len(prompt)))
				if n > 0 {
					run(t, recompute, block[:n], false)
				}
				requireSameState(t, ref, recompute, "snapshot+recompute")

				want, _, _ := run(t, ref, next, false)
				got, _, _ := run(t, replay, next, false)
				requireBits(t, want, got, "next logits after replay")
				got, _, _ = run(t, recompute, next, false)
				requireBits(t, want, got, "next logits after recompute")
			})
		}
	}
}

// Replaying the same tape twice (different n, then the full block) still gives the right states.
func TestReplayTwice(t *testing.T) {
	tg := loadFixture(t, testmodel.TargetSpec{Family: "qwen3_5", Seed: 32, Layers: 4, OutputGate: true}, 2)
	prompt, block := tokensOf(7, 4), tokensOf(8, 8)
	s := openSession(t, tg, nil)
	run(t, s, prompt, false)
	_, _, res := run(t, s, block, true)
	full, _ := func() (*Session, error) {
		r := openSession(t, tg, nil)
		run(t, r, prompt, false)
		run(t, r, block, false)
		return r, nil
	}()
	require.NoError(t, s.TrimKV(len(prompt)+3))
	require.NoError(t, s.ReplayTape(t.Context(), res.Tape, 3))
	// Undo the trim by re-replaying the whole block: KV was trimmed, so only compare recurrent state.
	require.NoError(t, s.ReplayTape(t.Context(), res.Tape, 8))
	_, wc, ws := stateOf(full)
	_, gc, gs := stateOf(s)
	for i := range wc {
		requireBits(t, wc[i], gc[i], "conv")
		requireBits(t, ws[i], gs[i], "ssm")
	}
}

func TestSessionErrors(t *testing.T) {
	f := testmodel.TargetSpec{Family: "qwen3_5", Seed: 41, Layers: 2, OutputGate: true, Context: 16}
	tg := loadFixture(t, f, 1)
	ctx := t.Context()
	_, err := tg.NewSession(ctx, []int{2})
	assert.Error(t, err, "tap layer out of range")

	s := openSession(t, tg, nil)
	_, err = s.Forward(ctx, []ports.Token{testmodel.Vocab}, ports.ForwardOptions{})
	assert.ErrorContains(t, err, "vocabulary")
	_, err = s.Forward(ctx, []ports.Token{-2}, ports.ForwardOptions{})
	assert.ErrorContains(t, err, "vocabulary")
	_, err = s.Forward(ctx, nil, ports.ForwardOptions{})
	assert.Error(t, err)
	_, err = s.Forward(ctx, tokensOf(1, 17), ports.ForwardOptions{})
	assert.ErrorIs(t, err, ports.ErrContextFull)

	res, err := s.Forward(ctx, tokensOf(1, 6), ports.ForwardOptions{RecordTape: true, Rows: 2})
	require.NoError(t, err)
	assert.Len(t, res.Greedy, 2)
	tape := res.Tape
	_, err = s.Forward(ctx, tokensOf(2, 2), ports.ForwardOptions{})
	require.NoError(t, err)
	assert.ErrorContains(t, s.ReplayTape(ctx, tape, 1), "latest Forward")
	assert.Error(t, s.TrimKV(9))
	require.NoError(t, s.TrimKV(7))
	_, err = s.Forward(ctx, tokensOf(3, 1), ports.ForwardOptions{})
	assert.ErrorContains(t, err, "recurrent state", "KV trimmed without rolling back the recurrent layers")

	other := openSession(t, tg, nil)
	snap, err := other.Snapshot()
	require.NoError(t, err)
	assert.Error(t, s.Restore(snap))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = other.Forward(cancelled, tokensOf(1, 1), ports.ForwardOptions{})
	assert.ErrorIs(t, err, context.Canceled)

	require.NoError(t, other.Close())
	_, err = other.Forward(ctx, tokensOf(1, 1), ports.ForwardOptions{})
	assert.Error(t, err)
}

func TestForwardOutputs(t *testing.T) {
	tg := loadFixture(t, testmodel.TargetSpec{Family: "qwen3", Seed: 51, Layers: 2}, 2)
	s := openSession(t, tg, []int{1, 0})
	toks := tokensOf(9, 5)
	res, logits, err := s.forward(t.Context(), toks, ports.ForwardOptions{Taps: true, Sampling: &ports.SamplingParams{Temperature: 0.7, TopK: 5}})
	require.NoError(t, err)
	require.Len(t, res.Greedy, 5)
	require.Len(t, res.Dists, 5)
	for r := range 5 {
		row := logits[r*testmodel.Vocab : (r+1)*testmodel.Vocab]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		assert.Equal(t, ports.Token(best), res.Greedy[r])
		assert.Greater(t, res.Dists[r].Prob(res.Greedy[r]), 0.0)
	}
	taps := res.Taps
	assert.Equal(t, 5, taps.Rows())
	view := taps.Slice(2)
	d, rows, width, _ := view.(*Taps).Host()
	assert.Equal(t, 2, rows)
	assert.Equal(t, 2*testmodel.Hidden, width)
	assert.Len(t, d, 2*width)
	det := taps.Detach()
	_, err = s.Forward(t.Context(), toks[:1], ports.ForwardOptions{})
	require.NoError(t, err)
	dd, _, _, _ := det.(*Taps).Host()
	full, _, _, _ := taps.(*Taps).Host()
	assert.Equal(t, full, dd)

	_, err = s.Snapshot()
	assert.ErrorIs(t, err, errors.ErrUnsupported, "attention-only models have no recurrent state")

	info := tg.Info()
	assert.Equal(t, testmodel.Vocab, info.VocabSize)
	assert.Equal(t, []ports.Token{3}, info.EOSTokens)
	assert.False(t, info.HasRecurrent())

	// The drafter API: EmbedTokens + LMHead reproduce the model's own embedding and head.
	emb := make([]float32, 2*testmodel.Hidden)
	require.NoError(t, tg.EmbedTokens(emb, toks[:2]))
	lg := make([]float32, 2*testmodel.Vocab)
	require.NoError(t, tg.LMHead(lg, emb, 2))
	assert.Error(t, tg.EmbedTokens(emb, []ports.Token{testmodel.Vocab}))
	assert.Error(t, tg.LMHead(lg, emb, 3))
}

func TestLoadRefusesBadCheckpoints(t *testing.T) {
	f := testmodel.TargetSpec{Family: "qwen3_5", Seed: 61, Layers: 2, OutputGate: true}
	dir := testmodel.Target(t, f)
	ts := testmodel.Tensors(t, dir)
	write := func(ts []safetensors.Tensor) string { return testmodel.WithTensors(t, dir, ts) }
	extra, err := safetensors.FromFloat32("model.language_model.layers.0.bogus.weight", safetensors.F32, []int{2}, []float32{1, 2})
	require.NoError(t, err)
	_, err = Load(t.Context(), write(append(append([]safetensors.Tensor(nil), ts...), extra)), LoadOptions{})
	assert.ErrorContains(t, err, "layers.0.bogus.weight")

	mtp, err := safetensors.FromFloat32("mtp.fc.weight", safetensors.F32, []int{2}, []float32{1, 2})
	require.NoError(t, err)
	tg, err := Load(t.Context(), write(append(append([]safetensors.Tensor(nil), ts...), mtp)), LoadOptions{})
	require.NoError(t, err, "MTP tensors are ignored")
	require.NoError(t, tg.Close())

	var missing []safetensors.Tensor
	for _, tn := range ts {
		if tn.Name != "model.language_model.layers.1.self_attn.k_norm.weight" {
			missing = append(missing, tn)
		}
	}
	_, err = Load(t.Context(), write(missing), LoadOptions{})
	assert.ErrorContains(t, err, "layers.1.self_attn.k_norm.weight")
	assert.ErrorIs(t, err, safetensors.ErrMissingTensor)
}

// Sessions of one target run concurrently and give the same results as alone.
func TestConcurrentSessions(t *testing.T) {
	tg := loadFixture(t, consistencyFixtures["qwen3_next mlp_only"], 2)
	toks := tokensOf(12, 10)
	want, _, _ := run(t, openSession(t, tg, []int{0}), toks, false)
	results := make([][]float32, 4)
	errs := make(chan error, len(results))
	for i := range results {
		go func() {
			ps, err := tg.NewSession(context.Background(), []int{0})
			if err != nil {
				errs <- err
				return
			}
			defer ps.Close()
			_, l, err := ps.(*Session).forward(context.Background(), toks, ports.ForwardOptions{Taps: true})
			results[i] = l
			errs <- err
		}()
	}
	for range results {
		require.NoError(t, <-errs)
	}
	for i, got := range results {
		requireBits(t, want, got, fmt.Sprintf("session %d", i))
	}
}

// countdownCtx reports cancellation from its n-th Err call on, to stop a Forward between layers.
type countdownCtx struct {
	context.Context
	n int
}

func (c *countdownCtx) Err() error {
	c.n--
	if c.n < 0 {
		return context.Canceled
	}
	return nil
}

// A Forward interrupted between layers leaves the session refusing further use.
func TestInterruptedForward(t *testing.T) {
	tg := loadFixture(t, testmodel.TargetSpec{Family: "qwen3_5", Seed: 42, Layers: 4, OutputGate: true}, 1)
	s := openSession(t, tg, nil)
	_, err := s.Forward(&countdownCtx{Context: t.Context(), n: 3}, tokensOf(1, 3), ports.ForwardOptions{})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Forward(t.Context(), tokensOf(1, 1), ports.ForwardOptions{})
	assert.ErrorContains(t, err, "interrupted")
	assert.NoError(t, s.Close())
}
