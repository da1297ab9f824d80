package serve

import (
	"strconv"
	"time"

	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// Events returns the live event stream of the generations on this server (the web page's feed), each
// subscriber seeing its scope's.
func (s *Serve) Events() ports.EventSource { return s.events }

func (s *Serve) helloEvent() ports.Event {
	ev := ports.Event{Type: "hello", TimeMS: s.clock.Now().UnixMilli(), Hello: &ports.HelloEvent{
		MaxBlockSize: 1, BlockSize: 1, Adaptive: s.cfg.Adaptive, Queue: s.queueState()}}
	if l := s.engine.Load(); l != nil {
		ev.Hello.Model, ev.Hello.MaxBlockSize, ev.Hello.BlockSize = l.name, l.gen.DrafterBlockSize(), l.gen.DefaultBlockSize()
	}
	return ev
}

func (s *Serve) queueState() ports.QueueEvent {
	return ports.QueueEvent{Waiting: s.gate.waiting(), Running: s.gate.running()}
}

// publishQueue tells listeners the engine's load changed.
func (s *Serve) publishQueue() {
	if s.events.active() {
		q := s.queueState()
		s.events.broadcast(ports.Event{Type: "queue", TimeMS: s.clock.Now().UnixMilli(), Queue: &q})
	}
}

// requestID names a request that came without an ID.
func (s *Serve) requestID() string { return "gen-" + strconv.FormatUint(s.ids.Add(1), 10) }

// live turns one generation's rounds into events for its tenant's subscribers (and the operator's) while
// someone listens. It runs on the generation's goroutine (the decoder's emit and Observe callbacks); nothing
// in it is shared. No event it makes carries prompt text: the start event counts the prompt's tokens, the
// rounds carry output tokens only.
type live struct {
	s      *Serve
	tok    ports.Tokenizer
	id     string
	tenant ports.Tenant
	start  time.Time
	// last holds the tokens the latest emit committed (the round Observe then reports).
	last        []ports.Token
	generated   int
	accepted    int
	draftRounds int
	decode      time.Duration
	step        int
	policy      string
	policyBS    int
	// firstToken is when the first tokens were committed (zero before; the request log's time to first token).
	firstToken time.Time
}

func (s *Serve) newLive(l *loaded, id string, tenant ports.Tenant, p prepared, chat bool) *live {
	lv := &live{s: s, tok: l.Tokenizer, id: id, tenant: tenant, start: s.clock.Now()}
	if s.events.active() {
		s.events.publish(tenant, ports.Event{Type: "start", ID: id, TimeMS: lv.start.UnixMilli(), Start: &ports.StartEvent{
			Model: l.name, Chat: chat, PromptTokens: len(p.Prompt), MaxTokens: p.Config.MaxTokens, BlockSize: p.Config.BlockSize,
			Adaptive: p.Config.Adaptive}})
	}
	return lv
}

// committed wraps the decoder's emit: it records the round's committed tokens for observe.
func (lv *live) committed(next func([]ports.Token) error) func([]ports.Token) error {
	return func(toks []ports.Token) error {
		lv.last = toks
		if lv.generated == 0 && len(toks) > 0 {
			lv.firstToken = lv.s.clock.Now()
		}
		lv.generated += len(toks)
		return next(toks)
	}
}

// observe is the decoder's Observe callback.
func (lv *live) observe(rs speculative.RoundStats) {
	step := lv.step
	lv.step++
	lv.decode += rs.DraftTime + rs.VerifyTime + rs.RollbackTime
	if rs.Drafting() {
		lv.draftRounds++
		lv.accepted += rs.Accepted
	}
	if !lv.s.events.active() {
		return
	}
	now := lv.s.clock.Now().UnixMilli()
	// A new decision is announced when its code changes, or its block size for codes other than "length"
	// (which shortens the block by one each of the last rounds: one announcement says it).
	size := rs.BlockSize // the drafted block: a tree's node count varies from round to round
	if rs.Tree != nil {
		size = rs.Tree.Slots
	}
	if rs.Policy != lv.policy || size != lv.policyBS && rs.Policy != "length" {
		lv.policy, lv.policyBS = rs.Policy, size
		lv.s.events.publish(lv.tenant, ports.Event{Type: "policy", ID: lv.id, TimeMS: now,
			Policy: &ports.PolicyUsage{Mode: rs.Decision.Mode(), Reason: rs.Decision.Reason()}})
	}
	ev := &ports.RoundEvent{Step: step, BlockSize: rs.BlockSize, Accepted: rs.Accepted, Committed: rs.Committed,
		Policy: rs.Policy, DraftMS: ms(rs.DraftTime), VerifyMS: ms(rs.VerifyTime), RollbackMS: ms(rs.RollbackTime),
		Generated: lv.generated, Tau: 1}
	if lv.draftRounds > 0 {
		ev.Tau = 1 + float64(lv.accepted)/float64(lv.draftRounds)
	}
	if lv.decode > 0 {
		// The first token came from the prefill; the decode rate counts the rest.
		ev.TokensPerS = float64(lv.generated-1) / lv.decode.Seconds()
	}
	drafts := rs.Block[1:]
	rejected := rs.Accepted // the chain's first rejected draft
	if t := rs.Tree; t != nil {
		// A tree: its accepted path first, then its other candidates (none of which is "the" rejected one).
		ev.BlockSize, ev.Tree = size, rs.BlockSize
		drafts = make([]ports.Token, 0, len(rs.Block)-1)
		onPath := make(map[int]bool, len(t.Path))
		for _, v := range t.Path {
			drafts = append(drafts, rs.Block[v])
			onPath[v] = true
		}
		for v := 1; v < len(rs.Block); v++ {
			if !onPath[v] {
				drafts = append(drafts, rs.Block[v])
			}
		}
		rejected = -1
	}
	ev.Tokens = make([]ports.RoundToken, 0, len(drafts)+1)
	for i, t := range drafts {
		kind := ports.TokenDrafted
		switch {
		case i < rs.Accepted:
			kind = ports.TokenAccepted
		case i == rejected:
			kind = ports.TokenRejected
		}
		ev.Tokens = append(ev.Tokens, lv.token(t, kind))
	}
	if rs.Committed > rs.Accepted && rs.Accepted < len(lv.last) {
		kind := ports.TokenBonus
		if !rs.Drafting() {
			kind = ports.TokenPlain
		}
		ev.Tokens = append(ev.Tokens, lv.token(lv.last[rs.Accepted], kind))
	}
	lv.s.events.publish(lv.tenant, ports.Event{Type: "round", ID: lv.id, TimeMS: now, Round: ev})
}

func (lv *live) token(t ports.Token, kind string) ports.RoundToken {
	text, err := lv.tok.Decode([]ports.Token{t}, false)
	if err != nil {
		text = ""
	}
	return ports.RoundToken{ID: t, Text: text, Kind: kind}
}

// end closes the generation for listeners: finish is "stop", "length", "cancelled" or "error".
func (lv *live) end(finish string, res ports.GenerateResult) {
	if !lv.s.events.active() {
		return
	}
	now := lv.s.clock.Now()
	ev := &ports.EndEvent{Finish: finish, CompletionTokens: res.CompletionTokens,
		DurationMS: ms(now.Sub(lv.start)), Usage: res.Spec}
	if lv.decode > 0 && lv.generated > 1 {
		ev.TokensPerS = float64(lv.generated-1) / lv.decode.Seconds()
	}
	lv.s.events.publish(lv.tenant, ports.Event{Type: "end", ID: lv.id, TimeMS: now.UnixMilli(), End: ev})
}

// ms is d in milliseconds, as the event stream's fields state durations.
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
