package ports

import "context"

// BatchForwarder is an optional Target ability: one forward pass over blocks of several of the target's
// sessions, so the weights stream once for every row of the round (continuous batching). Blocks are ragged:
// each item has its own session, position (its session's Len), length and options; a plain-decoding
// sequence is a block of one.
//
// Contract: each item's result, and its session's state afterwards, are bit-identical to what
// item.Session.Forward(ctx, item.Tokens, item.Opts) alone would have produced, whatever the other items are,
// how many there are and in which order. Sessions must be distinct and opened by this target (otherwise the
// call fails before any work). An item the session itself refuses before computing (an empty block, a token
// outside the vocabulary, ErrContextFull) gets its error in BatchResult.Err and leaves its session untouched,
// while the others run. A non-nil error return (ctx cancelled, a backend failure) leaves every item's
// session state unspecified, as a failed Forward does. Result handles follow Forward's rules for their own
// session (valid until that session's next Forward, Close, or ForwardBatch that includes it).
type BatchForwarder interface {
	ForwardBatch(ctx context.Context, items []BatchItem) ([]BatchResult, error)
}

// BatchItem is one sequence's block in a batched forward.
type BatchItem struct {
	Session Session
	Tokens  []Token
	Opts    ForwardOptions
}

// BatchResult is one item's outcome, in the order of the items.
type BatchResult struct {
	Result ForwardResult
	// Err is the item's own refusal (see BatchForwarder); nil when it ran.
	Err error
}

// BatchDrafter is an optional Drafter ability: draft for several of the drafter's sessions in one pass
// (their context appends and noise blocks batched). Each item's proposal, and its session's state
// afterwards, are bit-identical to the same call on that session alone: Draft when Temperature is 0,
// SamplingDrafter.DraftSampled with Temperature and Rand otherwise. Error rules are BatchForwarder's.
type BatchDrafter interface {
	DraftBatch(ctx context.Context, items []DraftItem) ([]DraftResult, error)
}

// DraftItem is one sequence's draft request in a batched draft.
type DraftItem struct {
	Session   DraftSession
	Anchor    Token
	NewCtx    Taps
	BlockSize int
	// Temperature > 0 draws the proposals with Rand (DraftSampled); 0 drafts greedily (Draft).
	Temperature float64
	Rand        Rand
}

// DraftResult is one item's outcome, in the order of the items.
type DraftResult struct {
	Proposal Proposal
	Err      error
}
