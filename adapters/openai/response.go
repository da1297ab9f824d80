package openai

import (
	"github.com/higgs-go/higgs/ports"
)

// Usage is the token account of a response. Speculative is higgs' extension: the request's speculative
// decoding figures (draft–verify rounds, plain steps, draft and accepted tokens, τ, accepted per draft
// position, block sizes used, and the depth policy's decision with its reason).
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails is OpenAI's breakdown of the prompt: the tokens served from the prefix cache.
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details"`
	Speculative         *ports.SpecUsage    `json:"speculative,omitempty"`
}

// PromptTokensDetails is usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// UsageOf builds the usage object of a finished request.
func UsageOf(res ports.GenerateResult) *Usage {
	spec := res.Spec
	// Always arrays, never null: clients index them without checking.
	if spec.AcceptedPerPosition == nil {
		spec.AcceptedPerPosition = []int{}
	}
	if spec.BlockSizes == nil {
		spec.BlockSizes = []ports.BlockSizeUse{}
	}
	return &Usage{PromptTokens: res.PromptTokens, CompletionTokens: res.CompletionTokens,
		TotalTokens: res.PromptTokens + res.CompletionTokens, PromptTokensDetails: PromptTokensDetails{CachedTokens: res.CachedTokens},
		Speculative: &spec}
}

// ChatCompletion is a non-streamed /v1/chat/completions response.
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage"`
}

// ChatChoice is one choice of a ChatCompletion.
type ChatChoice struct {
	Index   int         `json:"index"`
	Message ChatMessage `json:"message"`
	// Logprobs is null unless the request asked for logprobs.
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

// ChatMessage is the assistant's answer; ReasoningContent carries the text inside <think>…</think> (the
// field name vLLM and DeepSeek use).
type ChatMessage struct {
	Role string `json:"role"`
	// Content is null only when the message is tool calls and nothing else, as in OpenAI's responses.
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is a function call the model made. Index is set in streamed deltas only.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments as a string of JSON.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatChunk is one streamed /v1/chat/completions event.
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage,omitempty"`
}

// ChatChunkChoice is a choice of a ChatChunk.
type ChatChunkChoice struct {
	Index int       `json:"index"`
	Delta ChatDelta `json:"delta"`
	// Logprobs are the tokens behind this chunk (null unless asked for, and in chunks without any).
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// ChatDelta is the new text of a chunk.
type ChatDelta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// Completion is a /v1/completions response or streamed event (Object "text_completion" in both).
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// CompletionChoice is a choice of a Completion.
type CompletionChoice struct {
	Index int    `json:"index"`
	Text  string `json:"text"`
	// Logprobs is null unless the request asked for logprobs.
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// ModelList is the /v1/models response.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// Model is a /v1/models entry: OpenAI's four fields, then what the model runs with (fields beyond
// OpenAI's are left out where the card does not know them).
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Backend ("cpu", "mlx") and Kernels (the CPU backend's "exact" or "fast").
	Backend string `json:"backend,omitempty"`
	Kernels string `json:"kernels,omitempty"`
	// ContextLength is the most tokens a request may hold, prompt and output; MaxModelLen is the same
	// number under vLLM's name, which clients read.
	ContextLength int `json:"context_length,omitempty"`
	MaxModelLen   int `json:"max_model_len,omitempty"`
	// DefaultMaxTokens is the output limit of a request without max_tokens (absent: up to the context).
	DefaultMaxTokens int `json:"default_max_tokens,omitempty"`
	// Speculation is how the model decodes; Drafter is null without a drafter.
	Speculation *ModelSpeculation `json:"speculation,omitempty"`
	Drafter     *ModelDrafter     `json:"drafter,omitempty"`
	// Certified summarises the lossless certificate beside the model (absent when there is none).
	Certified *ModelCertified `json:"certified,omitempty"`
	// State is "loaded", "loading" or "not loaded" on a server that loads models on demand (absent with one
	// model, always loaded); Aliases are other names a request may use.
	State   string   `json:"state,omitempty"`
	Aliases []string `json:"aliases,omitempty"`
}

// ModelSpeculation is a model entry's decoding mode: "adaptive" (the depth policy picks each round's block
// size, plain decoding included), "fixed" or "off", and the default block size (anchor included).
type ModelSpeculation struct {
	Mode      string `json:"mode"`
	BlockSize int    `json:"block_size"`
}

// ModelDrafter is a model entry's drafter.
type ModelDrafter struct {
	Name       string `json:"name"`
	Generation string `json:"generation,omitempty"`
	BlockSize  int    `json:"block_size"`
}

// ModelOf translates a model card.
func ModelOf(c ports.ModelCard) Model {
	m := Model{ID: c.ID, Object: "model", Created: c.Created, OwnedBy: c.OwnedBy, Backend: c.Backend, Kernels: c.Kernels,
		ContextLength: c.ContextLength, MaxModelLen: c.ContextLength, DefaultMaxTokens: c.DefaultMaxTokens,
		Certified: certifiedOf(c.Certified), State: c.State, Aliases: c.Aliases}
	if c.Speculation != "" {
		m.Speculation = &ModelSpeculation{Mode: c.Speculation, BlockSize: c.BlockSize}
	}
	if d := c.Drafter; d != nil {
		m.Drafter = &ModelDrafter{Name: d.Name, Generation: d.Generation, BlockSize: d.BlockSize}
	}
	return m
}

// ChatCompletionOf builds the non-streamed chat response; calls are the tool calls found in the answer
// (res.Content is then the answer without them).
func ChatCompletionOf(id string, created int64, res ports.GenerateResult, calls []ToolCall) ChatCompletion {
	msg := ChatMessage{Role: "assistant", ToolCalls: calls}
	if c := res.Content; c != "" || len(calls) == 0 {
		msg.Content = &c
	}
	if res.Reasoning != "" {
		r := res.Reasoning
		msg.ReasoningContent = &r
	}
	return ChatCompletion{ID: id, Object: "chat.completion", Created: created, Model: res.Model,
		Choices: []ChatChoice{{Index: 0, Message: msg, Logprobs: chatLogprobsOf(res.Logprobs),
			FinishReason: toolFinish(res.FinishReason, len(calls) > 0)}},
		Usage: UsageOf(res)}
}

// CompletionOf builds the non-streamed completion response.
func CompletionOf(id string, created int64, res ports.GenerateResult) Completion {
	fr := res.FinishReason
	return Completion{ID: id, Object: "text_completion", Created: created, Model: res.Model,
		Choices: []CompletionChoice{{Index: 0, Text: res.Content, Logprobs: completionLogprobsOf(res.Logprobs), FinishReason: &fr}},
		Usage:   UsageOf(res)}
}

// chatDeltaChunk is a streamed chat chunk carrying ev (role set on the first chunk only).
func chatDeltaChunk(id string, created int64, model string, ev ports.GenerateEvent, role string) ChatChunk {
	d := ChatDelta{Role: role}
	if ev.Content != "" || role != "" {
		c := ev.Content
		d.Content = &c
	}
	if ev.Reasoning != "" {
		r := ev.Reasoning
		d.ReasoningContent = &r
	}
	var lp *ChatLogprobs
	if len(ev.Logprobs) > 0 {
		lp = chatLogprobsOf(ev.Logprobs)
	}
	return ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
		Choices: []ChatChunkChoice{{Index: 0, Delta: d, Logprobs: lp}}}
}

// chatToolCallsChunk is a streamed chat chunk carrying complete tool calls.
func chatToolCallsChunk(id string, created int64, model string, calls []ToolCall) ChatChunk {
	return ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
		Choices: []ChatChunkChoice{{Index: 0, Delta: ChatDelta{ToolCalls: calls}}}}
}

func chatFinishChunk(id string, created int64, model, finish string) ChatChunk {
	return ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
		Choices: []ChatChunkChoice{{Index: 0, FinishReason: &finish}}}
}

func chatUsageChunk(id string, created int64, res ports.GenerateResult) ChatChunk {
	return ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: res.Model,
		Choices: []ChatChunkChoice{}, Usage: UsageOf(res)}
}

func completionTextChunk(id string, created int64, model, text string, finish *string) Completion {
	return Completion{ID: id, Object: "text_completion", Created: created, Model: model,
		Choices: []CompletionChoice{{Index: 0, Text: text, FinishReason: finish}}}
}

func completionUsageChunk(id string, created int64, res ports.GenerateResult) Completion {
	return Completion{ID: id, Object: "text_completion", Created: created, Model: res.Model,
		Choices: []CompletionChoice{}, Usage: UsageOf(res)}
}
