package batch

import (
	"context"

	"github.com/higgs-go/higgs/ports"
)

// Session returns sess with its Forward (and ForwardTree) going through the member's rounds; everything else
// (Len, TrimKV, Snapshot, Restore, Close, ReplayTape and KeepPath when sess has them) stays sess's own, called
// directly. The result implements ports.TapeReplayer and ports.TreeVerifier exactly when sess does, so the
// decoder's choices are the ones it makes on sess. Other optional abilities (prefix export) are not carried:
// use sess for them.
func (m *Member) Session(sess ports.Session) ports.Session {
	b := &session{Session: sess, m: m}
	r, replays := sess.(ports.TapeReplayer)
	tv, trees := sess.(ports.TreeVerifier)
	switch {
	case replays && trees:
		return &replayTreeSession{&replaySession{session: b, r: r}, treeVerifier{m, sess, tv}}
	case replays:
		return &replaySession{session: b, r: r}
	case trees:
		return &treeSession{b, treeVerifier{m, sess, tv}}
	}
	return b
}

// treeVerifier carries ports.TreeVerifier for the wrappers of a session that has it: the tree's forward goes
// through the rounds (on its own), keeping its path is the session's own call.
type treeVerifier struct {
	m    *Member
	sess ports.Session
	tv   ports.TreeVerifier
}

func (t treeVerifier) ForwardTree(ctx context.Context, tokens []ports.Token, parents []int, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	return t.m.ForwardTree(ctx, t.sess, tokens, parents, opts)
}

func (t treeVerifier) KeepPath(ctx context.Context, path []int) (ports.Taps, error) {
	return t.tv.KeepPath(ctx, path)
}

type treeSession struct {
	*session
	treeVerifier
}

type replayTreeSession struct {
	*replaySession
	treeVerifier
}

type session struct {
	ports.Session
	m *Member
}

func (s *session) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	return s.m.Forward(ctx, s.Session, tokens, opts)
}

type replaySession struct {
	*session
	r ports.TapeReplayer
}

func (s *replaySession) ReplayTape(ctx context.Context, tape ports.Tape, n int) error {
	return s.r.ReplayTape(ctx, tape, n)
}

// DraftSession returns ds with its Draft (and DraftSampled and DraftTop, present exactly when ds has them)
// going through the member's rounds; Len, Crop and Close stay ds's own.
func (m *Member) DraftSession(ds ports.DraftSession) ports.DraftSession {
	b := &draftSession{DraftSession: ds, m: m}
	_, samples := ds.(ports.SamplingDrafter)
	_, tops := ds.(ports.TopDrafter)
	switch {
	case samples && tops:
		return &samplingTopDraftSession{&samplingDraftSession{draftSession: b}, topDrafter{m, ds}}
	case samples:
		return &samplingDraftSession{draftSession: b}
	case tops:
		return &topDraftSession{b, topDrafter{m, ds}}
	}
	return b
}

// topDrafter carries ports.TopDrafter through the rounds for the wrappers of a draft session that has it.
type topDrafter struct {
	m  *Member
	ds ports.DraftSession
}

func (t topDrafter) DraftTop(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, top ports.TopRequest) (ports.Proposal, error) {
	return t.m.DraftTop(ctx, ports.DraftItem{Session: t.ds, Anchor: anchor, NewCtx: newCtx, BlockSize: bs}, top)
}

type topDraftSession struct {
	*draftSession
	topDrafter
}

type samplingTopDraftSession struct {
	*samplingDraftSession
	topDrafter
}

type draftSession struct {
	ports.DraftSession
	m *Member
}

func (s *draftSession) Draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int) (ports.Proposal, error) {
	return s.m.Draft(ctx, ports.DraftItem{Session: s.DraftSession, Anchor: anchor, NewCtx: newCtx, BlockSize: bs})
}

type samplingDraftSession struct {
	*draftSession
}

func (s *samplingDraftSession) DraftSampled(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int,
	temperature float64, rnd ports.Rand) (ports.Proposal, error) {
	return s.m.Draft(ctx, ports.DraftItem{Session: s.DraftSession, Anchor: anchor, NewCtx: newCtx, BlockSize: bs,
		Temperature: temperature, Rand: rnd})
}
