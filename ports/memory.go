package ports

// MemoryDemand describes the most one sequence will ask of its sessions, fixed when the request is admitted:
// what a MemoryPricer prices.
type MemoryDemand struct {
	// Positions is the most positions the sequence's sessions hold at once: its prompt, its whole token
	// budget and one verify block past it (a rejected block is trimmed after it was cached).
	Positions int
	// Rows is the most rows of one Forward: its largest prefill pass (a prefill chunk, or the whole prompt
	// unchunked). A verify block (Block rows) and a plain step (1 row) are priced beside it.
	Rows int
	// Block is the verify block size: the rows a verify Forward returns (logits, distributions) and the
	// positions its tape records; 1 for a sequence that does not speculate.
	Block int
	// Speculative says the sequence verifies drafted blocks: its target session returns taps, records a
	// tape and keeps a snapshot for rollback, and it has a draft session beside it.
	Speculative bool
	// TapLayers is how many layers' hidden states the target's Forward returns as taps (the drafter's
	// len(TapLayers())); 0 when the sequence does not speculate.
	TapLayers int
}

// MemoryPricer is an optional ability of a Target and of a Drafter (found by type assertion), used by memory
// admission: the bytes one of its sessions holds at most while it serves a sequence of demand d, besides what
// every session shares (the weights, the backend's runtime). It counts what the backend really keeps for a
// session in the types it keeps them in: caches, recurrent state and the copies a rollback needs (snapshot,
// the pre-block state a tape holds), the tape, the scratch a forward keeps or allocates, and what a Forward or
// Draft returns that the caller holds for a round (logits, distributions, taps). A target prices its session
// (with the taps it produces); a drafter prices its draft session (its context caches and the context rows
// it holds until it next drafts). The answer is an upper bound for the backend's own accounting, never
// negative, and grows with every field of d; it is a pure function of d and the loaded model: cheap (admission
// calls it several times per request), no I/O, safe for concurrent use. Without the ability the caller
// estimates from ModelInfo and says the figures are estimated.
type MemoryPricer interface {
	SessionBytes(d MemoryDemand) int64
}
