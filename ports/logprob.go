package ports

// MaxTopLogprobs is the most alternatives a request may ask for at each position (OpenAI's bound for chat's
// top_logprobs).
const MaxTopLogprobs = 20

// TokenLogprob is one generated token with its log-probability under the target's own next-token
// distribution at its position: the natural log of softmax(logits) at temperature 1, before the request's
// sampling transforms (temperature, top-k, top-p, min-p), and after a constraint's mask when the request has
// one (the distribution the decoder verifies against). It does not depend on how the token was produced: by
// plain decoding, as an accepted draft or as a round's bonus or correction token, at any block size.
type TokenLogprob struct {
	Token Token
	// Text is the token's text (U+FFFD where it holds part of a character); Bytes are its exact bytes.
	Text  string
	Bytes []byte
	// Offset is the number of characters (Unicode code points) of output text before this token's text.
	Offset  int
	Logprob float64
	// Top are the most likely tokens at this position, most likely first (lowest id first on ties); tokens a
	// constraint forbids are never listed, so there may be fewer than asked.
	Top []TopLogprob
}

// TopLogprob is one alternative at a position.
type TopLogprob struct {
	Token   Token
	Text    string
	Bytes   []byte
	Logprob float64
}
