package batch

import (
	"context"

	"github.com/higgs-go/higgs/ports"
)

// Session returns sess with its Forward going through the member's rounds; everything else (Len, TrimKV,
// Snapshot, Restore, Close, and ReplayTape when sess can replay) stays sess's own, called directly. The
// result implements ports.TapeReplayer exactly when sess does, so the decoder's rollback choices are the ones
// it makes on sess. Other optional abilities (prefix export) are not carried: use sess for them.
func (m *Member) Session(sess ports.Session) ports.Session {
	b := &session{Session: sess, m: m}
	if r, ok := sess.(ports.TapeReplayer); ok {
		return &replaySession{session: b, r: r}
	}
	return b
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

// DraftSession returns ds with its Draft (and DraftSampled, present exactly when ds has it) going through the
// member's rounds; Len, Crop and Close stay ds's own.
func (m *Member) DraftSession(ds ports.DraftSession) ports.DraftSession {
	b := &draftSession{DraftSession: ds, m: m}
	if _, ok := ds.(ports.SamplingDrafter); ok {
		return &samplingDraftSession{draftSession: b}
	}
	return b
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
