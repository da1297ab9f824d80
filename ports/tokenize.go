package ports

import "context"

// PromptTokenizer is an optional Generator ability (found by type assertion): the tokens a request's prompt
// becomes, and text back from tokens (/tokenize and /detokenize).
type PromptTokenizer interface {
	// Tokenize returns the ids req's prompt (Prompt, or Messages rendered by the chat template with the
	// generation prompt, as Generate renders them) is prefilled with, and the model's context length.
	// addSpecial false encodes a plain Prompt without the tokenizer's added special tokens (a BOS, for
	// tokenizers that add one); it does not change Messages, whose template writes its own.
	Tokenize(ctx context.Context, req GenerateRequest, addSpecial bool) (Tokenized, error)
	// Detokenize returns the text of ids, special tokens included, for model ("" means the default). An id
	// outside the vocabulary is a *RequestError.
	Detokenize(ctx context.Context, model string, ids []Token) (string, error)
}

// Tokenized is Tokenize's result.
type Tokenized struct {
	Tokens []Token
	// MaxModelLen is the model's context length (0: no limit known).
	MaxModelLen int
}
