package ports

import (
	"context"
	"errors"
)

// ErrContextFull is returned by Session.Forward when the block would exceed the model's context length.
var ErrContextFull = errors.New("context length exceeded")

// LayerKind says how a target layer keeps its per-sequence state, which decides how it can be rolled back.
type LayerKind int

const (
	// LayerAttention keeps a KV cache; rolling back is a truncation (Session.TrimKV).
	LayerAttention LayerKind = iota + 1
	// LayerRecurrent keeps a Gated DeltaNet conv buffer and SSM state; rolling back needs a snapshot, a
	// recompute or a tape replay.
	LayerRecurrent
)

func (k LayerKind) String() string {
	switch k {
	case LayerAttention:
		return "attention"
	case LayerRecurrent:
		return "recurrent"
	}
	return "unknown"
}

// ModelInfo describes a loaded target model.
type ModelInfo struct {
	// Name is a human-readable identifier (the directory or hub id it was loaded from).
	Name string
	// Architecture is the config.json model_type (qwen3, qwen3_next, qwen3_5, ...).
	Architecture string
	// VocabSize is the number of logits per position.
	VocabSize int
	// HiddenSize is the width of the residual stream (and of one tapped layer).
	HiddenSize int
	// ContextLength is the maximum number of positions a session may hold.
	ContextLength int
	// LayerKinds lists each layer's state kind in order.
	LayerKinds []LayerKind
	// EOSTokens are the stop ids from generation_config.json (and config.json), possibly empty.
	EOSTokens []Token
}

// HasRecurrent reports whether any layer keeps recurrent state.
func (m ModelInfo) HasRecurrent() bool {
	for _, k := range m.LayerKinds {
		if k == LayerRecurrent {
			return true
		}
	}
	return false
}

// Target is a loaded target model. It is safe for concurrent use; each generation opens its own Session.
type Target interface {
	// Info describes the model. The returned value must not be modified.
	Info() ModelInfo
	// NewSession opens an empty session (no positions cached). The caller must Close it.
	// tapLayers lists the layers whose outputs Forward returns as Taps when asked (in this order); it may be
	// empty when no drafter is used.
	NewSession(ctx context.Context, tapLayers []int) (Session, error)
}

// ForwardOptions says what a Session.Forward call must return besides the greedy tokens.
type ForwardOptions struct {
	// Rows limits the per-position outputs (Greedy, Dists) to the last Rows positions of the block; 0 means
	// every position. Prefill asks for 1. Taps always cover every position of the block when requested.
	Rows int
	// Taps requests the hidden states after the session's tap layers for every position of the block.
	Taps bool
	// RecordTape requests a recurrent-state tape (Result.Tape) so the block can later be rolled back by
	// TapeReplayer.ReplayTape. Backends without that ability ignore it and leave Result.Tape nil.
	RecordTape bool
	// Sampling, when non-nil, requests per-position distributions (Result.Dists) after these logit
	// transforms. Greedy tokens are always returned.
	Sampling *SamplingParams
	// Logits requests the raw next-token logits of the returned rows (Result.Logits), for consumers that
	// transform them further (constrained decoding masks them; reference checks compare them).
	Logits bool
}

// ForwardResult is what a forward pass returns. Its handles stay valid until the session is closed or the
// next Forward call, whichever comes first, unless a handle's documentation says otherwise.
type ForwardResult struct {
	// Greedy holds the argmax of the next-token logits for each returned position (ties: lowest id).
	Greedy []Token
	// Dists holds the next-token distribution for each returned position; nil unless Sampling was set.
	Dists []Distribution
	// Taps holds the tapped hidden states for every position of the block; nil unless requested.
	Taps Taps
	// Tape records the recurrent layers' innovations for the block; nil unless requested and supported.
	Tape Tape
	// Logits holds the raw next-token logits of the returned rows, row-major [rows, VocabSize]; nil unless
	// requested. The slice is the caller's.
	Logits []float32
}

// Session is one sequence's state inside a target model: KV caches for attention layers and conv/SSM state
// for recurrent layers. It is not safe for concurrent use.
//
// Position bookkeeping: Len is the number of positions whose state the caches hold. Forward appends len(tokens)
// positions. After a rollback (TrimKV plus, for recurrent layers, Restore+Forward or ReplayTape) every layer
// must hold exactly the state reached by feeding only the committed tokens.
type Session interface {
	// Len returns the number of positions held.
	Len() int
	// Forward runs tokens at positions Len()..Len()+len(tokens)-1 with causal attention over the cache and
	// appends them. On error the session state is unspecified and the session must be closed.
	Forward(ctx context.Context, tokens []Token, opts ForwardOptions) (ForwardResult, error)
	// TrimKV truncates every attention layer's KV cache to n positions (n ≤ Len()) and sets Len() to n.
	// Recurrent layers are not touched: the caller must bring them to the same position (Restore and
	// re-Forward, or ReplayTape) before the next Forward.
	TrimKV(n int) error
	// Snapshot copies every recurrent layer's state (conv buffer, its write position, SSM state) at the
	// current position. The snapshot is owned by the caller and independent of later session changes.
	Snapshot() (RecurrentSnapshot, error)
	// Restore puts recurrent layers back to a snapshot taken from this session. Attention layers are not
	// touched. The snapshot stays valid and may be restored again.
	Restore(s RecurrentSnapshot) error
	// Close releases the session's memory. Handles it returned become invalid.
	Close() error
}

// TapeReplayer is an optional Session ability: roll recurrent layers back to the state after the first n
// positions of the block that produced tape, without re-running the model. The replay must be bit-exact
// with feeding only those n tokens. The tape must come from the latest Forward of this session.
type TapeReplayer interface {
	ReplayTape(ctx context.Context, tape Tape, n int) error
}

// RecurrentSnapshot is an opaque copy of recurrent state. Position returns the session length it was taken at.
type RecurrentSnapshot interface {
	Position() int
}

// Tape is an opaque record of a block's recurrent-state updates. Len is the number of positions recorded.
type Tape interface {
	Len() int
}

// Taps is an opaque, backend-resident matrix of tapped hidden states, one row per position (the hidden states
// after each tap layer, concatenated in tap order).
type Taps interface {
	// Rows returns the number of positions.
	Rows() int
	// Slice returns a view of the first n rows (0 ≤ n ≤ Rows()). The view shares memory with the receiver and
	// stays valid as long as the receiver does.
	Slice(n int) Taps
	// Detach returns a copy that stays valid after later Forward calls of the session that made it.
	Detach() Taps
}

// Distribution is a next-token probability distribution after sampling transforms.
type Distribution interface {
	// Prob returns the probability of tok (0 for tokens outside the support).
	Prob(tok Token) float64
	// Sample draws a token by inverse CDF with the caller's uniform number u in [0,1). When exclude is not
	// NoToken the token is removed and the rest renormalised (the residual of speculative sampling with a
	// point-mass draft). It returns NoToken only if no probability mass remains.
	Sample(u float64, exclude Token) Token
}
