// Package constrained is constrained decoding over any target session: a Compiler turns a request's
// ports.Constraint (a JSON Schema, any JSON object, forced or strict tool calls) into a grammar.Matcher over
// the model's vocabulary, keeping the matchers of recent constraints in an LRU cache; Wrap decorates the
// decoder's target session so that every logit row it returns is masked by the grammar state its prefix
// reaches.
//
// Constrained decoding composes with speculation without the domain knowing: the wrapped session asks the
// backend for raw logits, masks every returned row with the grammar state reached by the tokens before it
// (the committed ones and the block's own), and computes the greedy token and the distribution from the
// masked row. A drafted token the grammar forbids then never equals the target's choice, so acceptance ends
// there and the bonus token comes from the masked distribution: greedy constrained speculative decoding is
// plain constrained greedy decoding token for token, and sampling is lossless with respect to the masked
// distribution. The drafter is not masked.
//
// Told where the generation's token budget ends, the session also closes the document within it: near the
// end a row allows only the tokens after which the grammar's shortest completion still fits in the tokens
// left (grammar.Matcher.Closing), so an answer cut by max_tokens still parses. A row's mask depends only on
// its grammar state and position, so this too is the same at any block size; Forced tells the caller that
// the budget closed the document (its finish is "length").
package constrained
