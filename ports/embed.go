package ports

import "context"

// Embedder is an optional Target ability (found by type assertion): the hidden state a sequence ends in,
// which an embedding is pooled from (last-token pooling, as Qwen3-Embedding pools).
type Embedder interface {
	// LastHidden runs tokens (1 ≤ len ≤ ContextLength, every id inside the vocabulary) through the model
	// from an empty state and returns the residual stream of the last position after the model's final
	// norm: the row the LM head would read, HiddenSize values, not normalised. The slice is the caller's.
	// It keeps no state between calls and is safe for concurrent use, as Target is. A sequence longer than
	// the context is ErrContextFull; an empty one or an id outside the vocabulary is an error naming it.
	// ctx is checked between layers.
	LastHidden(ctx context.Context, tokens []Token) ([]float32, error)
}

// TextEmbedder is an optional Generator ability (found by type assertion): embeddings of texts or token
// sequences (POST /v1/embeddings).
type TextEmbedder interface {
	// Embed returns one L2-normalised embedding per input, in order. Problems with the request are
	// *RequestError values naming the field (input, dimensions, model); a model that cannot embed is an
	// error wrapping errors.ErrUnsupported. It waits in the same queue as generations (ErrBusy when full).
	Embed(ctx context.Context, req EmbedRequest) (EmbedResult, error)
}

// EmbedRequest is one embeddings request, translated from the wire format.
type EmbedRequest struct {
	// ID names the request in logs; empty: the embedder names it.
	ID     string
	Tenant Tenant
	// Model is the requested model name; empty means the default.
	Model string
	// Inputs are embedded one by one, in order (at least one).
	Inputs []EmbedInput
	// Dimensions, when > 0, truncates each embedding to its first Dimensions values and normalises it
	// again (Matryoshka representations); only models trained for it accept it.
	Dimensions int
}

// EmbedInput is one text, or one sequence of token ids when Tokens is non-nil (ids are used as given).
type EmbedInput struct {
	Text   string
	Tokens []Token
}

// EmbedResult is what Embed returns.
type EmbedResult struct {
	// Model is the served model's name.
	Model string
	// Embeddings holds one vector per input, in order; each is the caller's.
	Embeddings [][]float32
	// PromptTokens counts the tokens run through the model, every input's together (the end-of-text token
	// appended to each included).
	PromptTokens int
}
