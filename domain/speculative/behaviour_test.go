package speculative

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

var hybrid = portfake.Config{Tape: true}

func oracle(t *testing.T, m *portfake.Model, prompt []ports.Token, n int) []ports.Token {
	t.Helper()
	out, err := m.GreedyContinuation(prompt, n)
	require.NoError(t, err)
	return out
}

func TestStopTokenInsideAcceptedChunk(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	want := oracle(t, m, prompt, 40)
	// A stop id whose first occurrence is in the middle of round 1's chunk (tokens 1..8 with block 8).
	idx := -1
	for i := 3; i < 7; i++ {
		if slices.Index(want, want[i]) == i {
			idx = i
			break
		}
	}
	require.NotEqual(t, -1, idx, "toy model continuation has no fresh token in 3..6; change the prompt")
	r := newRig(t, hybrid, portfake.Perfect(m), portfake.DrafterConfig{})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 8, MaxTokens: 40, StopTokens: []ports.Token{want[idx]}}, nil, prompt)
	require.NoError(t, err)
	assert.Equal(t, want[:idx+1], res.Tokens, "cut after the first stop token, inclusive")
	assert.Equal(t, FinishStop, res.Finish)
	require.Len(t, res.Stats.Rounds, 1)
	rs := res.Stats.Rounds[0]
	assert.Equal(t, 7, rs.Accepted)
	assert.Equal(t, idx, rs.Committed)
	assert.NotEqual(t, RollbackNone, rs.Rollback, "the cut round still rolls the session back to the committed tokens")
}

func TestStopTokenAsFirstToken(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	want := oracle(t, m, prompt, 1)
	r := newRig(t, hybrid, portfake.Perfect(m), portfake.DrafterConfig{})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 8, MaxTokens: 40, StopTokens: []ports.Token{want[0]}}, nil, prompt)
	require.NoError(t, err)
	assert.Equal(t, want, res.Tokens)
	assert.Equal(t, FinishStop, res.Finish)
	assert.Empty(t, res.Stats.Rounds)
}

func TestMaxTokensCutsTheChunk(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	for _, maxTokens := range []int{1, 2, 9, 10, 17} {
		r := newRig(t, hybrid, portfake.Perfect(m), portfake.DrafterConfig{})
		res, err := r.generate(t, t.Context(), Config{BlockSize: 8, MaxTokens: maxTokens}, nil, prompt)
		require.NoError(t, err)
		assert.Equal(t, oracle(t, m, prompt, maxTokens), res.Tokens, "max %d", maxTokens)
		assert.Equal(t, FinishLength, res.Finish)
		for _, rs := range res.Stats.Rounds {
			assert.LessOrEqual(t, rs.BlockSize, maxTokens, "the last block is shortened to remaining+1")
		}
	}
	// 10 tokens, block 8, perfect drafts: the first token, then 8, then a block of 2 for the last one.
	r := newRig(t, hybrid, portfake.Perfect(m), portfake.DrafterConfig{})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 8, MaxTokens: 10}, nil, prompt)
	require.NoError(t, err)
	require.Len(t, res.Stats.Rounds, 2)
	assert.Equal(t, 2, res.Stats.Rounds[1].BlockSize)
	assert.Equal(t, reasonLength, res.Stats.Rounds[1].Policy)
	assert.Equal(t, 1, res.Stats.Rounds[1].Committed)
}

func TestContextLength(t *testing.T) {
	prompt := testPrompt(6, 32)
	const ctxLen = 20
	cfg := hybrid
	cfg.ContextLength = ctxLen // the fake refuses to go past it as well
	m := portfake.MustNew(cfg)
	for _, bs := range []int{1, 3, 8} {
		r := newRig(t, cfg, portfake.MatchThenDiverge(m, 2), portfake.DrafterConfig{})
		res, err := r.generate(t, t.Context(), Config{BlockSize: bs, ContextLength: ctxLen}, nil, prompt)
		require.NoError(t, err, "bs %d", bs)
		assert.Equal(t, FinishLength, res.Finish)
		assert.Equal(t, oracle(t, m, prompt, ctxLen-len(prompt)), res.Tokens, "prompt + generated fill the context exactly")
		for _, c := range r.fake.Calls() {
			assert.LessOrEqual(t, c.Pos+len(c.Tokens), ctxLen, "never Forward past the context length")
		}
	}
	// MaxTokens below the room left wins.
	r := newRig(t, cfg, portfake.Perfect(m), portfake.DrafterConfig{})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 4, ContextLength: ctxLen, MaxTokens: 5}, nil, prompt)
	require.NoError(t, err)
	assert.Len(t, res.Tokens, 5)
	// MaxTokens past the room left is refused before anything runs.
	r = newRig(t, cfg, nil, portfake.DrafterConfig{})
	_, err = r.generate(t, t.Context(), Config{BlockSize: 1, ContextLength: ctxLen, MaxTokens: ctxLen - len(prompt) + 1}, nil, prompt)
	require.ErrorIs(t, err, ports.ErrContextFull)
	assert.Empty(t, r.fake.Calls())
	// A prompt that fills the context leaves no room.
	for _, n := range []int{ctxLen, ctxLen + 3} {
		r := newRig(t, cfg, nil, portfake.DrafterConfig{})
		_, err := r.generate(t, t.Context(), Config{BlockSize: 1, ContextLength: ctxLen}, nil, testPrompt(n, 32))
		require.ErrorIs(t, err, ports.ErrContextFull)
		assert.Empty(t, r.fake.Calls())
	}
}

func TestCancellationStopsWithinOneRound(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	for _, cancelAt := range []int{1, 2, 4} {
		r := newRig(t, hybrid, portfake.MatchThenDiverge(m, 2), portfake.DrafterConfig{})
		ctx, cancel := context.WithCancel(t.Context())
		dec, err := New(Config{BlockSize: 6, MaxTokens: 100}, portfake.NewClock(1), nil)
		require.NoError(t, err)
		emits := 0
		seq := slices.Clone(prompt)
		res, err := dec.Generate(ctx, r.sess, r.draft, prompt, func(c []ports.Token) error {
			seq = append(seq, c...)
			emits++
			if emits == cancelAt {
				cancel()
			}
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, FinishCancelled, res.Finish)
		assert.Len(t, res.Stats.Rounds, cancelAt-1, "no round starts after the cancelling emit")
		assert.Equal(t, seq[len(prompt):], res.Tokens, "the result holds exactly what was emitted")
		r.requireCommitted(t, seq)
	}
	// Already cancelled: nothing runs.
	r := newRig(t, hybrid, nil, portfake.DrafterConfig{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res, err := r.generate(t, ctx, Config{BlockSize: 1, MaxTokens: 5}, nil, prompt)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, FinishCancelled, res.Finish)
	assert.Empty(t, r.fake.Calls())
}

func TestDrafterFailure(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	for _, failOn := range []int{1, 3} {
		r := newRig(t, hybrid, portfake.MatchThenDiverge(m, 2), portfake.DrafterConfig{FailOn: failOn})
		res, err := r.generate(t, t.Context(), Config{BlockSize: 6, MaxTokens: 50}, nil, prompt)
		require.ErrorIs(t, err, portfake.ErrInjected)
		assert.Len(t, res.Stats.Rounds, failOn-1)
		assert.Equal(t, oracle(t, m, prompt, len(res.Tokens)), res.Tokens)
		calls := r.draft.Calls()
		require.Len(t, calls, failOn)
		assert.Equal(t, calls[failOn-1].LenBefore, r.draft.Len(), "the drafter is cropped back to its length before the failed call")
	}
}

func TestDrafterLeavingNoiseIsCropped(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	want := oracle(t, m, prompt, 30)
	r := newRig(t, hybrid, portfake.MatchThenDiverge(m, 3), portfake.DrafterConfig{LeaveNoise: true})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 6, MaxTokens: 30}, nil, prompt)
	require.NoError(t, err)
	assert.Equal(t, want, res.Tokens)
}

func TestForwardAndEmitErrors(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	boom := errors.New("boom")
	for _, call := range []int{1, 2, 3} {
		r := newRig(t, hybrid, portfake.MatchThenDiverge(m, 1), portfake.DrafterConfig{})
		r.fake.FailForward(call, boom)
		_, err := r.generate(t, t.Context(), Config{BlockSize: 4, MaxTokens: 30}, nil, prompt)
		require.ErrorIs(t, err, boom, "forward call %d", call)
	}
	r := newRig(t, hybrid, portfake.MatchThenDiverge(m, 1), portfake.DrafterConfig{})
	dec, err := New(Config{BlockSize: 4, MaxTokens: 30}, portfake.NewClock(1), nil)
	require.NoError(t, err)
	n := 0
	res, err := dec.Generate(t.Context(), r.sess, r.draft, prompt, func([]ports.Token) error {
		n++
		if n == 2 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, FinishCancelled, res.Finish)
	assert.Len(t, res.Stats.Rounds, 1)
}

func TestBadGenerateInput(t *testing.T) {
	m := portfake.MustNew(hybrid)
	dec, err := New(Config{BlockSize: 4, MaxTokens: 5}, portfake.NewClock(1), nil)
	require.NoError(t, err)
	noop := func([]ports.Token) error { return nil }
	sess := func() ports.Session {
		s, err := m.NewSession(t.Context(), nil)
		require.NoError(t, err)
		return s
	}
	_, err = dec.Generate(t.Context(), sess(), nil, nil, noop)
	assert.ErrorContains(t, err, "empty prompt")
	_, err = dec.Generate(t.Context(), sess(), nil, []ports.Token{1}, nil)
	assert.ErrorContains(t, err, "nil emit")
	used := sess()
	_, err = used.Forward(t.Context(), []ports.Token{1, 2}, ports.ForwardOptions{})
	require.NoError(t, err)
	_, err = dec.Generate(t.Context(), used, nil, []ports.Token{1}, noop)
	assert.ErrorContains(t, err, "want an empty session or fewer than the prompt")
	_, err = dec.Generate(t.Context(), nil, nil, []ports.Token{1}, noop)
	assert.Error(t, err)
	_, err = dec.Generate(t.Context(), sess(), nil, []ports.Token{1, 999}, noop)
	assert.ErrorContains(t, err, "outside vocabulary")
}

func TestRollbackModes(t *testing.T) {
	prompt := testPrompt(6, 32)
	attn := portfake.Config{Layers: []ports.LayerKind{ports.LayerAttention}}
	noTape := portfake.Config{}
	dropTapes := portfake.Config{Tape: true, DropTapes: true}
	tests := []struct {
		name    string
		mcfg    portfake.Config
		mode    RollbackMode
		kinds   []ports.LayerKind
		want    RollbackKind // the only rollback kind expected on partial accepts
		wantErr error
	}{
		{name: "attention-only probed", mcfg: attn, want: RollbackKVTrim},
		{name: "attention-only declared", mcfg: attn, kinds: []ports.LayerKind{ports.LayerAttention}, want: RollbackKVTrim},
		{name: "attention-only ignores forced recompute", mcfg: attn, mode: RollbackRecompute, want: RollbackKVTrim},
		{name: "forced replay", mcfg: hybrid, mode: RollbackReplay, want: RollbackTapeReplay},
		{name: "forced recompute", mcfg: hybrid, mode: RollbackRecompute, want: RollbackSnapshotRecompute},
		{name: "auto without tapes", mcfg: noTape, want: RollbackSnapshotRecompute},
		{name: "auto with a replayer that records no tape", mcfg: dropTapes, want: RollbackSnapshotRecompute},
		{name: "forced replay without replayer", mcfg: noTape, mode: RollbackReplay, wantErr: errors.ErrUnsupported},
		{name: "forced replay without tapes", mcfg: dropTapes, mode: RollbackReplay, wantErr: errors.ErrUnsupported},
		{name: "declared recurrent but no snapshot or tape", mcfg: attn, kinds: []ports.LayerKind{ports.LayerRecurrent}, wantErr: errors.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := portfake.MustNew(tt.mcfg)
			r := newRig(t, tt.mcfg, portfake.MatchThenDiverge(m, 2), portfake.DrafterConfig{})
			res, err := r.generate(t, t.Context(), Config{BlockSize: 6, MaxTokens: 30, Rollback: tt.mode, LayerKinds: tt.kinds}, nil, prompt)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, oracle(t, m, prompt, 30), res.Tokens)
			seen := map[RollbackKind]int{}
			for _, rs := range res.Stats.Rounds {
				seen[rs.Rollback]++
			}
			delete(seen, RollbackNone)
			assert.Equal(t, map[RollbackKind]int{tt.want: len(res.Stats.Rounds)}, seen)
		})
	}
}

func TestAutoRollbackMeasuresBothAndPicksCheaper(t *testing.T) {
	prompt := testPrompt(6, 32)
	for _, tt := range []struct {
		name         string
		replayCost   int64
		snapshotCost int64
		want         RollbackKind
	}{
		{"replay cheap", 1, 50, RollbackTapeReplay},
		{"replay dear", 500, 1, RollbackSnapshotRecompute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := portfake.NewClock(0)
			cfg := portfake.Config{Tape: true, Clock: clock,
				ForwardCost:  func(n int) time.Duration { return time.Duration(10+n) * time.Microsecond },
				ReplayCost:   func(int) time.Duration { return time.Duration(tt.replayCost) * time.Microsecond },
				SnapshotCost: time.Duration(tt.snapshotCost) * time.Microsecond}
			m := portfake.MustNew(cfg)
			r := newRig(t, cfg, portfake.MatchThenDiverge(m, 1), portfake.DrafterConfig{})
			dec, err := New(Config{BlockSize: 4, MaxTokens: 200}, clock, nil)
			require.NoError(t, err)
			res, err := dec.Generate(t.Context(), r.sess, r.draft, prompt, func([]ports.Token) error { return nil })
			require.NoError(t, err)
			assert.Equal(t, oracle(t, m, prompt, 200), res.Tokens)
			seen := map[RollbackKind]int{}
			for _, rs := range res.Stats.Rounds {
				seen[rs.Rollback]++
			}
			assert.Positive(t, seen[RollbackTapeReplay], "replay measured at least once")
			assert.Positive(t, seen[RollbackSnapshotRecompute], "recompute measured at least once")
			assert.Greater(t, seen[tt.want], len(res.Stats.Rounds)*3/4, "the cheaper strategy dominates: %v", seen)
		})
	}
}

func TestBlockSizeOneIgnoresDrafter(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	r := newRig(t, hybrid, portfake.Perfect(m), portfake.DrafterConfig{})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 1, MaxTokens: 12}, nil, prompt)
	require.NoError(t, err)
	assert.Equal(t, oracle(t, m, prompt, 12), res.Tokens)
	assert.Empty(t, r.draft.Calls(), "plain decoding never drafts")
	for _, c := range r.fake.Calls() {
		assert.False(t, c.Opts.Taps, "no taps without speculation")
		assert.False(t, c.Opts.RecordTape)
	}
	assert.Zero(t, r.fake.Counts().Snapshots-1, "only the initial capability probe snapshots")
}

func TestFixedDrafts(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	r := newRig(t, hybrid, portfake.Fixed(1, 2, 3), portfake.DrafterConfig{})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 4, MaxTokens: 20}, nil, prompt)
	require.NoError(t, err)
	assert.Equal(t, oracle(t, m, prompt, 20), res.Tokens, "constant drafts are rejected or accepted, never change the output")
	bad := newRig(t, hybrid, portfake.Fixed(1, 999), portfake.DrafterConfig{})
	_, err = bad.generate(t, t.Context(), Config{BlockSize: 3, MaxTokens: 20}, nil, prompt)
	assert.ErrorContains(t, err, "outside vocabulary", "a drafted id outside the vocabulary is an error, not a panic")
}

// An emit error wrapping ErrStop (a stop string) ends generation as a stop: Finish is FinishStop and, with
// SyncDrafter, the drafter is brought level with the target (the prefix cache keeps its context); any other
// emit error is a cancellation.
func TestEmitStop(t *testing.T) {
	prompt := testPrompt(6, 32)
	for _, tc := range []struct {
		name   string
		err    error
		finish FinishReason
		level  bool
	}{
		{"stop", fmt.Errorf("stop string: %w", ErrStop), FinishStop, true},
		{"other", errors.New("client went away"), FinishCancelled, false},
	} {
		for _, after := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s after %d emits", tc.name, after), func(t *testing.T) {
				m := portfake.MustNew(hybrid)
				r := newRig(t, hybrid, portfake.MatchThenDiverge(m, 2), portfake.DrafterConfig{})
				dec, err := New(Config{BlockSize: 4, MaxTokens: 40, SyncDrafter: true}, portfake.NewClock(time.Millisecond), nil)
				require.NoError(t, err)
				emits := 0
				res, err := dec.Generate(t.Context(), r.sess, r.draftSession(), prompt, func([]ports.Token) error {
					emits++
					if emits == after {
						return tc.err
					}
					return nil
				})
				require.ErrorIs(t, err, tc.err)
				assert.Equal(t, tc.finish, res.Finish)
				if tc.level {
					assert.Equal(t, r.sess.Len(), r.draft.Len(), "the drafter holds what the target holds")
				}
			})
		}
	}
}
