package speculative

import (
	"time"

	"github.com/higgs-go/higgs/ports"
)

// FinishReason says why generation ended.
type FinishReason string

const (
	// FinishStop means a stop token was generated (it is the last token of Result.Tokens).
	FinishStop FinishReason = "stop"
	// FinishLength means MaxTokens or ContextLength was reached.
	FinishLength FinishReason = "length"
	// FinishCancelled means the context was cancelled (or emit failed) before another end.
	FinishCancelled FinishReason = "cancelled"
)

// RollbackKind records how a round's state was brought back to the committed position.
type RollbackKind string

const (
	// RollbackNone means every verified position was committed (full accept), so the verify state was kept.
	RollbackNone RollbackKind = "none"
	// RollbackKVTrim means attention KV caches were truncated (attention-only model).
	RollbackKVTrim RollbackKind = "kv-trim"
	// RollbackTapeReplay means KV truncation plus a recurrent tape replay.
	RollbackTapeReplay RollbackKind = "tape-replay"
	// RollbackSnapshotRecompute means KV truncation, recurrent snapshot restore and a re-forward of the
	// committed tokens.
	RollbackSnapshotRecompute RollbackKind = "snapshot-recompute"
)

// Result is the outcome of one generation.
type Result struct {
	// Tokens are the generated tokens, prompt excluded (a final stop token included).
	Tokens []ports.Token
	// Finish says why generation ended; empty when it ended with an error other than cancellation.
	Finish FinishReason
	// Stats account for the generation.
	Stats Stats
}

// Stats account for one generation.
type Stats struct {
	// Rounds holds one entry per decoding round (the first token, sampled from the prefill, is not a round).
	Rounds []RoundStats
	// PromptTokens is the prompt length.
	PromptTokens int
	// PrefillTime is the time of the prefill forward and first-token sampling.
	PrefillTime time.Duration
	// DecodeTime is the time spent in rounds.
	DecodeTime time.Duration
}

// RoundStats account for one decoding round.
type RoundStats struct {
	// Block is what the target verified: [last committed token, d1..d_{bs-1}].
	Block []ports.Token
	// BlockSize is len(Block).
	BlockSize int
	// Accepted is the number of accepted draft tokens (0..BlockSize-1); the bonus token is not counted.
	Accepted int
	// Committed is the number of tokens committed and emitted this round (≤ Accepted+1 after stop or
	// length cuts).
	Committed int
	// DraftTime, VerifyTime and RollbackTime are the measured durations of the round's phases (VerifyTime
	// includes a recurrent snapshot taken before verify; DraftTime includes feeding the drafter context that
	// waited during plain rounds, also in a plain round past PolicyConfig.MaxPendingRounds).
	DraftTime, VerifyTime, RollbackTime time.Duration
	// Rollback says how the state was rolled back.
	Rollback RollbackKind
	// Policy says why this block size was chosen: "fixed", or the adaptive policy's reason ("explore",
	// "best", "probe", "fallback-ar", "length").
	Policy string
}

// NumRounds returns the number of decoding rounds.
func (s Stats) NumRounds() int { return len(s.Rounds) }

// Drafted returns the number of draft tokens verified (sum of BlockSize-1 over rounds).
func (s Stats) Drafted() int {
	n := 0
	for _, r := range s.Rounds {
		n += r.BlockSize - 1
	}
	return n
}

// Accepted returns the number of accepted draft tokens over all rounds.
func (s Stats) Accepted() int {
	n := 0
	for _, r := range s.Rounds {
		n += r.Accepted
	}
	return n
}

// MeanAccepted returns the mean number of accepted draft tokens per round; 0 when there were no rounds.
func (s Stats) MeanAccepted() float64 {
	if len(s.Rounds) == 0 {
		return 0
	}
	return float64(s.Accepted()) / float64(len(s.Rounds))
}

// Tau returns the DFlash acceptance length: the mean of accepted+1 over rounds; 0 when there were no rounds.
func (s Stats) Tau() float64 {
	if len(s.Rounds) == 0 {
		return 0
	}
	return s.MeanAccepted() + 1
}

// AcceptedPerPosition returns, at index i, the number of rounds whose draft slot i+1 was accepted. Its
// length is the largest BlockSize-1 over rounds.
func (s Stats) AcceptedPerPosition() []int {
	width := 0
	for _, r := range s.Rounds {
		width = max(width, r.BlockSize-1)
	}
	out := make([]int, width)
	for _, r := range s.Rounds {
		for i := range r.Accepted {
			out[i]++
		}
	}
	return out
}

// SpecUsage converts the stats into the wire-level account of ports.SpecUsage.
func (s Stats) SpecUsage() ports.SpecUsage {
	return ports.SpecUsage{
		Rounds:              s.NumRounds(),
		Drafted:             s.Drafted(),
		Accepted:            s.Accepted(),
		Tau:                 s.Tau(),
		AcceptedPerPosition: s.AcceptedPerPosition(),
	}
}
