package ports

// Rand is a seeded source of uniform numbers. Not safe for concurrent use; each generation owns one.
type Rand interface {
	// Float64 returns a uniform number in [0, 1), the next of the source's stream.
	Float64() float64
}

// PositionRand is an optional Rand ability: randomness keyed by absolute sequence position (a counter-based
// generator). Uniform(pos) is a pure function of the source's seed and pos, whatever was drawn before and in
// whatever order, so a sampler that takes the token at position pos with Uniform(pos) picks the same token
// however the work was split into blocks, rounds or batches. It is what reproducible seeded sampling rests
// on (speculative.VerifyMatch). Uniform does not advance the Float64 stream; implementations are safe for
// concurrent calls of Uniform.
type PositionRand interface {
	Rand
	// Uniform returns the uniform number in [0, 1) of sequence position pos (≥ 0; the index of the sampled
	// token in prompt + output).
	Uniform(pos int) float64
}
