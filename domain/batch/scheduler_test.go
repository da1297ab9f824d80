package batch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

const wait = 10 * time.Millisecond

// start runs a scheduler over target until the test ends.
func start(t *testing.T, clock *manualClock, target ports.Target, drafter ports.Drafter, rounds chan<- Round) *Scheduler {
	t.Helper()
	cfg := Config{MaxWait: wait}
	if rounds != nil {
		cfg.Observe = func(r Round) { rounds <- r }
	}
	s, err := New(cfg, clock, target, drafter)
	require.NoError(t, err)
	return s
}

func (s *Scheduler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.forwards) + len(s.drafts)
}

func (s *Scheduler) active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.members)
}

func fakeModel(t *testing.T) *portfake.Model {
	t.Helper()
	m, err := portfake.New(portfake.Config{Vocab: 32, Seed: 3})
	require.NoError(t, err)
	return m
}

func openSession(t *testing.T, m ports.Target) ports.Session {
	t.Helper()
	s, err := m.NewSession(t.Context(), []int{0})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type fwdOut struct {
	fr  ports.ForwardResult
	err error
}

func forwardAsync(ctx context.Context, m *Member, sess ports.Session, toks []ports.Token, opts ports.ForwardOptions) <-chan fwdOut {
	ch := make(chan fwdOut, 1)
	go func() {
		fr, err := m.Forward(ctx, sess, toks, opts)
		ch <- fwdOut{fr, err}
	}()
	return ch
}

func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, time.Millisecond, msg)
}

// TestRoundWaitsForEveryMember: a round runs once every member has submitted, as one batched forward of
// their ragged blocks, and each gets its own result, equal to its solo forward.
func TestRoundWaitsForEveryMember(t *testing.T) {
	clock := newManualClock()
	bt := &batchTarget{Model: fakeModel(t)}
	rounds := make(chan Round, 16)
	s := start(t, clock, bt, nil, rounds)
	blocks := [][]ports.Token{{1, 2, 3, 4, 5}, {7}, {9, 10}}
	members := make([]*Member, len(blocks))
	for i := range members {
		members[i] = s.Join()
	}
	outs := make([]<-chan fwdOut, len(blocks))
	for i, b := range blocks {
		outs[i] = forwardAsync(t.Context(), members[i], openSession(t, bt), b, ports.ForwardOptions{Taps: true})
		if i < len(blocks)-1 {
			eventually(t, func() bool { return s.pending() == i+1 }, "call pending")
			assert.Empty(t, bt.sizes(), "no round before every member submitted")
		}
	}
	for i, b := range blocks {
		o := <-outs[i]
		require.NoError(t, o.err)
		solo := openSession(t, bt.Model)
		want, err := solo.Forward(t.Context(), b, ports.ForwardOptions{Taps: true})
		require.NoError(t, err)
		assert.Equal(t, want.Greedy, o.fr.Greedy, "block %d", i)
	}
	assert.Equal(t, [][]int{{5, 1, 2}}, bt.sizes(), "one batched forward of every block")
	r := <-rounds
	assert.Equal(t, Round{Kind: RoundForward, Sequences: 3, Rows: 8, Batched: true}, r)
	assert.Empty(t, rounds)
}

// TestRoundWaitIsBounded: a member that does not submit holds a round back for MaxWait of the clock, no
// longer; leaving releases the round at once.
func TestRoundWaitIsBounded(t *testing.T) {
	clock := newManualClock()
	bt := &batchTarget{Model: fakeModel(t)}
	s := start(t, clock, bt, nil, nil)
	a, b, c := s.Join(), s.Join(), s.Join()
	out := forwardAsync(t.Context(), a, openSession(t, bt), []ports.Token{1}, ports.ForwardOptions{})
	eventually(t, func() bool { return clock.timers() >= 1 }, "the scheduler waits on the clock")
	clock.Advance(wait / 2)
	assert.Empty(t, out, "half the wait: still waiting for b and c")
	// A timer may fire spuriously early for the scheduler (it rechecks): advance to the bound.
	clock.Advance(wait / 2)
	o := <-out
	require.NoError(t, o.err)
	assert.Empty(t, bt.sizes(), "a lone item runs its solo Forward, not a batch")

	// Leave: the round no longer waits for the member gone.
	out = forwardAsync(t.Context(), a, openSession(t, bt), []ports.Token{2}, ports.ForwardOptions{})
	outB := forwardAsync(t.Context(), b, openSession(t, bt), []ports.Token{3}, ports.ForwardOptions{})
	eventually(t, func() bool { return s.pending() == 2 }, "a and b pending")
	c.Leave()
	c.Leave()
	require.NoError(t, (<-out).err)
	require.NoError(t, (<-outB).err)
	assert.Equal(t, [][]int{{1, 1}}, bt.sizes())
	_, err := c.Forward(t.Context(), openSession(t, bt), []ports.Token{1}, ports.ForwardOptions{})
	assert.ErrorContains(t, err, "after Leave")
}

// TestDraftsBeforeVerifies: with a draft and a forward pending, the draft runs first and the forward waits
// for the drafter's verify, so both verify in one forward.
func TestDraftsBeforeVerifies(t *testing.T) {
	clock := newManualClock()
	bt := &batchTarget{Model: fakeModel(t)}
	dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, Propose: portfake.Fixed(5, 6, 7)})
	require.NoError(t, err)
	bd := &batchDrafter{Drafter: dr}
	rounds := make(chan Round, 16)
	s := start(t, clock, bt, bd, rounds)
	a, b := s.Join(), s.Join()
	sa := openSession(t, bt)
	ds, err := bd.NewSession(t.Context())
	require.NoError(t, err)
	wrapped := a.DraftSession(ds)
	_, isSampler := wrapped.(ports.SamplingDrafter)
	assert.False(t, isSampler, "portfake's draft session cannot sample, so neither can the wrapper")

	outB := forwardAsync(t.Context(), b, openSession(t, bt), []ports.Token{1}, ports.ForwardOptions{})
	eventually(t, func() bool { return s.pending() == 1 }, "b's forward pending")
	prop, err := wrapped.Draft(t.Context(), 3, nil, 4)
	require.NoError(t, err)
	assert.Equal(t, []ports.Token{5, 6, 7}, prop.Tokens)
	assert.Empty(t, outB, "b's forward waits for a's verify")
	outA := forwardAsync(t.Context(), a, sa, []ports.Token{3, 5, 6, 7}, ports.ForwardOptions{})
	require.NoError(t, (<-outA).err)
	require.NoError(t, (<-outB).err)
	assert.Equal(t, [][]int{{1, 4}}, bt.sizes())
	assert.Empty(t, bd.sizes(), "a lone draft is a solo Draft call")
	assert.Equal(t, RoundDraft, (<-rounds).Kind)
	assert.Equal(t, Round{Kind: RoundForward, Sequences: 2, Rows: 5, Batched: true}, <-rounds)
}

// TestCancelIsPerMember: a cancelled pending call leaves at once with its context's error; the others'
// round still runs.
func TestCancelIsPerMember(t *testing.T) {
	clock := newManualClock()
	bt := &batchTarget{Model: fakeModel(t)}
	s := start(t, clock, bt, nil, nil)
	a, b, c := s.Join(), s.Join(), s.Join()
	ctx, cancel := context.WithCancel(t.Context())
	outA := forwardAsync(ctx, a, openSession(t, bt), []ports.Token{1}, ports.ForwardOptions{})
	outB := forwardAsync(t.Context(), b, openSession(t, bt), []ports.Token{2}, ports.ForwardOptions{})
	eventually(t, func() bool { return s.pending() == 2 }, "a and b pending")
	cancel()
	assert.ErrorIs(t, (<-outA).err, context.Canceled)
	a.Leave()
	outC := forwardAsync(t.Context(), c, openSession(t, bt), []ports.Token{3}, ports.ForwardOptions{})
	require.NoError(t, (<-outB).err)
	require.NoError(t, (<-outC).err)
	assert.Equal(t, [][]int{{1, 1}}, bt.sizes(), "b and c ran together, a's withdrawn call did not run")
}

// TestErrorsArePerItem: an item the target refuses fails alone; a failed batch fails its round's members,
// not the next round's.
func TestErrorsArePerItem(t *testing.T) {
	clock := newManualClock()
	refused := errors.New("refused")
	bt := &batchTarget{Model: fakeModel(t), refuse: func(toks []ports.Token) error {
		if toks[0] == 31 {
			return refused
		}
		return nil
	}}
	s := start(t, clock, bt, nil, nil)
	a, b := s.Join(), s.Join()
	sa, sb := openSession(t, bt), openSession(t, bt)
	outA := forwardAsync(t.Context(), a, sa, []ports.Token{31}, ports.ForwardOptions{})
	outB := forwardAsync(t.Context(), b, sb, []ports.Token{2, 3}, ports.ForwardOptions{})
	assert.ErrorIs(t, (<-outA).err, refused)
	require.NoError(t, (<-outB).err)
	assert.Equal(t, 2, sb.Len())

	boom := errors.New("device lost")
	bt.mu.Lock()
	bt.fail = boom
	bt.mu.Unlock()
	outA = forwardAsync(t.Context(), a, sa, []ports.Token{4}, ports.ForwardOptions{})
	outB = forwardAsync(t.Context(), b, sb, []ports.Token{5}, ports.ForwardOptions{})
	assert.ErrorIs(t, (<-outA).err, boom)
	assert.ErrorIs(t, (<-outB).err, boom)
	outA = forwardAsync(t.Context(), a, openSession(t, bt), []ports.Token{4}, ports.ForwardOptions{})
	outB = forwardAsync(t.Context(), b, openSession(t, bt), []ports.Token{5}, ports.ForwardOptions{})
	require.NoError(t, (<-outA).err)
	require.NoError(t, (<-outB).err)
}

// TestSequentialFallback: a target without ForwardBatch runs a round's items one after another, each its
// own Forward with its own result.
func TestSequentialFallback(t *testing.T) {
	clock := newManualClock()
	m := fakeModel(t)
	rounds := make(chan Round, 4)
	s := start(t, clock, plainTarget{m}, nil, rounds)
	fwd, drf := s.Batching()
	assert.False(t, fwd)
	assert.False(t, drf)
	a, b := s.Join(), s.Join()
	blocks := [][]ports.Token{{1, 2}, {3}}
	outs := []<-chan fwdOut{
		forwardAsync(t.Context(), a, openSession(t, m), blocks[0], ports.ForwardOptions{}),
		forwardAsync(t.Context(), b, openSession(t, m), blocks[1], ports.ForwardOptions{}),
	}
	for i, o := range outs {
		r := <-o
		require.NoError(t, r.err)
		want, err := m.GreedyContinuation(blocks[i], 1)
		require.NoError(t, err)
		assert.Equal(t, want[0], r.fr.Greedy[len(r.fr.Greedy)-1])
	}
	assert.Equal(t, Round{Kind: RoundForward, Sequences: 2, Rows: 3}, <-rounds)
}

// TestDispatcherOnlyWhileMembers: the scheduler's goroutine runs from the first Join to the last Leave, and
// starts again with the next Join.
func TestDispatcherOnlyWhileMembers(t *testing.T) {
	clock := newManualClock()
	m := fakeModel(t)
	s := start(t, clock, m, nil, nil)
	dispatching := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.dispatching
	}
	assert.False(t, dispatching())
	for range 2 {
		a := s.Join()
		assert.True(t, dispatching())
		_, err := a.Forward(t.Context(), openSession(t, m), []ports.Token{1}, ports.ForwardOptions{})
		require.NoError(t, err)
		a.Leave()
		eventually(t, func() bool { return !dispatching() }, "the dispatcher stops with the last member")
	}
	_, err := New(Config{}, nil, nil, nil)
	assert.ErrorContains(t, err, "nil clock")
	assert.ErrorContains(t, err, "nil target")
}

// TestRoundCost: a member alone has no batched price; beside others it is the forward of every member
// verifying that many rows (measured, interpolated or extrapolated by row count), plus the draft phase of
// that many members when the rows mean drafting, and the number of other members.
func TestRoundCost(t *testing.T) {
	clock := newManualClock()
	bt := &batchTarget{Model: fakeModel(t), clock: clock, cost: func(rows int) time.Duration {
		return 10*time.Millisecond + time.Duration(rows)*time.Millisecond
	}}
	s := start(t, clock, bt, nil, nil)
	a, b := s.Join(), s.Join()
	_, _, ok := a.RoundCost(1)
	assert.False(t, ok, "no forward measured yet")
	sa, sb := openSession(t, bt), openSession(t, bt)
	for _, blocks := range [][2][]ports.Token{{{1}, {2}}, {{3, 4, 5}, {6}}} {
		outA := forwardAsync(t.Context(), a, sa, blocks[0], ports.ForwardOptions{})
		outB := forwardAsync(t.Context(), b, sb, blocks[1], ports.ForwardOptions{})
		require.NoError(t, (<-outA).err)
		require.NoError(t, (<-outB).err)
	}
	// Measured: forwards of 2 rows (12 ms) and 4 rows (14 ms).
	ns, others, ok := a.RoundCost(1)
	require.True(t, ok)
	assert.InDelta(t, float64(12*time.Millisecond), ns, 1, "both plain: a forward of 2 rows")
	assert.Equal(t, 1.0, others)
	_, _, ok = a.RoundCost(2)
	assert.False(t, ok, "blocks of 2 need a draft round of 2, never measured")
	b.Leave()
	_, _, ok = a.RoundCost(1)
	assert.False(t, ok, "alone again")

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tc := range []struct {
		rows int
		want time.Duration
	}{{2, 12 * time.Millisecond}, {3, 13 * time.Millisecond}, {6, 16 * time.Millisecond}, {1, 11 * time.Millisecond}} {
		got, ok := estimate(s.fcost, tc.rows)
		require.True(t, ok, "rows %d", tc.rows)
		assert.InDelta(t, float64(tc.want), got, 1, "rows %d", tc.rows)
	}
	_, ok = estimate(s.dcost, 2)
	assert.False(t, ok)
}

// panicSession panics in Forward.
type panicSession struct{ ports.Session }

func (panicSession) Forward(context.Context, []ports.Token, ports.ForwardOptions) (ports.ForwardResult, error) {
	panic("backend bug")
}

// TestPanicReachesItsCaller: a backend panic during a round is re-raised on the member's goroutine (where
// the server's recovery turns it into a 500), not on the scheduler's; the other members carry on.
func TestPanicReachesItsCaller(t *testing.T) {
	clock := newManualClock()
	m := fakeModel(t)
	s := start(t, clock, plainTarget{m}, nil, nil)
	a, b := s.Join(), s.Join()
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_, _ = a.Forward(t.Context(), panicSession{openSession(t, m)}, []ports.Token{1}, ports.ForwardOptions{})
	}()
	out := forwardAsync(t.Context(), b, openSession(t, m), []ports.Token{2}, ports.ForwardOptions{})
	assert.Equal(t, "backend bug", <-panicked)
	a.Leave()
	require.NoError(t, (<-out).err)
	_, err := b.Forward(t.Context(), openSession(t, m), []ports.Token{3}, ports.ForwardOptions{})
	require.NoError(t, err)
}

// frozenClock never moves, but its timers are real: a clock without timers of its own that the app gives the
// system's (app's timerClock).
type frozenClock struct{ now time.Time }

func (c frozenClock) Now() time.Time                       { return c.now }
func (frozenClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestRoundRunsWhenTheTimerFires: once the wait's timer fires the round runs, even on a clock that never
// shows the wait as over (a frozen one), with more members than pending calls.
func TestRoundRunsWhenTheTimerFires(t *testing.T) {
	bt := &batchTarget{Model: fakeModel(t)}
	s, err := New(Config{MaxWait: time.Millisecond}, frozenClock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, bt, nil)
	require.NoError(t, err)
	a, b := s.Join(), s.Join()
	defer b.Leave()
	defer a.Leave()
	select {
	case o := <-forwardAsync(t.Context(), a, openSession(t, bt), []ports.Token{1}, ports.ForwardOptions{}):
		require.NoError(t, o.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the round never ran: the scheduler kept waiting for b on the frozen clock")
	}
}

// slowTree is a session whose ForwardTree takes a while on the manual clock.
type slowTree struct {
	ports.Session
	clock *manualClock
	took  time.Duration
}

func (s slowTree) ForwardTree(ctx context.Context, tokens []ports.Token, parents []int, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	s.clock.Advance(s.took)
	return s.Session.(ports.TreeVerifier).ForwardTree(ctx, tokens, parents, opts)
}

func (s slowTree) KeepPath(ctx context.Context, path []int) (ports.Taps, error) {
	return s.Session.(ports.TreeVerifier).KeepPath(ctx, path)
}

// TestSoloCallsStayOutOfTheRoundCosts: a tree's forward and a draft with candidates run on their own in a
// shared round, so the round's cost tables (what RoundCost prices batched rounds from) take only the shared
// part: its rows (sequences, for drafts) and its time, not the solo calls'.
func TestSoloCallsStayOutOfTheRoundCosts(t *testing.T) {
	clock := newManualClock()
	bt := &batchTarget{Model: fakeModel(t)}
	dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, Propose: portfake.Fixed(5, 6, 7)})
	require.NoError(t, err)
	bd := &batchDrafter{Drafter: dr}
	s := start(t, clock, bt, bd, nil)
	a, b := s.Join(), s.Join()

	tree := slowTree{Session: openSession(t, bt), clock: clock, took: 50 * time.Millisecond}
	outA := make(chan error, 1)
	go func() {
		_, err := a.ForwardTree(t.Context(), tree, []ports.Token{1, 2, 3}, []int{-1, 0, 0}, ports.ForwardOptions{})
		outA <- err
	}()
	outB := forwardAsync(t.Context(), b, openSession(t, bt), []ports.Token{2}, ports.ForwardOptions{})
	require.NoError(t, <-outA)
	require.NoError(t, (<-outB).err)

	da, err := bd.NewSession(t.Context())
	require.NoError(t, err)
	db, err := bd.NewSession(t.Context())
	require.NoError(t, err)
	outDA := make(chan error, 1)
	go func() {
		_, err := a.DraftTop(t.Context(), ports.DraftItem{Session: da, Anchor: 3, BlockSize: 4}, ports.TopRequest{K: 2})
		outDA <- err
	}()
	_, err = b.Draft(t.Context(), ports.DraftItem{Session: db, Anchor: 3, BlockSize: 4})
	require.NoError(t, err)
	require.NoError(t, <-outDA)

	s.mu.Lock()
	defer s.mu.Unlock()
	require.Len(t, s.fcost, 1, "one forward round measured: %v", s.fcost)
	require.NotNil(t, s.fcost[1], "keyed by the shared part's one row, not the tree's nodes too")
	assert.Zero(t, s.fcost[1].v, "the tree's time is not the shared forward's")
	require.Len(t, s.dcost, 1)
	require.NotNil(t, s.dcost[1], "keyed by the one shared draft, not the solo DraftTop too")
}
