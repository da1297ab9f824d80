package porttest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// BatchSuite configures the conformance suite of the batched ports (ports.BatchForwarder on the target,
// ports.BatchDrafter on the drafter): every item of a batch must equal the same call on its session alone
// (greedy tokens, distributions, raw logits, taps, tapes replayed, the session's state afterwards), whatever
// the batch holds — ragged blocks (blocks of one, long prefill blocks), sessions at different positions,
// changing company and order — while refused items get their own error and keep their sessions untouched.
type BatchSuite struct {
	// Target is the model under test; it must implement ports.BatchForwarder. Required.
	Target ports.Target
	// Drafter, when set, must implement ports.BatchDrafter; the draft checks then run with target sessions
	// tapping its layers.
	Drafter ports.Drafter
	// TapLayers are tapped in the forward checks (nil: none).
	TapLayers []int
	// ReadTaps reads a Taps handle's values (rows × features); nil compares row counts only.
	ReadTaps func(ports.Taps) ([][]float32, error)
	// Tolerance is the largest absolute difference allowed between a batched item's logits, taps and
	// probabilities and its solo call's; 0 means bit-identical. With a tolerance, a greedy token (or a
	// proposal) may differ only where the solo logits of the two candidates are that close.
	Tolerance float64
	// ContextLength, when > 0, is the sessions' context length; the suite then checks an item refused with
	// ErrContextFull (it forwards that many tokens).
	ContextLength int
	// Long is the length of the long prefill block (default 24).
	Long int

	worst *float64 // the largest difference seen within the tolerance, logged at the end
}

// Run runs every check as a subtest.
func (s BatchSuite) Run(t *testing.T) {
	require.NotNil(t, s.Target, "BatchSuite.Target")
	_, ok := s.Target.(ports.BatchForwarder)
	require.True(t, ok, "%T does not implement ports.BatchForwarder", s.Target)
	if s.Long == 0 {
		s.Long = 24
	}
	s.worst = new(float64)
	if s.Tolerance > 0 {
		defer func() { t.Logf("largest batched-vs-solo difference: %g (tolerance %g)", *s.worst, s.Tolerance) }()
	}
	t.Run("EqualsSolo", s.testEqualsSolo)
	t.Run("ItemErrors", s.testItemErrors)
	t.Run("BadBatch", s.testBadBatch)
	if s.Drafter != nil {
		_, ok := s.Drafter.(ports.BatchDrafter)
		require.True(t, ok, "%T does not implement ports.BatchDrafter", s.Drafter)
		t.Run("DraftEqualsSolo", s.testDraftEqualsSolo)
		t.Run("DraftErrors", s.testDraftErrors)
	}
}

func (s BatchSuite) vocab() int { return s.Target.Info().VocabSize }

func (s BatchSuite) open(t *testing.T, taps []int) ports.Session {
	t.Helper()
	sess, err := s.Target.NewSession(t.Context(), taps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

// tokens returns n tokens of sequence seq's pattern.
func (s BatchSuite) tokens(seq, salt, n int) []ports.Token {
	out := make([]ports.Token, n)
	for j := range out {
		out[j] = ports.Token((seq*7 + salt*11 + j*13 + 3) % s.vocab())
	}
	return out
}

// twin is one sequence run twice: in batches and alone.
type twin struct {
	batched, solo ports.Session
}

// step is one item of a round: its tokens and options.
type step struct {
	seq  int
	toks []ports.Token
	opts ports.ForwardOptions
}

// round runs steps as one ForwardBatch on the batched twins and one Forward each on the solo twins, and
// checks that every item equals its solo run. It returns the solo and the batched results.
func (s BatchSuite) round(t *testing.T, seqs []twin, steps []step) ([]ports.ForwardResult, []ports.BatchResult) {
	t.Helper()
	items := make([]ports.BatchItem, len(steps))
	for i, st := range steps {
		items[i] = ports.BatchItem{Session: seqs[st.seq].batched, Tokens: st.toks, Opts: st.opts}
	}
	got, err := s.Target.(ports.BatchForwarder).ForwardBatch(t.Context(), items)
	require.NoError(t, err)
	require.Len(t, got, len(steps), "one result per item")
	solo := make([]ports.ForwardResult, len(steps))
	for i, st := range steps {
		want, err := seqs[st.seq].solo.Forward(t.Context(), st.toks, st.opts)
		require.NoError(t, err, "solo forward of item %d", i)
		solo[i] = want
		require.NoError(t, got[i].Err, "item %d", i)
		s.equalResult(t, want, got[i].Result, st.opts, "item %d (sequence %d, %d tokens)", i, st.seq, len(st.toks))
		assert.Equal(t, seqs[st.seq].solo.Len(), seqs[st.seq].batched.Len(), "item %d: Len after the batch", i)
	}
	return solo, got
}

func (s BatchSuite) equalResult(t *testing.T, want, got ports.ForwardResult, opts ports.ForwardOptions, msg string, args ...any) {
	t.Helper()
	m := func(what string) []any { return append([]any{what + ": " + msg}, args...) }
	require.Len(t, got.Greedy, len(want.Greedy), m("greedy rows")...)
	s.equalTokens(t, want.Greedy, got.Greedy, want.Logits, m("greedy")...)
	if opts.Logits {
		s.close(t, want.Logits, got.Logits, m("logits")...)
	} else {
		assert.Nil(t, got.Logits, m("no logits unless asked")...)
	}
	require.Len(t, got.Dists, len(want.Dists), m("distributions")...)
	for r := range want.Dists {
		s.equalDist(t, want.Dists[r], got.Dists[r], m("distribution")...)
	}
	if opts.Taps {
		require.NotNil(t, got.Taps, m("taps")...)
		assert.Equal(t, want.Taps.Rows(), got.Taps.Rows(), m("tap rows")...)
		if s.ReadTaps != nil {
			w, err := s.ReadTaps(want.Taps)
			require.NoError(t, err)
			g, err := s.ReadTaps(got.Taps)
			require.NoError(t, err)
			require.Len(t, g, len(w), m("tap rows")...)
			for r := range w {
				s.close(t, w[r], g[r], m("taps")...)
			}
		}
	}
	assert.Equal(t, want.Tape == nil, got.Tape == nil, m("a tape exactly when the solo forward records one")...)
	if want.Tape != nil && got.Tape != nil {
		assert.Equal(t, want.Tape.Len(), got.Tape.Len(), m("tape length")...)
	}
}

// equalTokens compares greedy tokens: equal, or with a tolerance, different only where the solo logits
// (when known) of both tokens are within it.
func (s BatchSuite) equalTokens(t *testing.T, want, got []ports.Token, logits []float32, msgAndArgs ...any) {
	t.Helper()
	if s.Tolerance == 0 || logits == nil {
		assert.Equal(t, want, got, msgAndArgs...)
		return
	}
	V := s.vocab()
	for r := range want {
		if want[r] != got[r] {
			row := logits[r*V : (r+1)*V]
			assert.LessOrEqual(t, math.Abs(float64(row[want[r]]-row[got[r]])), 2*s.Tolerance, msgAndArgs...)
		}
	}
}

func (s BatchSuite) close(t *testing.T, want, got []float32, msgAndArgs ...any) {
	t.Helper()
	require.Len(t, got, len(want), msgAndArgs...)
	worst := 0.0
	for i := range want {
		if want[i] == got[i] || (want[i] != want[i] && got[i] != got[i]) {
			continue
		}
		worst = max(worst, math.Abs(float64(want[i]-got[i])))
		if math.IsNaN(worst) {
			break
		}
	}
	if s.worst != nil && worst > *s.worst {
		*s.worst = worst
	}
	if !(worst <= s.Tolerance) {
		assert.Failf(t, "values differ", "largest difference %g over a tolerance of %g: %s", worst, s.Tolerance, msgf(msgAndArgs))
	}
}

func (s BatchSuite) equalDist(t *testing.T, want, got ports.Distribution, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, want == nil, got == nil, msgAndArgs...)
	if want == nil {
		return
	}
	for tok := range s.vocab() {
		w, g := want.Prob(ports.Token(tok)), got.Prob(ports.Token(tok))
		d := math.Abs(w - g)
		if w == g || d <= s.Tolerance {
			if s.worst != nil && d > *s.worst {
				*s.worst = d
			}
			continue
		}
		assert.Failf(t, "probabilities differ", "token %d: %v vs %v over a tolerance of %g: %s", tok, w, g, s.Tolerance, msgf(msgAndArgs))
		return
	}
}

// msgf formats testify-style message arguments.
func msgf(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return ""
	}
	if f, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(f, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

// testEqualsSolo runs rounds of ragged batches over sequences at different positions, with changing company,
// order and options, a rollback by tape replay in between, and checks every item against its solo twin.
func (s BatchSuite) testEqualsSolo(t *testing.T) {
	lens := []int{1, 3, 7, s.Long, 2}
	seqs := make([]twin, len(lens))
	for i := range seqs {
		seqs[i] = twin{batched: s.open(t, s.TapLayers), solo: s.open(t, s.TapLayers)}
	}
	taps := len(s.TapLayers) > 0
	warm := &ports.SamplingParams{Temperature: 0.8, TopK: 5}
	// Round 0: every prompt prefilled in one batch (a block of one, short blocks, a long one).
	var steps []step
	for i, n := range lens {
		opts := ports.ForwardOptions{Rows: 1, Taps: taps && i%2 == 0}
		if i == 1 {
			opts = ports.ForwardOptions{Logits: true}
		}
		steps = append(steps, step{seq: i, toks: s.tokens(i, 0, n), opts: opts})
	}
	s.round(t, seqs, steps)
	sizes := []int{1, 4, 2, 5, 1}
	for r := 1; r <= 4; r++ {
		steps = steps[:0]
		for i := range seqs {
			if r == 2 && i == 1 {
				continue // company changes from round to round
			}
			n := sizes[(i+r)%len(sizes)]
			opts := ports.ForwardOptions{Taps: taps, RecordTape: r == 3, Logits: (i+r)%2 == 0}
			switch (i + r) % 3 {
			case 0:
				opts.Sampling = warm
			case 1:
				opts.Rows = min(n, 1+i%2)
			}
			steps = append(steps, step{seq: i, toks: s.tokens(i, r, n), opts: opts})
		}
		if r%2 == 1 {
			slices.Reverse(steps)
		}
		solo, res := s.round(t, seqs, steps)
		if r != 3 {
			continue
		}
		// Roll every sequence back to a different number of its block's positions (by tape replay, or by
		// TrimKV alone on attention-only models); the next rounds check that both twins hold the same state.
		for i, st := range steps {
			sq := seqs[st.seq]
			keep := max(0, len(st.toks)-1-i%2)
			base := sq.solo.Len() - len(st.toks)
			if res[i].Result.Tape == nil {
				if _, err := sq.solo.Snapshot(); err != nil {
					require.ErrorIs(t, err, errors.ErrUnsupported)
					require.NoError(t, sq.solo.TrimKV(base+keep))
					require.NoError(t, sq.batched.TrimKV(base+keep))
				}
				continue
			}
			for _, x := range []struct {
				sess ports.Session
				tape ports.Tape
			}{{sq.batched, res[i].Result.Tape}, {sq.solo, solo[i].Tape}} {
				require.NoError(t, x.sess.TrimKV(base+keep))
				require.NoError(t, x.sess.(ports.TapeReplayer).ReplayTape(t.Context(), x.tape, keep), "replaying %d of %d", keep, len(st.toks))
			}
		}
	}
	// A last round of one token each: the continuations agree, so the states do.
	steps = steps[:0]
	for i := range seqs {
		steps = append(steps, step{seq: i, toks: s.tokens(i, 9, 1), opts: ports.ForwardOptions{Logits: true, Taps: taps}})
	}
	s.round(t, seqs, steps)
}

// otherKind is a session of another kind than the target's (it wraps one, so only its type is foreign).
type otherKind struct{ ports.Session }

// testItemErrors puts refused items (empty block, tokens outside the vocabulary, bad sampling, a closed
// session, an unfinished rollback, a full context) beside good ones: each refused item gets its own error
// and keeps its session untouched, the good ones equal their solo runs.
func (s BatchSuite) testItemErrors(t *testing.T) {
	V := s.vocab()
	prompt := s.tokens(1, 1, 4)
	good := []twin{{s.open(t, nil), s.open(t, nil)}, {s.open(t, nil), s.open(t, nil)}}
	for _, g := range good {
		for _, sess := range []ports.Session{g.batched, g.solo} {
			_, err := sess.Forward(t.Context(), prompt, ports.ForwardOptions{Rows: 1})
			require.NoError(t, err)
		}
	}
	type bad struct {
		name string
		sess ports.Session
		toks []ports.Token
		opts ports.ForwardOptions
		is   error
	}
	prefilled := func() ports.Session {
		sess := s.open(t, nil)
		_, err := sess.Forward(t.Context(), prompt, ports.ForwardOptions{Rows: 1})
		require.NoError(t, err)
		return sess
	}
	closed := prefilled()
	require.NoError(t, closed.Close())
	bads := []bad{
		{name: "empty block", sess: prefilled(), toks: []ports.Token{}},
		{name: "token past vocab", sess: prefilled(), toks: []ports.Token{1, ports.Token(V)}},
		{name: "negative token", sess: prefilled(), toks: []ports.Token{-1}},
		{name: "bad sampling", sess: prefilled(), toks: []ports.Token{1}, opts: ports.ForwardOptions{Sampling: &ports.SamplingParams{Temperature: -1}}},
		{name: "closed session", sess: closed, toks: []ports.Token{1}},
	}
	// An unfinished rollback (KV trimmed, recurrent state not restored) on models with recurrent layers.
	if sess := prefilled(); func() bool { _, err := sess.Snapshot(); return err == nil }() {
		_, err := sess.Forward(t.Context(), []ports.Token{2, 3}, ports.ForwardOptions{})
		require.NoError(t, err)
		require.NoError(t, sess.TrimKV(len(prompt)))
		bads = append(bads, bad{name: "unfinished rollback", sess: sess, toks: []ports.Token{1}})
	}
	if s.ContextLength > 0 {
		full := s.open(t, nil)
		_, err := full.Forward(t.Context(), make([]ports.Token, s.ContextLength-1), ports.ForwardOptions{Rows: 1})
		require.NoError(t, err)
		bads = append(bads, bad{name: "context full", sess: full, toks: []ports.Token{1, 2}, is: ports.ErrContextFull})
	}
	items := []ports.BatchItem{{Session: good[0].batched, Tokens: s.tokens(2, 2, 3), Opts: ports.ForwardOptions{Logits: true}}}
	lens := make([]int, len(bads))
	for i, b := range bads {
		if b.name != "closed session" {
			lens[i] = b.sess.Len()
		}
		items = append(items, ports.BatchItem{Session: b.sess, Tokens: b.toks, Opts: b.opts})
	}
	items = append(items, ports.BatchItem{Session: good[1].batched, Tokens: s.tokens(3, 2, 1), Opts: ports.ForwardOptions{Logits: true}})
	res, err := s.Target.(ports.BatchForwarder).ForwardBatch(t.Context(), items)
	require.NoError(t, err, "refused items do not fail the batch")
	require.Len(t, res, len(items))
	for i, b := range bads {
		r := res[i+1]
		if !assert.Error(t, r.Err, b.name) {
			continue
		}
		if b.is != nil {
			assert.ErrorIs(t, r.Err, b.is, b.name)
		}
		if b.name != "closed session" {
			assert.Equal(t, lens[i], b.sess.Len(), "%s: a refused item leaves its session as it was", b.name)
		}
	}
	for _, k := range []int{0, len(items) - 1} {
		g := good[min(k, 1)]
		require.NoError(t, res[k].Err)
		want, err := g.solo.Forward(t.Context(), items[k].Tokens, items[k].Opts)
		require.NoError(t, err)
		s.equalResult(t, want, res[k].Result, items[k].Opts, "good item %d beside refused ones", k)
	}
	// A refused item's session continues as if the batch had not happened.
	ref := prefilled()
	want, err := ref.Forward(t.Context(), []ports.Token{5}, ports.ForwardOptions{Logits: true})
	require.NoError(t, err)
	got, err := bads[0].sess.Forward(t.Context(), []ports.Token{5}, ports.ForwardOptions{Logits: true})
	require.NoError(t, err)
	s.equalResult(t, want, got, ports.ForwardOptions{Logits: true}, "after a refused item")
}

// testBadBatch checks the refusals of the whole call: a session given twice, a session of another kind, a
// cancelled context; and an empty batch.
func (s BatchSuite) testBadBatch(t *testing.T) {
	bf := s.Target.(ports.BatchForwarder)
	a, b := s.open(t, nil), s.open(t, nil)
	_, err := bf.ForwardBatch(t.Context(), []ports.BatchItem{{Session: a, Tokens: []ports.Token{1}}, {Session: b, Tokens: []ports.Token{2}}, {Session: a, Tokens: []ports.Token{3}}})
	assert.Error(t, err, "a session given twice")
	assert.Zero(t, a.Len(), "nothing ran")
	assert.Zero(t, b.Len(), "nothing ran")
	_, err = bf.ForwardBatch(t.Context(), []ports.BatchItem{{Session: b, Tokens: []ports.Token{2}}, {Session: otherKind{a}, Tokens: []ports.Token{1}}})
	assert.Error(t, err, "a session of another kind")
	assert.Zero(t, b.Len(), "nothing ran")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = bf.ForwardBatch(ctx, []ports.BatchItem{{Session: a, Tokens: []ports.Token{1}}, {Session: b, Tokens: []ports.Token{2, 3}}})
	assert.ErrorIs(t, err, context.Canceled)
	res, err := bf.ForwardBatch(t.Context(), nil)
	assert.NoError(t, err, "an empty batch")
	assert.Empty(t, res)
}

// seeded is a ports.Rand for the draft checks (two with one seed give one stream).
type seeded struct{ r *rand.Rand }

func newSeeded(seed uint64) *seeded { return &seeded{rand.New(rand.NewPCG(seed, 7))} }

func (r *seeded) Float64() float64 { return r.r.Float64() }

// drafted is one sequence of the draft checks: a target session feeding both draft twins the same taps.
type drafted struct {
	target        ports.Session
	batched, solo ports.DraftSession
	next          int // tokens of the sequence forwarded so far
}

// soloDraft is what the decoder calls on a session alone: DraftSampled at T > 0 when the session has it.
func soloDraft(ctx context.Context, d ports.DraftSession, it ports.DraftItem) (ports.Proposal, error) {
	if sd, ok := d.(ports.SamplingDrafter); ok && it.Temperature > 0 {
		return sd.DraftSampled(ctx, it.Anchor, it.NewCtx, it.BlockSize, it.Temperature, it.Rand)
	}
	return d.Draft(ctx, it.Anchor, it.NewCtx, it.BlockSize)
}

func (s BatchSuite) openDrafted(t *testing.T) *drafted {
	t.Helper()
	ds := func() ports.DraftSession {
		d, err := s.Drafter.NewSession(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	return &drafted{target: s.open(t, s.Drafter.TapLayers()), batched: ds(), solo: ds()}
}

// feed forwards n more tokens of sequence seq on its target session and returns their detached taps (nil
// for none).
func (s BatchSuite) feed(t *testing.T, d *drafted, seq, n int) ports.Taps {
	t.Helper()
	if n == 0 {
		return nil
	}
	toks := s.tokens(seq, 5, d.next+n)[d.next:]
	d.next += n
	fr, err := d.target.Forward(t.Context(), toks, ports.ForwardOptions{Rows: 1, Taps: true})
	require.NoError(t, err)
	require.NotNil(t, fr.Taps)
	return fr.Taps.Detach()
}

// testDraftEqualsSolo runs rounds of batched drafts (context appends of different lengths, context-only
// items, every block size class, greedy and sampled) and checks every item against its solo twin.
func (s BatchSuite) testDraftEqualsSolo(t *testing.T) {
	bs := s.Drafter.BlockSize()
	seqs := make([]*drafted, 4)
	for i := range seqs {
		seqs[i] = s.openDrafted(t)
	}
	bd := s.Drafter.(ports.BatchDrafter)
	ctxLens := [][]int{{1, 5, s.Long, 3}, {2, 0, 1, 4}, {1, 3, 2, 1}, {4, 1, 1, 2}}
	blockSizes := []int{bs, 2, 1, bs/2 + 1, bs + 3}
	temps := []float64{0, 0.7, 0, 1}
	for r, cl := range ctxLens {
		var items []ports.DraftItem
		var soloRands []ports.Rand
		var order []int
		for i, d := range seqs {
			if r == 2 && i == 0 {
				continue
			}
			it := ports.DraftItem{Session: d.batched, Anchor: ports.Token((i*5 + r*3 + 1) % s.vocab()), NewCtx: s.feed(t, d, i, cl[i]),
				BlockSize: blockSizes[(i+r)%len(blockSizes)], Temperature: temps[(i+r)%len(temps)]}
			var solo ports.Rand
			if it.Temperature > 0 {
				seed := uint64(r*10 + i)
				it.Rand, solo = newSeeded(seed), newSeeded(seed)
			}
			items, soloRands, order = append(items, it), append(soloRands, solo), append(order, i)
		}
		if r%2 == 1 {
			slices.Reverse(items)
			slices.Reverse(soloRands)
			slices.Reverse(order)
		}
		got, err := bd.DraftBatch(t.Context(), items)
		require.NoError(t, err)
		require.Len(t, got, len(items))
		for k, it := range items {
			d := seqs[order[k]]
			it.Session, it.Rand = d.solo, soloRands[k]
			want, err := soloDraft(t.Context(), d.solo, it)
			require.NoError(t, err, "solo draft")
			require.NoError(t, got[k].Err, "round %d item %d", r, k)
			s.equalProposal(t, want, got[k].Proposal, "round %d item %d (block %d, T %v)", r, k, it.BlockSize, it.Temperature)
			assert.Equal(t, d.solo.Len(), d.batched.Len(), "round %d item %d: Len", r, k)
		}
	}
}

func (s BatchSuite) equalProposal(t *testing.T, want, got ports.Proposal, msg string, args ...any) {
	t.Helper()
	m := append([]any{msg}, args...)
	if s.Tolerance == 0 {
		assert.Equal(t, want.Tokens, got.Tokens, m...)
	} else {
		assert.Len(t, got.Tokens, len(want.Tokens), m...)
	}
	require.Len(t, got.Dists, len(want.Dists), m...)
	for j := range want.Dists {
		if s.Tolerance == 0 || (j < len(got.Tokens) && want.Tokens[j] == got.Tokens[j]) {
			s.equalDist(t, want.Dists[j], got.Dists[j], m...)
		}
	}
}

// testDraftErrors puts refused draft items (block sizes below 1 or past any context room, an anchor outside the
// vocabulary, T > 0 without a Rand, a closed session) beside a good one, then checks the whole call's
// refusals (a session twice, a cancelled context).
func (s BatchSuite) testDraftErrors(t *testing.T) {
	bd := s.Drafter.(ports.BatchDrafter)
	good := s.openDrafted(t)
	newCtx := s.feed(t, good, 0, 3)
	bads := []ports.DraftItem{
		{BlockSize: 0}, {BlockSize: pastAnyContext}, {Anchor: ports.Token(s.vocab()), BlockSize: 2},
		{BlockSize: 2, Temperature: 0.5}, {BlockSize: 2},
	}
	sessions := make([]ports.DraftSession, len(bads))
	for i := range bads {
		d, err := s.Drafter.NewSession(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		sessions[i], bads[i].Session = d, d
	}
	require.NoError(t, sessions[len(bads)-1].Close())
	items := append([]ports.DraftItem{{Session: good.batched, Anchor: 1, NewCtx: newCtx, BlockSize: 2}}, bads...)
	res, err := bd.DraftBatch(t.Context(), items)
	require.NoError(t, err, "refused items do not fail the batch")
	require.Len(t, res, len(items))
	for i := range bads {
		assert.Error(t, res[i+1].Err, "bad item %d", i)
		if i < len(bads)-1 {
			assert.Zero(t, sessions[i].Len(), "bad item %d leaves its session as it was", i)
		}
	}
	require.NoError(t, res[0].Err)
	want, err := good.solo.Draft(t.Context(), 1, newCtx, 2)
	require.NoError(t, err)
	s.equalProposal(t, want, res[0].Proposal, "good item beside refused ones")

	_, err = bd.DraftBatch(t.Context(), []ports.DraftItem{{Session: good.batched, Anchor: 1, BlockSize: 2}, {Session: good.batched, Anchor: 2, BlockSize: 2}})
	assert.Error(t, err, "a session given twice")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = bd.DraftBatch(ctx, []ports.DraftItem{{Session: good.batched, Anchor: 1, BlockSize: 2}})
	assert.ErrorIs(t, err, context.Canceled)
}
