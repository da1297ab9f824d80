package porttest

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// PrefixSuite configures the prefix-state conformance suite (ports.PrefixExporter): snapshot a prefix, run
// other work, restore into a fresh session, continue, and compare with a session that never left — greedy
// tokens, raw logits (ForwardOptions.Logits) and taps (ports.HostTaps) where the backend has them, all
// bit-identical; then the same for the drafter's context.
type PrefixSuite struct {
	// Target's sessions must implement ports.PrefixExporter. Required.
	Target ports.Target
	// Drafter, when set, must be bound to Target and its sessions implement ports.PrefixExporter.
	Drafter ports.Drafter
	// Vocab is the vocabulary size. Required.
	Vocab int
	// CutTolerance bounds, per logit, how far a prefix cut from a longer session (its KV computed in a block of
	// more rows) may be from a session that computed only the prefix. 0 means bit for bit, as the CPU reference
	// guarantees; a backend whose matrix products round differently with the number of rows (MLX on BLAS) sets
	// its batch tolerance. The greedy tokens must agree either way.
	CutTolerance float64
}

// Run runs every check as a subtest.
func (s PrefixSuite) Run(t *testing.T) {
	require.NotNil(t, s.Target, "PrefixSuite.Target")
	require.GreaterOrEqual(t, s.Vocab, 2, "PrefixSuite.Vocab")
	t.Run("RestoreContinuesExactly", s.testContinue)
	t.Run("StateIsImmutable", s.testImmutable)
	t.Run("Lengths", s.testLengths)
	t.Run("BadImports", s.testBadImports)
	if _, ok := s.Target.(ports.PrefixCodec); ok {
		t.Run("Codec", s.testCodec)
	}
	if s.Drafter != nil {
		t.Run("DrafterContext", s.testDrafter)
	}
}

func (s PrefixSuite) tokens(n, salt int) []ports.Token {
	out := make([]ports.Token, n)
	for i := range out {
		out[i] = ports.Token((i*7 + salt*13 + 3) % s.Vocab)
	}
	return out
}

func (s PrefixSuite) open(t *testing.T, taps []int) (ports.Session, ports.PrefixExporter) {
	t.Helper()
	sess, err := s.Target.NewSession(t.Context(), taps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sess.Close() })
	pe, ok := sess.(ports.PrefixExporter)
	require.True(t, ok, "%T does not implement ports.PrefixExporter", sess)
	return sess, pe
}

// observed is what a Forward shows of the session's state.
type observed struct {
	greedy []ports.Token
	logits []float32
	taps   []float32
}

func observe(t *testing.T, sess ports.Session, toks []ports.Token, taps bool) observed {
	t.Helper()
	fr, err := sess.Forward(t.Context(), toks, ports.ForwardOptions{Taps: taps, Logits: true})
	require.NoError(t, err)
	o := observed{greedy: fr.Greedy, logits: fr.Logits}
	if ht, ok := fr.Taps.(ports.HostTaps); ok && taps {
		data, rows, width, err := ht.Host()
		require.NoError(t, err)
		o.taps = slices.Clone(data[:rows*width])
	}
	return o
}

func forward(t *testing.T, sess ports.Session, toks []ports.Token) {
	t.Helper()
	_, err := sess.Forward(t.Context(), toks, ports.ForwardOptions{})
	require.NoError(t, err)
}

func (s PrefixSuite) tapLayers() []int {
	if s.Drafter != nil {
		return s.Drafter.TapLayers()
	}
	return nil
}

func (s PrefixSuite) testContinue(t *testing.T) {
	prompt, probe := s.tokens(11, 1), s.tokens(5, 2)
	taps := s.tapLayers()
	ref, _ := s.open(t, taps)
	forward(t, ref, prompt[:6])
	forward(t, ref, prompt[6:])
	want := observe(t, ref, probe, taps != nil)

	src, srcPE := s.open(t, taps)
	forward(t, src, prompt[:6])
	forward(t, src, prompt[6:])
	st, err := srcPE.ExportPrefix(len(prompt))
	require.NoError(t, err)
	assert.Equal(t, len(prompt), st.Len())
	assert.Positive(t, st.Bytes())
	assert.Equal(t, len(prompt), src.Len(), "exporting does not change the session")
	// Other work on the source, then it goes away.
	forward(t, src, s.tokens(9, 3))
	require.NoError(t, src.Close())

	dst, dstPE := s.open(t, taps)
	require.NoError(t, dstPE.ImportPrefix(st))
	assert.Equal(t, len(prompt), dst.Len())
	got := observe(t, dst, probe, taps != nil)
	assert.Equal(t, want, got, "a restored session continues bit-identically")
	// And it keeps decoding as the reference does.
	assert.Equal(t, observe(t, ref, probe[:1], false).greedy, observe(t, dst, probe[:1], false).greedy)
}

func (s PrefixSuite) testImmutable(t *testing.T) {
	prompt, probe := s.tokens(8, 4), s.tokens(4, 5)
	src, srcPE := s.open(t, nil)
	forward(t, src, prompt)
	st, err := srcPE.ExportPrefix(len(prompt))
	require.NoError(t, err)
	a, aPE := s.open(t, nil)
	require.NoError(t, aPE.ImportPrefix(st))
	want := observe(t, a, probe, false)
	// A session that imported the state trims, rolls back and moves on: the state does not change.
	require.NoError(t, a.TrimKV(len(prompt)))
	if s.Target.Info().HasRecurrent() {
		// Recurrent layers cannot be trimmed: close it instead.
		require.NoError(t, a.Close())
	} else {
		forward(t, a, s.tokens(6, 6))
	}
	forward(t, src, s.tokens(3, 7))
	for range 2 {
		b, bPE := s.open(t, nil)
		require.NoError(t, bPE.ImportPrefix(st))
		assert.Equal(t, want, observe(t, b, probe, false), "every import of one state continues the same way")
	}
}

func (s PrefixSuite) testLengths(t *testing.T) {
	prompt := s.tokens(10, 8)
	sess, pe := s.open(t, nil)
	_, err := pe.ExportPrefix(1)
	assert.Error(t, err, "an empty session has no prefix to export")
	forward(t, sess, prompt)
	_, err = pe.ExportPrefix(0)
	assert.Error(t, err)
	_, err = pe.ExportPrefix(len(prompt) + 1)
	assert.Error(t, err)
	short, err := pe.ExportPrefix(4)
	if s.Target.Info().HasRecurrent() {
		assert.Error(t, err, "recurrent state exists only at Len")
		return
	}
	require.NoError(t, err, "an attention-only session exports any prefix")
	assert.Equal(t, 4, short.Len())
	ref, _ := s.open(t, nil)
	forward(t, ref, prompt[:4])
	dst, dstPE := s.open(t, nil)
	require.NoError(t, dstPE.ImportPrefix(short))
	probe := s.tokens(3, 9)
	want, got := observe(t, ref, probe, false), observe(t, dst, probe, false)
	if s.CutTolerance == 0 {
		assert.Equal(t, want, got)
		return
	}
	assert.Equal(t, want.greedy, got.greedy)
	require.Len(t, got.logits, len(want.logits))
	for i := range want.logits {
		assert.InDelta(t, want.logits[i], got.logits[i], s.CutTolerance, "logit %d", i)
	}
}

// foreign is a state no backend exported.
type foreign struct{}

func (foreign) Len() int     { return 1 }
func (foreign) Bytes() int64 { return 0 }

func (s PrefixSuite) testBadImports(t *testing.T) {
	src, srcPE := s.open(t, nil)
	forward(t, src, s.tokens(5, 10))
	st, err := srcPE.ExportPrefix(5)
	require.NoError(t, err)
	busy, busyPE := s.open(t, nil)
	forward(t, busy, s.tokens(2, 11))
	assert.Error(t, busyPE.ImportPrefix(st), "importing into a session that holds positions")
	assert.Equal(t, 2, busy.Len())
	empty, emptyPE := s.open(t, nil)
	assert.Error(t, emptyPE.ImportPrefix(foreign{}))
	assert.Error(t, emptyPE.ImportPrefix(nil))
	assert.Zero(t, empty.Len(), "a refused import leaves the session empty")
	if s.Drafter != nil {
		d, err := s.Drafter.NewSession(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		dpe, ok := d.(ports.PrefixExporter)
		require.True(t, ok, "%T does not implement ports.PrefixExporter", d)
		assert.Error(t, dpe.ImportPrefix(st), "a target state is no drafter state")
		assert.Zero(t, d.Len())
	}
}

// testDrafter checks the drafter's context the same way, through a prompt, a drafting call, a plain step
// whose taps are given as context only, then a restore and the next drafting call.
func (s PrefixSuite) testDrafter(t *testing.T) {
	bs := s.Drafter.BlockSize()
	taps := s.Drafter.TapLayers()
	prompt := s.tokens(9, 12)
	type pair struct {
		sess  ports.Session
		draft ports.DraftSession
	}
	open := func() pair {
		sess, _ := s.open(t, taps)
		d, err := s.Drafter.NewSession(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		_, ok := d.(ports.PrefixExporter)
		require.True(t, ok, "%T does not implement ports.PrefixExporter", d)
		return pair{sess, d}
	}
	// history feeds prompt, drafts once, takes one plain step and queues its taps: the state to export.
	history := func(p pair) ports.Token {
		fr, err := p.sess.Forward(t.Context(), prompt, ports.ForwardOptions{Rows: 1, Taps: true})
		require.NoError(t, err)
		a := fr.Greedy[0]
		_, err = p.draft.Draft(t.Context(), a, fr.Taps, bs)
		require.NoError(t, err)
		fr, err = p.sess.Forward(t.Context(), []ports.Token{a}, ports.ForwardOptions{Taps: true})
		require.NoError(t, err)
		_, err = p.draft.Draft(t.Context(), fr.Greedy[0], fr.Taps, 1)
		require.NoError(t, err)
		return fr.Greedy[0]
	}
	next := func(p pair, anchor ports.Token) []ports.Token {
		fr, err := p.sess.Forward(t.Context(), []ports.Token{anchor}, ports.ForwardOptions{Taps: true})
		require.NoError(t, err)
		prop, err := p.draft.Draft(t.Context(), fr.Greedy[0], fr.Taps, bs)
		require.NoError(t, err)
		return prop.Tokens
	}
	ref := open()
	anchor := history(ref)
	want := next(ref, anchor)

	src := open()
	require.Equal(t, anchor, history(src))
	n := len(prompt) + 1
	require.Equal(t, n, src.draft.Len())
	tst, err := src.sess.(ports.PrefixExporter).ExportPrefix(n)
	require.NoError(t, err)
	dst0, err := src.draft.(ports.PrefixExporter).ExportPrefix(n)
	require.NoError(t, err)
	assert.Equal(t, n, dst0.Len())
	short, err := src.draft.(ports.PrefixExporter).ExportPrefix(3)
	require.NoError(t, err)
	assert.Equal(t, 3, short.Len())
	// Other work, then the source goes away.
	next(src, anchor)
	require.NoError(t, src.draft.Crop(2))
	require.NoError(t, src.draft.Close())

	if c, ok := s.Drafter.(ports.PrefixCodec); ok {
		// Through the disk tier's bytes: the decoded context drafts the same.
		dst0 = codecRoundTrip(t, c, dst0)
		short = codecRoundTrip(t, c, short)
	}
	dst := open()
	require.NoError(t, dst.sess.(ports.PrefixExporter).ImportPrefix(tst))
	require.NoError(t, dst.draft.(ports.PrefixExporter).ImportPrefix(dst0))
	assert.Equal(t, n, dst.draft.Len())
	assert.Equal(t, want, next(dst, anchor), "a restored drafter drafts what the reference drafts")
	assert.Error(t, dst.draft.(ports.PrefixExporter).ImportPrefix(short), "importing into a draft session that holds positions")
	_, err = dst.draft.(ports.PrefixExporter).ExportPrefix(dst.draft.Len() + 1)
	assert.Error(t, err)
}

// codecRoundTrip encodes st, checks the bytes decode to a state that encodes to the same bytes and that cut or
// altered bytes are refused, and returns the decoded state.
func codecRoundTrip(t *testing.T, c ports.PrefixCodec, st ports.PrefixState) ports.PrefixState {
	t.Helper()
	b, err := c.EncodePrefix(st)
	require.NoError(t, err)
	got, err := c.DecodePrefix(b)
	require.NoError(t, err)
	assert.Equal(t, st.Len(), got.Len())
	assert.Equal(t, st.Bytes(), got.Bytes())
	again, err := c.EncodePrefix(got)
	require.NoError(t, err)
	assert.Equal(t, b, again, "a decoded state encodes to the same bytes")
	for name, bad := range map[string][]byte{
		"empty":       nil,
		"cut":         b[:len(b)-1],
		"header only": b[:min(len(b), 8)],
		"trailing":    append(slices.Clone(b), 0),
		"magic":       append([]byte{b[0] ^ 0xff}, b[1:]...),
	} {
		_, err := c.DecodePrefix(bad)
		assert.ErrorIs(t, err, ports.ErrPrefixRecordInvalid, "%s bytes", name)
	}
	_, err = c.EncodePrefix(foreign{})
	assert.Error(t, err, "a state of another backend")
	return got
}

// testCodec: a state written to bytes (ports.PrefixCodec) and read back continues exactly as the original.
func (s PrefixSuite) testCodec(t *testing.T) {
	c := s.Target.(ports.PrefixCodec)
	prompt, probe := s.tokens(10, 14), s.tokens(4, 15)
	taps := s.tapLayers()
	ref, _ := s.open(t, taps)
	forward(t, ref, prompt)
	want := observe(t, ref, probe, taps != nil)

	src, srcPE := s.open(t, taps)
	forward(t, src, prompt)
	st, err := srcPE.ExportPrefix(len(prompt))
	require.NoError(t, err)
	require.NoError(t, src.Close())
	dec := codecRoundTrip(t, c, st)

	dst, dstPE := s.open(t, taps)
	require.NoError(t, dstPE.ImportPrefix(dec))
	assert.Equal(t, want, observe(t, dst, probe, taps != nil), "a decoded state continues bit-identically")
}
