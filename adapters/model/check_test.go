package model

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func TestCheckForward(t *testing.T) {
	bad := ports.SamplingParams{Temperature: -1}
	tests := []struct {
		name   string
		pos    Position
		tokens []ports.Token
		opts   ports.ForwardOptions
		rows   int
		err    string
		full   bool
	}{
		{name: "all rows", tokens: []ports.Token{1, 2, 3}, rows: 3},
		{name: "last row", tokens: []ports.Token{1, 2, 3}, opts: ports.ForwardOptions{Rows: 1}, rows: 1},
		{name: "rows past the block", tokens: []ports.Token{1, 2}, opts: ports.ForwardOptions{Rows: 5}, rows: 2},
		{name: "empty", err: "no tokens"},
		{name: "negative rows", tokens: []ports.Token{1}, opts: ports.ForwardOptions{Rows: -1}, err: "rows -1"},
		{name: "context full", pos: Position{N: 9, Rec: 9}, tokens: []ports.Token{1, 2}, full: true},
		{name: "rollback unfinished", pos: Position{N: 4, Rec: 6, Recurrent: true}, tokens: []ports.Token{1}, err: "recurrent state is at position 6"},
		{name: "token outside", tokens: []ports.Token{1, 10}, err: "token 10 at index 1"},
		{name: "bad sampling", tokens: []ports.Token{1}, opts: ports.ForwardOptions{Sampling: &bad}, err: "temperature"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := tc.pos.CheckForward(tc.tokens, tc.opts, 10, 10)
			switch {
			case tc.full:
				assert.ErrorIs(t, err, ports.ErrContextFull)
			case tc.err != "":
				assert.ErrorContains(t, err, tc.err)
			default:
				require.NoError(t, err)
				assert.Equal(t, tc.rows, rows)
			}
		})
	}
}

func TestPositionTrim(t *testing.T) {
	p := Position{N: 5, Rec: 5}
	require.NoError(t, p.Trim(3))
	assert.Equal(t, Position{N: 3, Rec: 3}, p, "an attention-only model's recurrent position follows")
	h := Position{N: 5, Rec: 5, Recurrent: true}
	require.NoError(t, h.Trim(2))
	assert.Equal(t, Position{N: 2, Rec: 5, Recurrent: true}, h, "a hybrid model waits for Restore or ReplayTape")
	assert.ErrorContains(t, h.Trim(3), "outside [0,2]")
	assert.ErrorContains(t, h.Trim(-1), "outside")
}

type tape struct{ TapeHeader }

func TestCheckReplay(t *testing.T) {
	me, other := new(int), new(int)
	latest := &tape{TapeHeader{Session: me, Forward: 7, Length: 4}}
	stale := &tape{TapeHeader{Session: me, Forward: 6, Length: 4}}
	foreign := &tape{TapeHeader{Session: other, Forward: 7, Length: 4}}
	ctx := context.Background()
	skip, err := CheckReplay(ctx, latest, me, 7, latest, 2, false)
	require.NoError(t, err)
	assert.False(t, skip)
	skip, err = CheckReplay(ctx, latest, me, 7, latest, 4, false)
	require.NoError(t, err)
	assert.True(t, skip, "the whole block, no replay since: nothing to do")
	skip, err = CheckReplay(ctx, latest, me, 7, latest, 4, true)
	require.NoError(t, err)
	assert.False(t, skip, "after a replay the end state must be rebuilt")
	_, err = CheckReplay(ctx, stale, me, 7, latest, 1, false)
	assert.ErrorIs(t, err, ErrStaleTape)
	_, err = CheckReplay(ctx, latest, me, 7, nil, 1, false)
	assert.ErrorIs(t, err, ErrStaleTape, "the latest Forward recorded no tape")
	_, err = CheckReplay(ctx, foreign, me, 7, latest, 1, false)
	assert.ErrorContains(t, err, "not recorded by this session")
	_, err = CheckReplay(ctx, latest, me, 7, latest, 5, false)
	assert.ErrorContains(t, err, "outside [0,4]")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = CheckReplay(cancelled, latest, me, 7, latest, 1, false)
	assert.True(t, errors.Is(err, context.Canceled))
}

func TestTapSlots(t *testing.T) {
	_, err := NewTapSlots([]int{0, 4}, 4)
	assert.ErrorContains(t, err, "tap layer 4 outside [0,4)")
	ts, err := NewTapSlots([]int{2, 0, 2}, 4)
	require.NoError(t, err)
	assert.Equal(t, 3, ts.Len())
	tapped, tap := Collect[string](ts)
	for l, v := range []string{"a", "b", "c", "d"} {
		tap(l, v)
	}
	assert.Equal(t, []string{"c", "a", "c"}, tapped, "slots in tap order, a layer tapped twice fills both")
}

func TestDraftHelpers(t *testing.T) {
	assert.Equal(t, []ports.Token{7, 1, 1, 1}, NoiseBlock(7, 1, 4))
	require.NoError(t, CheckDraft(3, 1, 10))
	require.NoError(t, CheckDraft(3, 17, 10), "a block above the configured size is drafted as asked")
	assert.ErrorContains(t, CheckDraft(3, 0, 10), "block size 0 must be ≥ 1")
	assert.ErrorContains(t, CheckDraft(10, 2, 10), "anchor token 10")
	for _, c := range []struct {
		pos, bs, ctxLen int
		ok              bool
	}{
		{pos: 0, bs: 32, ctxLen: 32, ok: true},
		{pos: 1, bs: 32, ctxLen: 32},
		{pos: 30, bs: 2, ctxLen: 32, ok: true},
		{pos: 31, bs: 2, ctxLen: 32},
		{pos: 1 << 20, bs: 1 << 20, ctxLen: 0, ok: true},
	} {
		err := CheckRoom(c.pos, c.bs, c.ctxLen)
		if c.ok {
			assert.NoError(t, err, "%+v", c)
		} else {
			assert.ErrorContains(t, err, "passes the context length", "%+v", c)
		}
	}
	ls := PerLayer[struct{ n int }](3)
	require.Len(t, ls, 3)
	assert.NotSame(t, ls[0], ls[1])
}
