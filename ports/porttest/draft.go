package porttest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// DraftSuite configures the DraftSession conformance suite.
type DraftSuite struct {
	// OpenTarget returns a new empty target session tapping the drafter's tap layers. Required.
	OpenTarget func(t *testing.T) ports.Session
	// OpenDraft returns a new empty draft session. Required.
	OpenDraft func(t *testing.T) ports.DraftSession
	// BlockSize is the drafter's BlockSize (≥ 2). Required.
	BlockSize int
	// ContextLength is the target's context length (0: it states none); a block passing it must be refused.
	ContextLength int
	// Vocab is the vocabulary size. Required.
	Vocab int
}

// TestDraftSession runs the DraftSession suite: openTarget opens a target session tapping the drafter's
// layers, openDraft an empty draft session; blockSize is the drafter's BlockSize and vocab the vocabulary.
func TestDraftSession(t *testing.T, openTarget func(t *testing.T) ports.Session,
	openDraft func(t *testing.T) ports.DraftSession, blockSize, vocab int) {
	DraftSuite{OpenTarget: openTarget, OpenDraft: openDraft, BlockSize: blockSize, Vocab: vocab}.Run(t)
}

// Run runs every check as a subtest.
func (s DraftSuite) Run(t *testing.T) {
	require.NotNil(t, s.OpenTarget, "DraftSuite.OpenTarget")
	require.NotNil(t, s.OpenDraft, "DraftSuite.OpenDraft")
	require.GreaterOrEqual(t, s.BlockSize, 2, "DraftSuite.BlockSize")
	require.GreaterOrEqual(t, s.Vocab, 2, "DraftSuite.Vocab")
	t.Run("LenFollowsContext", s.testLen)
	t.Run("Deterministic", s.testDeterministic) // greedy drafters only (Proposal.Dists nil), as DFlash is
	t.Run("ContextOnlyBlockOfOne", s.testContextOnly)
	t.Run("CropAndRefeed", s.testCrop)
	t.Run("AnyBlockSize", s.testAnyBlockSize)
	t.Run("BadInput", s.testBadInput)
	t.Run("TopCandidates", s.testTop) // drafters with the ports.TopDrafter ability
}

// checkTop checks a DraftTop proposal of n slots: Top holds n lists, each starting with its slot's token,
// at most k distinct candidates in the vocabulary, with probabilities in (0, 1] that never rise after the
// second.
func (s DraftSuite) checkTop(t *testing.T, msg string, p ports.Proposal, n, k int) {
	t.Helper()
	require.Len(t, p.Tokens, n, msg)
	require.Len(t, p.Top, n, msg)
	for i, cands := range p.Top {
		require.NotEmpty(t, cands, msg)
		require.LessOrEqual(t, len(cands), k, msg)
		assert.Equal(t, p.Tokens[i], cands[0].Token, "%s: slot %d starts with its token", msg, i+1)
		seen := map[ports.Token]bool{}
		for j, c := range cands {
			assert.True(t, c.Token >= 0 && int(c.Token) < s.Vocab, "%s: slot %d candidate %d outside the vocabulary", msg, i+1, c.Token)
			assert.False(t, seen[c.Token], "%s: slot %d candidate %d twice", msg, i+1, c.Token)
			seen[c.Token] = true
			assert.True(t, c.Prob > 0 && c.Prob <= 1, "%s: slot %d probability %v", msg, i+1, c.Prob)
			if j > 1 {
				assert.LessOrEqual(t, c.Prob, cands[j-1].Prob, "%s: slot %d", msg, i+1)
			}
		}
	}
}

// testTop checks ports.TopDrafter: DraftTop proposes Draft's tokens (the first top.Slots of them, all bs−1 for
// 0 or past the block), each slot's candidates start with its token, are distinct, in the vocabulary, at most
// K of them, with probabilities in (0, 1] that never rise after the second; fewer slots give the full call's
// first slots (a deterministic drafter's); Len() ends where Draft's does; a narrow request is well formed and
// repeatable; K < 1 is refused before anything is appended.
func (s DraftSuite) testTop(t *testing.T) {
	if _, ok := s.draft(t).(ports.TopDrafter); !ok {
		t.Skip("this draft session has no ports.TopDrafter ability")
	}
	ctx := s.taps(t, s.prompt())[0]
	for _, bs := range []int{2, s.BlockSize, s.BlockSize + 1} {
		plain := s.draft(t)
		want, err := plain.Draft(t.Context(), 3, ctx, bs)
		require.NoError(t, err)
		for _, k := range []int{1, 3} {
			var full ports.Proposal
			asks := []int{0, bs - 1, 1, bs + 5}
			if half := (bs - 1) / 2; half > 1 {
				asks = append(asks, half)
			}
			for _, slots := range asks {
				msg := fmt.Sprintf("bs %d k %d slots %d", bs, k, slots)
				d := s.draft(t)
				p, err := d.(ports.TopDrafter).DraftTop(t.Context(), 3, ctx, bs, ports.TopRequest{K: k, Slots: slots})
				require.NoError(t, err, msg)
				n := ports.TopRequest{K: k, Slots: slots}.SlotsOf(bs)
				assert.Equal(t, plain.Len(), d.Len(), msg)
				if want.Dists == nil {
					require.Equal(t, want.Tokens[:n], p.Tokens, msg)
				}
				s.checkTop(t, msg, p, n, k)
				if slots == 0 {
					full = p
					continue
				}
				if want.Dists != nil {
					continue // a sampling drafter's draws differ from call to call
				}
				for i, cands := range p.Top {
					require.Len(t, cands, len(full.Top[i]), msg)
					for j, c := range cands {
						assert.Equal(t, full.Top[i][j].Token, c.Token, "%s: slot %d rank %d as in the full call", msg, i+1, j)
						assert.InDelta(t, full.Top[i][j].Prob, c.Prob, 1e-5, "%s: slot %d rank %d", msg, i+1, j)
					}
				}
			}
		}
	}
	// A narrow draft (ports.TopRequest.Narrow) is the drafter's own approximation: well formed, the same
	// from call to call for a deterministic drafter, appending what Draft appends, and a full draft's where it
	// proposes every slot (nothing to narrow).
	bs := s.BlockSize
	plain := s.draft(t)
	want, err := plain.Draft(t.Context(), 3, ctx, bs)
	require.NoError(t, err)
	for _, slots := range []int{1, max(1, (bs-1)/2), bs - 1} {
		req := ports.TopRequest{K: 3, Slots: slots, Narrow: true}
		msg := fmt.Sprintf("narrow bs %d slots %d", bs, slots)
		var first ports.Proposal
		for call := range 2 {
			d := s.draft(t)
			p, err := d.(ports.TopDrafter).DraftTop(t.Context(), 3, ctx, bs, req)
			require.NoError(t, err, msg)
			assert.Equal(t, plain.Len(), d.Len(), msg)
			n := req.SlotsOf(bs)
			s.checkTop(t, msg, p, n, req.K)
			if want.Dists != nil {
				continue
			}
			if slots == bs-1 {
				// Nothing to narrow: the full draft's tokens and candidates, probabilities included.
				require.Equal(t, want.Tokens, p.Tokens, "%s: every slot proposed is the full draft", msg)
				d := s.draft(t)
				full, err := d.(ports.TopDrafter).DraftTop(t.Context(), 3, ctx, bs, ports.TopRequest{K: req.K, Slots: slots})
				require.NoError(t, err, msg)
				require.Len(t, full.Top, len(p.Top), msg)
				for i := range p.Top {
					require.Len(t, p.Top[i], len(full.Top[i]), msg)
					for j, c := range p.Top[i] {
						assert.Equal(t, full.Top[i][j].Token, c.Token, "%s: slot %d rank %d", msg, i+1, j)
						assert.InDelta(t, full.Top[i][j].Prob, c.Prob, 1e-6, "%s: slot %d rank %d", msg, i+1, j)
					}
				}
			}
			if call == 0 {
				first = p
				continue
			}
			require.Equal(t, first.Tokens, p.Tokens, "%s: the same proposals again", msg)
			for i := range p.Top {
				for j, c := range p.Top[i] {
					assert.Equal(t, first.Top[i][j].Token, c.Token, "%s: slot %d rank %d again", msg, i+1, j)
				}
			}
		}
	}
	d := s.draft(t)
	_, err = d.(ports.TopDrafter).DraftTop(t.Context(), 3, ctx, s.BlockSize, ports.TopRequest{})
	require.Error(t, err, "K 0 is refused")
	assert.Zero(t, d.Len(), "a refused call appends nothing")
}

// pastAnyContext is a block size no context has room for (every backend states a context length below it).
const pastAnyContext = 1 << 30

// testAnyBlockSize drafts blocks below, at and above the configured size: each proposes bs−1 tokens, leaves
// Len() at the anchor's position and is deterministic; a block filling the context room exactly is drafted
// (when that room is small enough to draft quickly).
func (s DraftSuite) testAnyBlockSize(t *testing.T) {
	ctx := s.taps(t, s.prompt())[0]
	sizes := []int{2, s.BlockSize - 1, s.BlockSize, s.BlockSize + 1, 2*s.BlockSize + 3}
	if room := s.ContextLength - len(s.prompt()); s.ContextLength > 0 && room <= 256 {
		sizes = append(sizes, room)
	}
	for _, bs := range sizes {
		if bs < 2 {
			continue
		}
		var first ports.Proposal
		for rep := range 2 {
			d := s.draft(t)
			p, err := d.Draft(t.Context(), 3, ctx, bs)
			require.NoError(t, err, "block size %d", bs)
			s.checkProposal(t, p, bs)
			assert.Equal(t, len(s.prompt()), d.Len(), "block size %d: Len is the anchor's position", bs)
			if rep == 0 {
				first = p
			} else if p.Dists == nil {
				assert.Equal(t, first.Tokens, p.Tokens, "block size %d: deterministic", bs)
			}
		}
	}
}

func (s DraftSuite) prompt() []ports.Token {
	p := make([]ports.Token, 9)
	for i := range p {
		p[i] = ports.Token((i*11 + 4) % s.Vocab)
	}
	return p
}

func (s DraftSuite) draft(t *testing.T) ports.DraftSession {
	t.Helper()
	d := s.OpenDraft(t)
	require.NotNil(t, d)
	t.Cleanup(func() { _ = d.Close() })
	require.Zero(t, d.Len(), "a new draft session is empty")
	return d
}

// taps forwards toks in chunks on a fresh target session and returns each chunk's detached taps.
func (s DraftSuite) taps(t *testing.T, toks []ports.Token, cuts ...int) []ports.Taps {
	t.Helper()
	sess := s.OpenTarget(t)
	require.NotNil(t, sess)
	t.Cleanup(func() { _ = sess.Close() })
	var out []ports.Taps
	start := 0
	for _, end := range append(cuts, len(toks)) {
		fr, err := sess.Forward(t.Context(), toks[start:end], ports.ForwardOptions{Rows: 1, Taps: true})
		require.NoError(t, err)
		require.NotNil(t, fr.Taps, "the target session must tap the drafter's layers")
		require.Equal(t, end-start, fr.Taps.Rows())
		out = append(out, fr.Taps.Detach())
		start = end
	}
	return out
}

func (s DraftSuite) checkProposal(t *testing.T, p ports.Proposal, bs int) {
	t.Helper()
	require.Len(t, p.Tokens, bs-1, "bs-1 proposed tokens")
	for _, tok := range p.Tokens {
		require.True(t, tok >= 0 && int(tok) < s.Vocab, "proposed token %d outside vocabulary", tok)
	}
	if p.Dists != nil {
		require.Len(t, p.Dists, bs-1)
		for i, d := range p.Dists {
			assert.Positive(t, d.Prob(p.Tokens[i]), "a drafted token has positive probability under its distribution")
		}
	}
}

func (s DraftSuite) testLen(t *testing.T) {
	p := s.prompt()
	ctx := s.taps(t, p)[0]
	d := s.draft(t)
	anchor := ports.Token(3 % s.Vocab)
	prop, err := d.Draft(t.Context(), anchor, ctx, s.BlockSize)
	require.NoError(t, err)
	s.checkProposal(t, prop, s.BlockSize)
	assert.Equal(t, len(p), d.Len(), "after Draft, Len is the anchor position")
	// A round without new context (nil) keeps the length.
	prop, err = d.Draft(t.Context(), anchor, nil, 2)
	require.NoError(t, err)
	s.checkProposal(t, prop, 2)
	assert.Equal(t, len(p), d.Len())
}

func (s DraftSuite) testDeterministic(t *testing.T) {
	p := s.prompt()
	ctx := s.taps(t, p)[0]
	var props []ports.Proposal
	for range 2 {
		d := s.draft(t)
		prop, err := d.Draft(t.Context(), 1, ctx, s.BlockSize)
		require.NoError(t, err)
		props = append(props, prop)
	}
	if props[0].Dists != nil {
		t.Skip("the drafter samples its tokens (Proposal.Dists set): proposals are random by design")
	}
	assert.Equal(t, props[0].Tokens, props[1].Tokens, "same context and anchor, same proposal")
}

// testContextOnly checks Draft with bs = 1 (no drafted tokens, context appended): the decoder uses it to
// feed the context of plain-decoding rounds before drafting again.
func (s DraftSuite) testContextOnly(t *testing.T) {
	p := s.prompt()
	chunks := s.taps(t, p, 4)
	split := s.draft(t)
	prop, err := split.Draft(t.Context(), p[4], chunks[0], 1)
	require.NoError(t, err)
	assert.Empty(t, prop.Tokens, "a block of one drafts nothing")
	assert.Equal(t, 4, split.Len())
	got, err := split.Draft(t.Context(), 2, chunks[1], s.BlockSize)
	require.NoError(t, err)
	s.checkProposal(t, got, s.BlockSize)
	assert.Equal(t, len(p), split.Len())
}

func (s DraftSuite) testCrop(t *testing.T) {
	p := s.prompt()
	chunks := s.taps(t, p, 6)
	d := s.draft(t)
	_, err := d.Draft(t.Context(), p[6], chunks[0], 1)
	require.NoError(t, err)
	want, err := d.Draft(t.Context(), 5, chunks[1], s.BlockSize)
	require.NoError(t, err)
	require.NoError(t, d.Crop(6))
	assert.Equal(t, 6, d.Len(), "Crop sets Len")
	got, err := d.Draft(t.Context(), 5, chunks[1], s.BlockSize)
	require.NoError(t, err)
	if want.Dists == nil {
		assert.Equal(t, want.Tokens, got.Tokens, "cropping and re-feeding the same context gives the same proposal")
	}
	require.NoError(t, d.Crop(d.Len()), "cropping to the current length is a no-op")
	assert.Error(t, d.Crop(d.Len()+1), "Crop past Len")
	assert.Error(t, d.Crop(-1), "negative Crop")
}

func (s DraftSuite) testBadInput(t *testing.T) {
	ctx := s.taps(t, s.prompt())[0]
	bad := []int{0, -1, pastAnyContext}
	if s.ContextLength > 0 {
		bad = append(bad, s.ContextLength-len(s.prompt())+1)
	}
	for _, bs := range bad {
		d := s.draft(t)
		_, err := d.Draft(t.Context(), 1, ctx, bs)
		assert.Error(t, err, "block size %d", bs)
	}
	for _, anchor := range []ports.Token{-1, ports.Token(s.Vocab)} {
		d := s.draft(t)
		_, err := d.Draft(t.Context(), anchor, ctx, 2)
		assert.Error(t, err, "anchor %d", anchor)
	}
}
