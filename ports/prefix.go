package ports

// PrefixState is an opaque, immutable copy of a sequence's state for positions [0, Len()): for a target
// session the attention KV rows and, on hybrid models, every recurrent layer's conv buffer, its position and
// SSM state at Len(); for a draft session the drafter's context cache. It is independent of the session that
// exported it (later Forward, TrimKV, Restore or Close calls do not change it) and may be imported into any
// number of sessions of the same model, from any goroutine, one import at a time or concurrently. Where the
// backend keeps state (host memory, device arrays) it stays; the memory is released once the value is
// unreachable.
type PrefixState interface {
	// Len returns the number of positions the state covers.
	Len() int
	// Bytes returns the memory the state holds (what a cache budget counts).
	Bytes() int64
}

// PrefixExporter is an optional ability of a Session and of a DraftSession: export the state of a prefix of
// the sequence, and start a fresh session from one. The prefix cache finds it by type assertion; a session
// without it simply gets no cache.
type PrefixExporter interface {
	// ExportPrefix returns the state after positions [0, n). A target session with recurrent layers can only
	// export n == Len() (the recurrent state exists only where the session is), with every layer at Len();
	// attention-only sessions and draft sessions accept any 0 < n ≤ Len(). Exporting does not change the
	// session.
	ExportPrefix(n int) (PrefixState, error)
	// ImportPrefix makes an empty session (Len() == 0) hold exactly p: afterwards Len() == p.Len() and a
	// Forward continues bit-identically to the session p was exported from at that point. p must come from a
	// session of the same model (and, for a target session, the same tap layers need not match: taps are
	// not part of the state); anything else is an error and leaves the session empty.
	ImportPrefix(p PrefixState) error
}

// PrefixCacheStats is the prefix cache's account since the server started (counters) and its current size
// (Entries, Bytes), for metrics.
type PrefixCacheStats struct {
	Hits, Misses int64
	// CachedTokens is the sum, over hits, of the prompt tokens restored instead of prefilled.
	CachedTokens int64
	Evictions    int64
	Entries      int
	Bytes        int64
	// Budget is the most Bytes may reach.
	Budget int64
	// The disk tier (zero without one): hits read from disk (also in Hits), its records and their bytes now,
	// and the most those bytes may reach.
	DiskHits    int64
	DiskEntries int
	DiskBytes   int64
	DiskBudget  int64
}
