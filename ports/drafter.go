package ports

import "context"

// Drafter is a loaded DFlash block-diffusion drafter bound to one target model (it borrows the target's
// embedding and LM head). It is safe for concurrent use; each generation opens its own DraftSession.
type Drafter interface {
	// BlockSize is the drafter's configured block size (anchor included): the block a generation that names
	// none verifies. It is a default, not a bound: a session drafts any block size the context has room for.
	BlockSize() int
	// TapLayers lists the target layers whose outputs the drafter consumes, in order.
	TapLayers() []int
	// NewSession opens a draft session with an empty context cache. The caller must Close it.
	NewSession(ctx context.Context) (DraftSession, error)
}

// Proposal is a drafted block continuation.
type Proposal struct {
	// Tokens are the proposed tokens for block slots 1..bs-1.
	Tokens []Token
	// Dists, when non-nil, holds the distribution each token was drawn from (one per token). Nil means
	// every token is a point mass (greedy drafting), which is what DFlash does.
	Dists []Distribution
	// Top, filled only by TopDrafter.DraftTop, holds each slot's most probable tokens under the drafter
	// (Top[i] for the slot of Tokens[i], most probable first): the candidates a verification tree is built
	// from.
	Top [][]Candidate
}

// DraftSession holds a drafter's context KV cache for one sequence. It is not safe for concurrent use.
type DraftSession interface {
	// Len returns the number of committed context positions cached.
	Len() int
	// Draft appends the context rows of newCtx (target taps for positions Len()..Len()+newCtx.Rows()-1; nil
	// means none) to the cache, then drafts bs-1 tokens for a block whose slot 0 is anchor at position
	// Len() (after the append). Afterwards Len() equals the anchor's position. newCtx is only read during
	// the call. bs ≥ 1 (1 only appends the context) may be below or above BlockSize: the block drafted is
	// exactly bs slots, anchor + bs−1 masks, as the drafter's authors run it; a block that would pass the
	// target's context length is refused, as is bs < 1, before anything is appended.
	Draft(ctx context.Context, anchor Token, newCtx Taps, bs int) (Proposal, error)
	// Crop truncates the context cache to n positions (n ≤ Len()).
	Crop(n int) error
	// Close releases the session.
	Close() error
}
