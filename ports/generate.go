package ports

import (
	"context"
	"errors"
)

// Errors the Generator reports; adapters map them with errors.Is (for example to HTTP statuses).
var (
	// ErrInvalidRequest wraps every problem with the request itself (bad parameter, empty prompt…).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnknownModel means the request named a model this server does not serve.
	ErrUnknownModel = errors.New("unknown model")
	// ErrBusy means the request queue is full; retry later.
	ErrBusy = errors.New("server busy")
	// ErrNotReady means the model is still loading.
	ErrNotReady = errors.New("model not ready")
	// ErrBackendLost means part of the backend is gone (a rank of a model split across processes stopped
	// answering): the server cannot generate until it is restarted. Its text names what was lost.
	ErrBackendLost = errors.New("backend lost")
	// ErrProvider means a remote provider the request was routed to failed (answered 5xx, answered nonsense,
	// or could not be reached): a bad gateway, not the client's fault. Its text names the provider and what
	// went wrong (never the provider's key).
	ErrProvider = errors.New("provider failed")
	// ErrModelLoad means the requested model could not be loaded on demand (a missing directory, a corrupt
	// checkpoint, more memory than the budget holds). Its text names the model and why.
	ErrModelLoad = errors.New("model load failed")
)

// RequestError is a problem with one parameter of a request. It matches ErrInvalidRequest with errors.Is, and
// adapters find it with errors.As to name the parameter in their error shape. Message is written for the
// client as it stands (no "invalid request:" prefix).
type RequestError struct {
	// Param is the request field at fault as the OpenAI wire names it (max_tokens, block_size, messages…);
	// "" when no single field is.
	Param   string
	Message string
}

func (e *RequestError) Error() string { return e.Message }

// Is makes a RequestError match ErrInvalidRequest.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }

// Tenant names the client a request comes from, as the inbound adapter authenticated it: an opaque label the
// adapter assigns to each key (never the key itself). Requests of different tenants share nothing that tells
// one about the other's prompts or output: the prefix cache is partitioned by tenant and the event stream
// filtered by it. "" is the one tenant of a server without keys.
type Tenant string

// GenerateRequest is one completion request, already translated from the wire format.
type GenerateRequest struct {
	// ID names the request in logs and events (the HTTP adapter passes its response id); empty: the
	// Generator names it.
	ID string
	// Tenant is the client the request comes from: only this tenant's earlier requests may be reused from
	// the prefix cache (and so count in CachedTokens), and only its subscribers see its events.
	Tenant Tenant
	// Model is the requested model name; empty means the default.
	Model string
	// Exactly one of Prompt (raw completion) and Messages (chat) is set.
	Prompt   string
	Messages []ChatMessage
	Chat     ChatOptions
	// MaxTokens bounds the generated tokens; 0 means up to the context length.
	MaxTokens int
	Sampling  SamplingParams
	// SamplingSet says which of Sampling's knobs the client gave; the others hold the wire API's defaults,
	// which a server may replace with the model's own (SamplingDefaults).
	SamplingSet SamplingKnobs
	// Seed makes sampling reproducible: the output is then a function of the model, the prompt, the
	// parameters and the seed, whatever the block size or the speculation policy does; nil means a fresh seed.
	Seed *uint64
	// Stop strings end generation when they appear in the output (not included in it).
	Stop []string
	// BlockSize overrides the speculative block size (0: the server default; 1: no speculation; any size up
	// to the context length, below or above the drafter's configured one).
	BlockSize int
	// Constraint, when set, restricts the output to a formal language (constrained decoding): JSON, JSON
	// valid under a schema, or tool calls. nil: free text.
	Constraint *Constraint
	// Logprobs asks for each output token's log-probability (TokenLogprob) in the events and the result;
	// TopLogprobs (0..MaxTopLogprobs, only with Logprobs) for that many alternatives at each position.
	Logprobs    bool
	TopLogprobs int
	// CacheBreakpoints are the client's prompt-cache breakpoints (Anthropic's cache_control): indices into
	// Messages, each meaning "the prompt up to the end of this message's turn". The prefix cache makes an
	// entry at each, so that a later request of the same tenant sharing that much of the prompt restores it.
	// At most MaxCacheBreakpoints; only with Messages.
	CacheBreakpoints []int
	// NoCache keeps the request out of the prefix cache: nothing is restored from it or written to it.
	NoCache bool
}

// MaxCacheBreakpoints is the most cache breakpoints a request may mark (Anthropic's limit).
const MaxCacheBreakpoints = 4

// ConstraintKind says what a Constraint restricts the output to.
type ConstraintKind int

const (
	// ConstrainJSONObject: any JSON object (OpenAI's response_format json_object).
	ConstrainJSONObject ConstraintKind = iota + 1
	// ConstrainJSONSchema: a JSON text valid under Constraint.Schema (response_format json_schema).
	ConstrainJSONSchema
	// ConstrainToolCall: nothing but calls of Constraint.Tools in the template's tool-call syntax, each call's
	// arguments valid under its tool's schema (tool_choice "required", a named function, Anthropic's any and tool).
	ConstrainToolCall
	// ConstrainStrictTools: free text, in which every tool call the model starts has arguments valid under its
	// tool's schema (strict tools with tool_choice auto).
	ConstrainStrictTools
)

// Constraint is the language a request's output must belong to. The Generator compiles it and masks the
// target's distribution at every position (speculation stays on and lossless with respect to the masked
// distribution).
type Constraint struct {
	Kind ConstraintKind
	// Param is the request field it came from ("response_format", "tool_choice"…), which errors name.
	Param string
	// Schema is the JSON Schema document of ConstrainJSONSchema.
	Schema []byte
	// Tools are the functions a call may name (ConstrainToolCall, ConstrainStrictTools).
	Tools []ConstraintTool
	// Parallel lets a forced answer hold more than one call.
	Parallel bool
}

// ConstraintTool is one callable function.
type ConstraintTool struct {
	Name string
	// Parameters is the arguments' JSON Schema; nil: the function takes no arguments ({}).
	Parameters []byte
	// Strict makes a schema the constraint cannot express an error; otherwise such a tool's arguments are
	// only held to be a JSON object.
	Strict bool
}

// GenerateEvent is one streamed piece of output.
type GenerateEvent struct {
	// Content is newly final answer text; Reasoning is newly final text inside <think>…</think>.
	Content   string
	Reasoning string
	// Logprobs are the tokens behind this event's text, when the request asked for them: every output token
	// (stop tokens excepted) appears in exactly one event, in order, possibly in an event whose text is
	// still held back (a stop string's prefix, part of a character) or without text of its own.
	Logprobs []TokenLogprob
	// ToolCalls are calls the Generator made as structured calls, complete, in order: a remote provider's
	// (adapters/remote). A local model writes its calls in Content, where the HTTP adapters parse them.
	ToolCalls []ToolCall
}

// ToolCall is one complete function call a Generator reports as such rather than as text.
type ToolCall struct {
	// ID is the call's id as the provider named it ("" lets the HTTP adapter name it).
	ID   string
	Name string
	// Arguments is the arguments object as JSON text, "{}" when there are none.
	Arguments string
}

// SpecUsage is the speculative-decoding account of one request. Rounds, Drafted, Accepted and
// AcceptedPerPosition count draft–verify rounds only, as vLLM's spec_decode counters do; plain decoding steps
// (the adaptive policy falling back, or speculation off) are counted in PlainSteps.
type SpecUsage struct {
	// Rounds is the number of draft–verify rounds (block size ≥ 2), vLLM's num_drafts.
	Rounds int `json:"rounds"`
	// PlainSteps is the number of decoding steps that drafted nothing (block size 1).
	PlainSteps int `json:"plain_steps"`
	// Drafted is the number of draft tokens proposed (sum of block size − 1 over rounds).
	Drafted int `json:"draft_tokens"`
	// Accepted is the number of draft tokens accepted.
	Accepted int `json:"accepted_tokens"`
	// Tau is 1 + Accepted/Rounds, the mean number of tokens a draft–verify round commits (the DFlash
	// acceptance length); 1 when there was no round (every plain step commits one token).
	Tau float64 `json:"tau"`
	// AcceptedPerPosition[i] counts rounds whose draft slot i+1 was accepted. It always has BlockSize−1
	// entries (empty when the request could not speculate).
	AcceptedPerPosition []int `json:"accepted_per_position"`
	// BlockSize is the largest block the request could verify, anchor included (1: no speculation).
	BlockSize int `json:"block_size"`
	// BlockSizes counts the draft–verify rounds per block size used, in increasing block size (a tree round
	// under the block its drafter drafted).
	BlockSizes []BlockSizeUse `json:"block_sizes"`
	// TreeRounds is how many of the draft–verify rounds verified a tree of candidates rather than a chain,
	// and TreeNodes the nodes those trees held, anchors included (Drafted counts their candidates).
	TreeRounds int `json:"tree_rounds,omitempty"`
	TreeNodes  int `json:"tree_nodes,omitempty"`
	// Policy says what chose the block sizes and why; nil only in accounts built by hand.
	Policy *PolicyUsage `json:"policy,omitempty"`
}

// BlockSizeUse is the number of draft–verify rounds that verified blocks of one size.
type BlockSizeUse struct {
	BlockSize int `json:"block_size"`
	Rounds    int `json:"rounds"`
}

// PolicyUsage is the depth decision in force at the end of a request.
type PolicyUsage struct {
	// Mode is "speculative" (drafting blocks) or "plain" (decoding without drafts).
	Mode string `json:"mode"`
	// Reason says why, in words, from the measurements behind the decision.
	Reason string `json:"reason"`
}

// GenerateResult is the account of a finished request.
type GenerateResult struct {
	Model            string
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is how many of the prompt tokens were restored from the prefix cache instead of
	// prefilled (OpenAI's usage.prompt_tokens_details.cached_tokens).
	CachedTokens int
	// CacheWriteTokens is how many prompt tokens were written to the prefix cache up to the request's last
	// cache breakpoint, beyond those restored (Anthropic's cache_creation_input_tokens); 0 without breakpoints.
	CacheWriteTokens int
	// FinishReason is "stop" (stop token or string, or the end of an answer that made tool calls) or
	// "length" (max tokens or context).
	FinishReason string
	// StopSequence is the stop string that ended the output; "" when it ended otherwise.
	StopSequence string
	Spec         SpecUsage
	// Content and Reasoning hold the whole output (also when streamed).
	Content   string
	Reasoning string
	// Logprobs are every output token's log-probability, in order (the events' Logprobs concatenated);
	// non-nil exactly when the request asked for them.
	Logprobs []TokenLogprob
	// ToolCalls are the structured calls of the events, concatenated (see GenerateEvent.ToolCalls).
	ToolCalls []ToolCall
}

// ModelCard describes a served model and what it runs with.
type ModelCard struct {
	ID      string
	Created int64
	OwnedBy string
	// Backend is the compute backend the model runs on ("cpu", "mlx"); "" when not known.
	Backend string
	// Kernels is the CPU backend's kernel mode ("exact", "fast"); "" on a backend without modes.
	Kernels string
	// ContextLength is the most tokens a request may hold, prompt and output together (the model's, or less
	// where the operator capped it); 0: no limit known.
	ContextLength int
	// DefaultMaxTokens is the output limit of a request that sets none; 0: up to the context length.
	DefaultMaxTokens int
	// Speculation is how the model decodes: SpeculationAdaptive, SpeculationFixed or SpeculationOff.
	Speculation string
	// BlockSize is the block size a request that names none decodes with, anchor included (1: no drafts).
	BlockSize int
	// Drafter describes the drafter; nil without one.
	Drafter *DrafterCard
	// Certified is the lossless certificate found beside the model (nil when none).
	Certified *Certification
	// State is ModelLoaded, ModelLoading or ModelNotLoaded on a server that loads models on demand; "" where
	// the one model is always loaded. A card of a model not loaded states only its ID, Aliases and State.
	State string
	// Aliases are other names requests may use for the model.
	Aliases []string
}

// Model states a ModelCard states on a server that loads models on demand.
const (
	ModelLoaded    = "loaded"
	ModelLoading   = "loading"
	ModelNotLoaded = "not loaded"
)

// Speculation modes a ModelCard states.
const (
	// SpeculationAdaptive: the depth policy picks each round's block size, plain decoding included.
	SpeculationAdaptive = "adaptive"
	// SpeculationFixed: every round drafts a block of the default block size.
	SpeculationFixed = "fixed"
	// SpeculationOff: no drafter, or block size 1.
	SpeculationOff = "off"
)

// DrafterCard describes a model's drafter.
type DrafterCard struct {
	// Name is the drafter's directory base name or hub id.
	Name string
	// Generation is the drafter's generation ("DFlash", "DFlash2"); "" when not known.
	Generation string
	// BlockSize is the drafter's configured block size, anchor included: the default block (requests may
	// name other sizes, up to the context length).
	BlockSize int
}

// Generator is the inbound port the HTTP adapter calls. Implementations are safe for concurrent use.
type Generator interface {
	// Models lists the served models.
	Models() []ModelCard
	// Generate runs one request. When emit is non-nil each piece of output is passed to it as soon as it is
	// final; an error from emit stops generation and is returned. Cancelling ctx stops generation within one
	// decoding round.
	Generate(ctx context.Context, req GenerateRequest, emit func(GenerateEvent) error) (GenerateResult, error)
}

// TokenCounter is an optional Generator ability (found by type assertion): the number of prompt tokens a
// request would have, checked as Generate checks it but without generating or waiting for the engine.
type TokenCounter interface {
	CountTokens(ctx context.Context, req GenerateRequest) (int, error)
}
