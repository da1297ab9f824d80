package ports

// Event is one thing that happened on the server, for live views such as the web page's event stream. Type
// says which fields are set; the JSON form is the documented wire schema of GET /v1/events (README.md).
type Event struct {
	// Type is "hello" (the first event of a subscription), "start", "round", "policy", "end", "queue" or
	// "model" (a model of a server with several loading or unloading).
	Type string `json:"type"`
	// ID names the generation (every type but hello and queue).
	ID string `json:"id,omitempty"`
	// TimeMS is when it happened, in Unix milliseconds.
	TimeMS int64 `json:"time_ms"`

	Hello  *HelloEvent  `json:"hello,omitempty"`
	Start  *StartEvent  `json:"start,omitempty"`
	Round  *RoundEvent  `json:"round,omitempty"`
	Policy *PolicyUsage `json:"policy,omitempty"`
	End    *EndEvent    `json:"end,omitempty"`
	Queue  *QueueEvent  `json:"queue,omitempty"`
	Model  *ModelEvent  `json:"model,omitempty"`
	// Dropped counts the events this subscriber missed before this one because it did not keep up.
	Dropped int `json:"dropped,omitempty"`
}

// HelloEvent describes the server to a new subscriber.
type HelloEvent struct {
	Model string `json:"model"`
	// MaxBlockSize is the drafter's configured block size (1: no drafter; a request may name a larger one, up
	// to the context length); BlockSize the server's default.
	MaxBlockSize int        `json:"max_block_size"`
	BlockSize    int        `json:"block_size"`
	Adaptive     bool       `json:"adaptive"`
	Queue        QueueEvent `json:"queue"`
}

// StartEvent opens a generation.
type StartEvent struct {
	// Model is the model generating (on a server of several, the one the request named).
	Model string `json:"model,omitempty"`
	// Chat is true for chat requests, false for raw completions.
	Chat         bool `json:"chat"`
	PromptTokens int  `json:"prompt_tokens"`
	// MaxTokens is the token budget (prompt excluded).
	MaxTokens int `json:"max_tokens"`
	// BlockSize is the largest block this generation may verify (1: no speculation).
	BlockSize int  `json:"block_size"`
	Adaptive  bool `json:"adaptive"`
}

// Token kinds of RoundEvent.Tokens.
const (
	// TokenAccepted is a draft token the target accepted (committed).
	TokenAccepted = "accepted"
	// TokenRejected is the first draft token the target disagreed with (discarded).
	TokenRejected = "rejected"
	// TokenDrafted is a draft token after the rejected one: proposed, never reached (discarded).
	TokenDrafted = "drafted"
	// TokenBonus is the target's own token after the accepted drafts (committed).
	TokenBonus = "bonus"
	// TokenPlain is the token of a plain decoding step (committed; nothing was drafted).
	TokenPlain = "plain"
)

// RoundEvent is one decoding step: a draft–verify round, or a plain step (BlockSize 1).
type RoundEvent struct {
	// Step numbers the generation's decoding steps from 0.
	Step      int `json:"step"`
	BlockSize int `json:"block_size"`
	// Tree, for a round that verified a tree of candidates, is its node count (anchor included); Tokens
	// then list its accepted path first, then its other candidates as drafted.
	Tree int `json:"tree,omitempty"`
	// Tokens are the drafted tokens in order followed by the target's bonus token (when committed), or the one
	// token of a plain step, each with its kind.
	Tokens []RoundToken `json:"tokens"`
	// Accepted counts the accepted drafts; Committed the tokens committed (≤ Accepted+1 after a stop).
	Accepted  int `json:"accepted"`
	Committed int `json:"committed"`
	// Policy is the decision's code ("fixed", "explore", "best", "probe", "fallback-ar", "length").
	Policy string `json:"policy"`
	// DraftMS, VerifyMS and RollbackMS are the phases' measured durations in milliseconds.
	DraftMS    float64 `json:"draft_ms"`
	VerifyMS   float64 `json:"verify_ms"`
	RollbackMS float64 `json:"rollback_ms"`
	// Generated counts the tokens generated so far; TokensPerS is the decode rate so far; Tau is the
	// generation's τ so far (1 + accepted / draft–verify rounds).
	Generated  int     `json:"generated"`
	TokensPerS float64 `json:"tokens_per_s"`
	Tau        float64 `json:"tau"`
}

// RoundToken is one token of a RoundEvent.
type RoundToken struct {
	ID   Token  `json:"id"`
	Text string `json:"text"`
	Kind string `json:"kind"`
}

// EndEvent closes a generation.
type EndEvent struct {
	// Finish is "stop", "length", "cancelled" or "error".
	Finish           string  `json:"finish"`
	CompletionTokens int     `json:"completion_tokens"`
	DurationMS       float64 `json:"duration_ms"`
	TokensPerS       float64 `json:"tokens_per_s"`
	// Usage is the request's usage.speculative, exactly as the response reports it.
	Usage SpecUsage `json:"usage"`
}

// QueueEvent is the engine's load.
type QueueEvent struct {
	// Waiting counts requests queued for the engine; Running those generating.
	Waiting int `json:"waiting"`
	Running int `json:"running"`
}

// ModelEvent is a change of a model's state on a server that loads models on demand.
type ModelEvent struct {
	Name string `json:"name"`
	// State is "loading", "loaded", "unloaded" or "failed".
	State string `json:"state"`
	// Reason says why a model unloaded: "keep-alive" (idle past its keep-alive), "memory" (another model
	// needed the room) or "shutdown".
	Reason string `json:"reason,omitempty"`
	// DurationMS is how long a load took (loaded, failed).
	DurationMS float64 `json:"duration_ms,omitempty"`
	// Error says why a load failed.
	Error string `json:"error,omitempty"`
}

// EventScope says whose generations a subscription sees.
type EventScope struct {
	// All sees every tenant's generations: only an operator's subscription sets it.
	All bool
	// Tenant is the subscriber's tenant, whose generations it sees when All is false ("" on a server
	// without keys, where every request is that tenant's).
	Tenant Tenant
}

// EventSource is the inbound port live views subscribe through. Implementations are safe for concurrent use.
type EventSource interface {
	// Subscribe returns a channel receiving the events of the generations scope covers from now on, together
	// with the server-wide ones (hello, queue), starting with a hello event, and a cancel function to call
	// exactly once when done (it closes the channel). Events carry no prompt text. A subscriber that does
	// not keep up loses events rather than slowing generation; the next event it gets says how many it lost.
	// While nobody subscribes, publishing costs one atomic load per decoding step.
	Subscribe(scope EventScope) (events <-chan Event, cancel func())
}
