package ports

// Tokenizer converts between text and token ids. Implementations are safe for concurrent use.
type Tokenizer interface {
	// Encode tokenizes text with the tokenizer's default handling of special tokens (added tokens written in
	// the text are recognised, as Hugging Face's Tokenizer.encode does).
	Encode(text string) ([]Token, error)
	// Decode turns ids into text; skipSpecial drops special tokens. Ids outside the vocabulary are an error.
	Decode(ids []Token, skipSpecial bool) (string, error)
	// NewStreamDecoder returns an incremental decoder for one stream of ids.
	NewStreamDecoder(skipSpecial bool) StreamDecoder
	// TokenID returns the id of a token's exact string form, for example "<|im_end|>".
	TokenID(token string) (Token, bool)
	// VocabSize returns the number of ids (base vocabulary plus added tokens).
	VocabSize() int
}

// StreamDecoder turns a stream of ids into text pieces without ever emitting a partial UTF-8 character and
// without losing bytes. Not safe for concurrent use.
type StreamDecoder interface {
	// Push adds one id and returns the text that became complete (possibly empty).
	Push(id Token) (string, error)
	// Flush returns whatever is still held back (incomplete bytes become U+FFFD, as Hugging Face does).
	Flush() string
}

// Span is the byte range [Start, End) of a text.
type Span struct{ Start, End int }

// PlainEncoder is an optional Tokenizer ability (found by type assertion): encoding where text a client
// wrote is text even when it spells a special token, so that only a chat template's own markup is control
// tokens.
type PlainEncoder interface {
	// SpecialIn returns the first special token written in text ("<|im_end|>"); "" when there is none.
	SpecialIn(text string) string
	// EncodePlain is Encode, except that special tokens written inside the plain spans (sorted, disjoint
	// byte ranges of text) are encoded as the plain text they are. Where the spans hold no special-token
	// text the ids equal Encode's.
	EncodePlain(text string, plain []Span) ([]Token, error)
}

// TokenBytes is an optional Tokenizer ability (found by type assertion): the byte string each id decodes
// to, which constrained decoding walks through its grammar byte by byte.
type TokenBytes interface {
	// TokenBytes returns the bytes id stands for (read-only) and whether it is a special token; ok is false
	// for an id outside the vocabulary or not assigned.
	TokenBytes(id Token) (b []byte, special, ok bool)
}
