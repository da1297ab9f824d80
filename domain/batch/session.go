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
		return &replayTreeSession{replaySession: &replaySession{session: b, r: r}, tv: tv}
	case replays:
		return &replaySession{session: b, r: r}
	case trees:
		return &treeSession{session: b, tv: tv}
	}
	return b
}

// treeSession carries ports.TreeVerifier: the tree's forward goes through the rounds (on its own), keeping
// its path is the session's own call.
type treeSession struct {
	*session
	tv ports.TreeVerifier
}

func (s *treeSession) ForwardTree(ctx context.Context, tokens []ports.Token, parents []int, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	return s.m.ForwardTree(ctx, s.Session, tokens, parents, opts)
}

func (s *treeSession) KeepPath(ctx context.Context, path []int) (ports.Taps, error) {
	return s.tv.KeepPath(ctx, path)
}

type replayTreeSession struct {
	*replaySession
	tv ports.TreeVerifier
}

func (s *replayTreeSession) ForwardTree(ctx context.Context, tokens []ports.Token, parents []int, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	return s.m.ForwardTree(ctx, s.Session, tokens, parents, opts)
}

func (s *replayTreeSession) KeepPath(ctx context.Context, path []int) (ports.Taps, error) {
	return s.tv.KeepPath(ctx, path)
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
		return &samplingTopDraftSession{samplingDraftSession: &samplingDraftSession{draftSession: b}}
	case samples:
		return &samplingDraftSession{draftSession: b}
	case tops:
		return &topDraftSession{draftSession: b}
	}
	return b
}

// topDraftSession carries ports.TopDrafter through the rounds.
type topDraftSession struct {
	*draftSession
}

func (s *topDraftSession) DraftTop(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs, k int) (ports.Proposal, error) {
	return s.m.DraftTop(ctx, ports.DraftItem{Session: s.DraftSession, Anchor: anchor, NewCtx: newCtx, BlockSize: bs}, k)
}

type samplingTopDraftSession struct {
	*samplingDraftSession
}

func (s *samplingTopDraftSession) DraftTop(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs, k int) (ports.Proposal, error) {
	return s.m.DraftTop(ctx, ports.DraftItem{Session: s.DraftSession, Anchor: anchor, NewCtx: newCtx, BlockSize: bs}, k)
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
