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
	// RollbackTreePath means a tree round kept its accepted path (ports.TreeVerifier.KeepPath).
	RollbackTreePath RollbackKind = "tree-path"
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
	// Rounds holds one entry per decoding step (the first token, sampled from the prefill, is not one): the
	// draft–verify rounds (BlockSize ≥ 2) and the plain steps (BlockSize 1) in the order they ran.
	Rounds []RoundStats
	// MaxBlockSize is the largest block the generation could verify (Config.BlockSize, 1 without a drafter):
	// AcceptedPerPosition has MaxBlockSize−1 entries.
	MaxBlockSize int
	// Decision is the depth decision in force at the end: the last one that was not a probe or a
	// budget-shortened block (those are exceptions, not what the policy chose), else the last one.
	Decision Decision
	// PromptTokens is the prompt length.
	PromptTokens int
	// PrefillTime is the time of the prefill forward and first-token sampling.
	PrefillTime time.Duration
	// DecodeTime is the time spent in rounds.
	DecodeTime time.Duration
}

// RoundStats account for one decoding step: a draft–verify round, or a plain step when BlockSize is 1.
type RoundStats struct {
	// Block is what the target verified: [last committed token, d1..d_{bs-1}], or a tree's nodes in order
	// (the anchor first).
	Block []ports.Token
	// BlockSize is len(Block): the rows the target verified.
	BlockSize int
	// Tree is set when the round verified a tree (TreeConfig): Parents[i] is node i's parent (−1 for the
	// anchor), Slots the block the drafter drafted (the tree's depth is at most Slots−1), Path the accepted
	// nodes after the anchor.
	Tree *TreeRound
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
	// "best", "probe", "fallback-ar", "length"); Decision holds the measurements behind it.
	Policy   string
	Decision Decision
}

// TreeRound is a tree round's shape (RoundStats.Tree).
type TreeRound struct {
	Parents []int
	Slots   int
	Path    []int
}

// Drafting reports whether the round drafted (a draft–verify round rather than a plain step).
func (r RoundStats) Drafting() bool { return r.BlockSize > 1 }

// Measuring reports whether the adaptive policy ran the round to measure its block size or tree (a probe, or
// an exploring round) rather than as its choice.
func (r RoundStats) Measuring() bool { return r.Policy == reasonProbe || r.Policy == reasonExplore }

// NumRounds returns the number of decoding steps, draft–verify rounds and plain steps together.
func (s Stats) NumRounds() int { return len(s.Rounds) }

// DraftRounds returns the number of draft–verify rounds (block size ≥ 2), vLLM's num_drafts.
func (s Stats) DraftRounds() int {
	n := 0
	for _, r := range s.Rounds {
		if r.Drafting() {
			n++
		}
	}
	return n
}

// PlainSteps returns the number of plain decoding steps (block size 1: no draft).
func (s Stats) PlainSteps() int { return len(s.Rounds) - s.DraftRounds() }

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

// MeanAccepted returns the mean number of accepted draft tokens per draft–verify round; 0 when nothing was
// drafted.
func (s Stats) MeanAccepted() float64 {
	d := s.DraftRounds()
	if d == 0 {
		return 0
	}
	return float64(s.Accepted()) / float64(d)
}

// Tau returns the DFlash acceptance length, vLLM's mean acceptance length: 1 + accepted / draft–verify
// rounds, the tokens a round commits on average. With no draft–verify round it is 1, what each plain step
// commits (no speculation, no gain), so a value above 1 always means speculation paid in tokens per forward.
func (s Stats) Tau() float64 { return s.MeanAccepted() + 1 }

// AcceptedPerPosition returns, at index i, the number of draft–verify rounds whose draft slot i+1 was
// accepted. Its length is MaxBlockSize−1 whatever the rounds did (zeros where nothing was accepted; empty
// when the generation could not speculate); without MaxBlockSize, the largest BlockSize−1 over rounds.
func (s Stats) AcceptedPerPosition() []int {
	width := s.MaxBlockSize - 1
	if s.MaxBlockSize == 0 {
		for _, r := range s.Rounds {
			width = max(width, r.size()-1)
		}
	}
	out := make([]int, max(width, 0))
	for _, r := range s.Rounds {
		for i := range min(r.Accepted, len(out)) {
			out[i]++
		}
	}
	return out
}

// BlockSizes returns how many draft–verify rounds used each block size (≥ 2), in increasing block size.
func (s Stats) BlockSizes() []ports.BlockSizeUse {
	var counts []int // counts[bs]
	for _, r := range s.Rounds {
		if !r.Drafting() {
			continue
		}
		bs := r.size()
		if bs >= len(counts) {
			counts = append(counts, make([]int, bs+1-len(counts))...)
		}
		counts[bs]++
	}
	out := []ports.BlockSizeUse{}
	for bs, n := range counts {
		if n > 0 {
			out = append(out, ports.BlockSizeUse{BlockSize: bs, Rounds: n})
		}
	}
	return out
}

// size is the round's block size: the block its drafter drafted (for a tree, whose BlockSize counts its
// nodes, Tree.Slots).
func (r RoundStats) size() int {
	if r.Tree != nil {
		return r.Tree.Slots
	}
	return r.BlockSize
}

// Trees returns how many rounds verified a tree and the nodes those trees held.
func (s Stats) Trees() (rounds, nodes int) {
	for _, r := range s.Rounds {
		if r.Tree != nil {
			rounds++
			nodes += r.BlockSize
		}
	}
	return rounds, nodes
}

// SpecUsage converts the stats into the wire-level account of ports.SpecUsage.
func (s Stats) SpecUsage() ports.SpecUsage {
	trees, nodes := s.Trees()
	return ports.SpecUsage{
		TreeRounds:          trees,
		TreeNodes:           nodes,
		Rounds:              s.DraftRounds(),
		PlainSteps:          s.PlainSteps(),
		Drafted:             s.Drafted(),
		Accepted:            s.Accepted(),
		Tau:                 s.Tau(),
		AcceptedPerPosition: s.AcceptedPerPosition(),
		BlockSize:           max(s.MaxBlockSize, 1),
		BlockSizes:          s.BlockSizes(),
		Policy:              &ports.PolicyUsage{Mode: s.Decision.Mode(), Reason: s.Decision.Reason()},
	}
}
