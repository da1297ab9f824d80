// Package porttest holds conformance suites for the ports that every backend runs (the CPU and MLX backends
// and portfake): a Session suite (with TapeReplayer checks when implemented) and a DraftSession suite.
// They check the contracts the speculative decoder relies on, through the ports only.
package porttest

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// SessionSuite configures the Session conformance suite.
type SessionSuite struct {
	// Open returns a new empty session tapping tapLayers (possibly none). Required. The suite closes it.
	Open func(t *testing.T, tapLayers []int) ports.Session
	// Vocab is the vocabulary size. Required.
	Vocab int
	// TapLayers are tapped in the taps checks; empty skips them.
	TapLayers []int
	// ReadTaps, when set, reads a Taps handle's values (rows × features) so the suite can compare them;
	// without it only row counts are checked.
	ReadTaps func(ports.Taps) ([][]float32, error)
	// TapsTolerance is the largest absolute difference allowed between tap values that must be equal
	// (block forward vs token-by-token forward); 0 means bit-exact.
	TapsTolerance float64
	// ContextLength, when > 0, is the sessions' context length; the suite then checks ErrContextFull. Keep
	// it small (the suite forwards that many tokens).
	ContextLength int
	// Prompt is the prefix used by the checks; nil means a fixed 7-token prompt derived from Vocab.
	Prompt []ports.Token
}

// TestSession runs the Session suite with default options: open returns an empty session (tapping what the
// backend likes), vocab is the vocabulary size.
func TestSession(t *testing.T, open func(t *testing.T) ports.Session, vocab int) {
	SessionSuite{Open: func(t *testing.T, _ []int) ports.Session { return open(t) }, Vocab: vocab}.Run(t)
}

// Run runs every check as a subtest.
func (s SessionSuite) Run(t *testing.T) {
	require.NotNil(t, s.Open, "SessionSuite.Open")
	require.GreaterOrEqual(t, s.Vocab, 2, "SessionSuite.Vocab")
	if s.Prompt == nil {
		s.Prompt = make([]ports.Token, 7)
		for i := range s.Prompt {
			s.Prompt[i] = ports.Token((i*5 + 1) % s.Vocab)
		}
	}
	t.Run("LenBookkeeping", s.testLen)
	t.Run("BlockEqualsStepwise", s.testBlockEqualsStepwise)
	t.Run("RowsAndDists", s.testRowsAndDists)
	t.Run("Logits", s.testLogits)
	t.Run("TrimRestoreRecompute", s.testRecompute)
	t.Run("SnapshotIndependence", s.testSnapshotIndependence)
	t.Run("TapeReplay", s.testTapeReplay)
	t.Run("DetachedTaps", s.testDetach)
	t.Run("BadInput", s.testBadInput)
}

func (s SessionSuite) open(t *testing.T, taps []int) ports.Session {
	t.Helper()
	sess := s.Open(t, taps)
	require.NotNil(t, sess)
	t.Cleanup(func() { _ = sess.Close() })
	require.Zero(t, sess.Len(), "a new session is empty")
	return sess
}

// block returns n tokens that differ from the prompt's pattern.
func (s SessionSuite) block(n, salt int) []ports.Token {
	b := make([]ports.Token, n)
	for i := range b {
		b[i] = ports.Token((i*3 + salt*7 + 2) % s.Vocab)
	}
	return b
}

func (s SessionSuite) forward(t *testing.T, sess ports.Session, toks []ports.Token, opts ports.ForwardOptions) ports.ForwardResult {
	t.Helper()
	before := sess.Len()
	fr, err := sess.Forward(t.Context(), toks, opts)
	require.NoError(t, err)
	require.Equal(t, before+len(toks), sess.Len(), "Forward appends len(tokens) positions")
	rows := opts.Rows
	if rows == 0 {
		rows = len(toks)
	}
	require.Len(t, fr.Greedy, rows, "one greedy token per returned row")
	for _, g := range fr.Greedy {
		require.True(t, g >= 0 && int(g) < s.Vocab, "greedy token %d outside vocabulary", g)
	}
	if opts.Taps && len(s.TapLayers) > 0 {
		require.NotNil(t, fr.Taps, "taps requested")
		require.Equal(t, len(toks), fr.Taps.Rows(), "taps cover every position of the block")
	}
	return fr
}

// continuation feeds probe after the session's state and returns the greedy outputs and taps values, the
// observable effect of whatever the session holds.
func (s SessionSuite) continuation(t *testing.T, sess ports.Session, probe []ports.Token) ([]ports.Token, [][]float32) {
	t.Helper()
	fr := s.forward(t, sess, probe, ports.ForwardOptions{Taps: len(s.TapLayers) > 0})
	return fr.Greedy, s.read(t, fr.Taps)
}

func (s SessionSuite) read(t *testing.T, taps ports.Taps) [][]float32 {
	t.Helper()
	if s.ReadTaps == nil || taps == nil {
		return nil
	}
	v, err := s.ReadTaps(taps)
	require.NoError(t, err)
	return v
}

func (s SessionSuite) equalTaps(t *testing.T, want, got [][]float32, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i := range want {
		require.Len(t, got[i], len(want[i]), msg)
		for j := range want[i] {
			if d := math.Abs(float64(want[i][j] - got[i][j])); d > s.TapsTolerance {
				require.Failf(t, "taps differ", "%s: row %d feature %d: %v vs %v", msg, i, j, want[i][j], got[i][j])
			}
		}
	}
}

// reference returns the continuation outputs of a fresh session fed exactly committed.
func (s SessionSuite) reference(t *testing.T, committed, probe []ports.Token) ([]ports.Token, [][]float32) {
	t.Helper()
	ref := s.open(t, s.TapLayers)
	s.forward(t, ref, committed, ports.ForwardOptions{Rows: 1})
	return s.continuation(t, ref, probe)
}

func concat(parts ...[]ports.Token) []ports.Token {
	var out []ports.Token
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func (s SessionSuite) testLen(t *testing.T) {
	sess := s.open(t, nil)
	s.forward(t, sess, s.Prompt, ports.ForwardOptions{Rows: 1})
	s.forward(t, sess, s.block(3, 1), ports.ForwardOptions{})
	require.NoError(t, sess.TrimKV(len(s.Prompt)+1))
	assert.Equal(t, len(s.Prompt)+1, sess.Len(), "TrimKV sets Len")
	require.NoError(t, sess.TrimKV(sess.Len()), "trimming to the current length is a no-op")
	assert.Equal(t, len(s.Prompt)+1, sess.Len())
}

func (s SessionSuite) testBlockEqualsStepwise(t *testing.T) {
	blk := s.block(6, 2)
	whole := s.open(t, s.TapLayers)
	s.forward(t, whole, s.Prompt, ports.ForwardOptions{Rows: 1})
	frBlock := s.forward(t, whole, blk, ports.ForwardOptions{Taps: len(s.TapLayers) > 0})
	blockTaps := s.read(t, frBlock.Taps)

	step := s.open(t, s.TapLayers)
	s.forward(t, step, s.Prompt, ports.ForwardOptions{Rows: 1})
	var greedy []ports.Token
	var taps [][]float32
	for _, tok := range blk {
		fr := s.forward(t, step, []ports.Token{tok}, ports.ForwardOptions{Taps: len(s.TapLayers) > 0})
		greedy = append(greedy, fr.Greedy...)
		taps = append(taps, s.read(t, fr.Taps)...)
	}
	assert.Equal(t, greedy, frBlock.Greedy, "a block forward gives the token-by-token greedy tokens")
	if blockTaps != nil {
		s.equalTaps(t, taps, blockTaps, "block vs token-by-token taps")
	}
	// The prompt as a block vs the prompt split in two.
	split := s.open(t, nil)
	s.forward(t, split, s.Prompt[:3], ports.ForwardOptions{Rows: 1})
	last := s.forward(t, split, s.Prompt[3:], ports.ForwardOptions{Rows: 1})
	one := s.open(t, nil)
	all := s.forward(t, one, s.Prompt, ports.ForwardOptions{Rows: 1})
	assert.Equal(t, all.Greedy, last.Greedy, "chunked prefill equals whole prefill")
}

func (s SessionSuite) testRowsAndDists(t *testing.T) {
	blk := s.block(5, 3)
	a := s.open(t, nil)
	s.forward(t, a, s.Prompt, ports.ForwardOptions{Rows: 1})
	full := s.forward(t, a, blk, ports.ForwardOptions{})
	b := s.open(t, nil)
	s.forward(t, b, s.Prompt, ports.ForwardOptions{Rows: 1})
	params := ports.SamplingParams{Temperature: 0.8, TopK: 1}
	last2 := s.forward(t, b, blk, ports.ForwardOptions{Rows: 2, Sampling: &params})
	assert.Equal(t, full.Greedy[3:], last2.Greedy, "Rows keeps the last rows")
	require.Len(t, last2.Dists, 2, "one distribution per returned row")
	for i, d := range last2.Dists {
		require.NotNil(t, d)
		assert.InDelta(t, 1, d.Prob(last2.Greedy[i]), 1e-6, "top-k 1 puts all mass on the greedy token")
		assert.Equal(t, last2.Greedy[i], d.Sample(0.5, ports.NoToken))
		assert.Equal(t, ports.NoToken, d.Sample(0.5, last2.Greedy[i]), "no mass left once the only token is excluded")
	}
	c := s.open(t, nil)
	s.forward(t, c, s.Prompt, ports.ForwardOptions{Rows: 1})
	warm := ports.SamplingParams{Temperature: 1}
	fr := s.forward(t, c, blk[:1], ports.ForwardOptions{Sampling: &warm})
	require.Len(t, fr.Dists, 1)
	sum := 0.0
	for tok := range s.Vocab {
		p := fr.Dists[0].Prob(ports.Token(tok))
		require.True(t, p >= 0 && p <= 1, "probability %v of token %d", p, tok)
		sum += p
	}
	assert.InDelta(t, 1, sum, 1e-4, "probabilities sum to 1")
	for _, u := range []float64{0, 0.25, 0.5, 0.999999} {
		tok := fr.Dists[0].Sample(u, fr.Greedy[0])
		assert.NotEqual(t, fr.Greedy[0], tok, "Sample never returns the excluded token")
	}
}

// testLogits checks ForwardOptions.Logits: one row of VocabSize raw logits per returned row, whose argmax
// (lowest id on ties) is the greedy token, and nothing when not asked.
func (s SessionSuite) testLogits(t *testing.T) {
	blk := s.block(5, 4)
	a := s.open(t, nil)
	s.forward(t, a, s.Prompt, ports.ForwardOptions{Rows: 1})
	plain := s.forward(t, a, blk, ports.ForwardOptions{Rows: 3})
	assert.Nil(t, plain.Logits, "no logits unless asked")
	b := s.open(t, nil)
	s.forward(t, b, s.Prompt, ports.ForwardOptions{Rows: 1})
	got := s.forward(t, b, blk, ports.ForwardOptions{Rows: 3, Logits: true})
	assert.Equal(t, plain.Greedy, got.Greedy, "asking for logits changes no greedy token")
	require.Len(t, got.Logits, 3*s.Vocab, "rows × vocab logits")
	for r := range 3 {
		row := got.Logits[r*s.Vocab : (r+1)*s.Vocab]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		assert.Equal(t, got.Greedy[r], ports.Token(best), "row %d: greedy is the argmax of the logits", r)
	}
}

// testRecompute checks rollback by TrimKV (+ Restore and re-Forward with recurrent state) for every
// number of committed positions.
func (s SessionSuite) testRecompute(t *testing.T) {
	blk := s.block(5, 4)
	probe := s.block(3, 5)
	for n := 0; n <= len(blk); n++ {
		sess := s.open(t, s.TapLayers)
		s.forward(t, sess, s.Prompt, ports.ForwardOptions{Rows: 1})
		snap, err := sess.Snapshot()
		recurrent := err == nil
		if !recurrent {
			require.ErrorIs(t, err, errors.ErrUnsupported, "Snapshot fails only with errors.ErrUnsupported (attention-only)")
		} else {
			assert.Equal(t, len(s.Prompt), snap.Position())
		}
		s.forward(t, sess, blk, ports.ForwardOptions{})
		if recurrent {
			require.NoError(t, sess.TrimKV(len(s.Prompt)))
			require.NoError(t, sess.Restore(snap))
			if n > 0 {
				s.forward(t, sess, blk[:n], ports.ForwardOptions{Rows: 1})
			}
		} else {
			require.NoError(t, sess.TrimKV(len(s.Prompt)+n))
		}
		require.Equal(t, len(s.Prompt)+n, sess.Len())
		greedy, taps := s.continuation(t, sess, probe)
		wantGreedy, wantTaps := s.reference(t, concat(s.Prompt, blk[:n]), probe)
		assert.Equal(t, wantGreedy, greedy, "after rolling back to %d committed positions", n)
		if wantTaps != nil {
			s.equalTaps(t, wantTaps, taps, "taps after rollback")
		}
	}
}

func (s SessionSuite) testSnapshotIndependence(t *testing.T) {
	sess := s.open(t, nil)
	s.forward(t, sess, s.Prompt, ports.ForwardOptions{Rows: 1})
	snap, err := sess.Snapshot()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip("attention-only session: no recurrent snapshot")
	}
	require.NoError(t, err)
	probe := s.block(2, 6)
	want, _ := s.reference(t, s.Prompt, probe)
	// Advance twice, restoring the same snapshot each time: it must be unaffected by later changes.
	for round := range 2 {
		s.forward(t, sess, s.block(4, 7+round), ports.ForwardOptions{})
		later, err := sess.Snapshot()
		require.NoError(t, err)
		assert.Equal(t, len(s.Prompt)+4, later.Position())
		require.NoError(t, sess.TrimKV(len(s.Prompt)))
		require.NoError(t, sess.Restore(snap))
		got, _ := s.continuation(t, sess, probe)
		assert.Equal(t, want, got, "restore %d of the same snapshot", round+1)
		require.NoError(t, sess.TrimKV(len(s.Prompt)))
		require.NoError(t, sess.Restore(snap))
	}
}

func (s SessionSuite) testTapeReplay(t *testing.T) {
	probe := s.block(3, 8)
	blk := s.block(5, 9)
	first := s.open(t, nil)
	if _, ok := first.(ports.TapeReplayer); !ok {
		t.Skip("session does not implement ports.TapeReplayer")
	}
	for n := 0; n <= len(blk); n++ {
		sess := s.open(t, s.TapLayers)
		s.forward(t, sess, s.Prompt, ports.ForwardOptions{Rows: 1})
		fr := s.forward(t, sess, blk, ports.ForwardOptions{RecordTape: true})
		if fr.Tape == nil {
			t.Skip("Forward returned no tape: the backend does not record tapes (the decoder then recomputes)")
		}
		require.Equal(t, len(blk), fr.Tape.Len())
		require.NoError(t, sess.TrimKV(len(s.Prompt)+n))
		require.NoError(t, sess.(ports.TapeReplayer).ReplayTape(t.Context(), fr.Tape, n))
		greedy, taps := s.continuation(t, sess, probe)
		wantGreedy, wantTaps := s.reference(t, concat(s.Prompt, blk[:n]), probe)
		assert.Equal(t, wantGreedy, greedy, "after replaying %d of %d positions", n, len(blk))
		if wantTaps != nil {
			s.equalTaps(t, wantTaps, taps, "taps after replay")
		}
	}
}

func (s SessionSuite) testDetach(t *testing.T) {
	if len(s.TapLayers) == 0 {
		t.Skip("no tap layers configured")
	}
	sess := s.open(t, s.TapLayers)
	fr := s.forward(t, sess, s.Prompt, ports.ForwardOptions{Taps: true})
	before := s.read(t, fr.Taps)
	kept := fr.Taps.Detach()
	head := fr.Taps.Slice(2)
	assert.Equal(t, 2, head.Rows())
	assert.Zero(t, fr.Taps.Slice(0).Rows())
	if before != nil {
		s.equalTaps(t, before[:2], s.read(t, head), "Slice is a prefix view")
	}
	s.forward(t, sess, s.block(3, 10), ports.ForwardOptions{Taps: true})
	assert.Equal(t, len(s.Prompt), kept.Rows(), "detached taps keep their rows after a later Forward")
	if before != nil {
		s.equalTaps(t, before, s.read(t, kept), "detached taps keep their values")
	}
}

func (s SessionSuite) testBadInput(t *testing.T) {
	cases := map[string][]ports.Token{
		"empty block":        {},
		"negative token":     {1, -1},
		"token past vocab":   {ports.Token(s.Vocab)},
		"token far past end": {ports.Token(math.MaxInt32)},
	}
	for name, toks := range cases {
		sess := s.open(t, nil)
		_, err := sess.Forward(t.Context(), toks, ports.ForwardOptions{})
		assert.Error(t, err, name)
	}
	sess := s.open(t, nil)
	s.forward(t, sess, s.Prompt, ports.ForwardOptions{Rows: 1})
	assert.Error(t, sess.TrimKV(sess.Len()+1), "TrimKV past Len")
	assert.Error(t, sess.TrimKV(-1), "negative TrimKV")
	if s.ContextLength > 0 {
		full := s.open(t, nil)
		toks := make([]ports.Token, s.ContextLength+1)
		_, err := full.Forward(t.Context(), toks, ports.ForwardOptions{Rows: 1})
		assert.ErrorIs(t, err, ports.ErrContextFull)
		ok := s.open(t, nil)
		s.forward(t, ok, toks[:s.ContextLength], ports.ForwardOptions{Rows: 1})
		_, err = ok.Forward(t.Context(), toks[:1], ports.ForwardOptions{})
		assert.ErrorIs(t, err, ports.ErrContextFull)
	}
}

// Sessions is the Open of a suite over target's sessions: each a new empty session tapping the layers asked
// for, the test failed on an error.
func Sessions(target ports.Target) func(t *testing.T, tapLayers []int) ports.Session {
	return func(t *testing.T, tapLayers []int) ports.Session {
		t.Helper()
		s, err := target.NewSession(t.Context(), tapLayers)
		require.NoError(t, err)
		return s
	}
}
