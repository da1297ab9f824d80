package speculative

import (
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// RollbackMode says how recurrent layers are brought back to the committed position after a partial accept.
// Attention-only models always roll back by KV truncation, whatever the mode.
type RollbackMode int

const (
	// RollbackAuto lets a small cost model choose per round between tape replay and snapshot + recompute
	// from measured timings (tape replay needs the session to implement ports.TapeReplayer).
	RollbackAuto RollbackMode = iota
	// RollbackReplay forces tape replay; Generate fails with an error wrapping errors.ErrUnsupported when the
	// session cannot replay.
	RollbackReplay
	// RollbackRecompute forces snapshot + restore + re-forward of the committed tokens (the correctness
	// oracle).
	RollbackRecompute
)

// String returns the mode's configuration name: auto, replay or recompute.
func (m RollbackMode) String() string {
	switch m {
	case RollbackAuto:
		return "auto"
	case RollbackReplay:
		return "replay"
	case RollbackRecompute:
		return "recompute"
	}
	return fmt.Sprintf("RollbackMode(%d)", int(m))
}

// Verification says how drafted tokens are verified at temperature > 0. Greedy decoding (temperature 0) always
// takes the longest prefix of drafts equal to the target's argmax, whatever the mode.
type Verification int

const (
	// VerifyResidual is speculative rejection sampling: a draft d drawn from q is accepted with probability
	// min(1, p(d)/q(d)) and the first rejection is corrected from the residual ∝ max(0, p−q). Its numbers come
	// from the Rand's sequential stream, so how many a round consumes depends on the block size and on where
	// the drafts were rejected: the output has the target's distribution, but one seed gives different texts
	// under different block sizes or adaptive-policy decisions.
	VerifyResidual Verification = iota
	// VerifyMatch is sample-and-match: the target's token at sequence position j is drawn by inverse CDF from
	// the target's distribution with that position's own number, ports.PositionRand.Uniform(j); a draft is
	// accepted iff it equals that token, and the first mismatch is replaced by it. The output is exactly what
	// plain sampling with the same numbers produces, whatever the block sizes, the policy's choices or the
	// drafts: a function of (model, prompt, parameters, seed) alone. With point-mass drafts (DFlash's) a draft
	// is accepted with probability p(d), as under VerifyResidual; drafts drawn from a distribution q are
	// accepted with probability Σ p·q rather than Σ min(p, q). The Rand given to New must implement
	// ports.PositionRand.
	VerifyMatch
)

// String returns the mode's configuration name: residual or match.
func (v Verification) String() string {
	switch v {
	case VerifyResidual:
		return "residual"
	case VerifyMatch:
		return "match"
	}
	return fmt.Sprintf("Verification(%d)", int(v))
}

// PolicyConfig tunes the adaptive depth policy (Config.Adaptive). The zero value means the defaults.
type PolicyConfig struct {
	// ProbeEvery is the least number of rounds between probes of a block size other than the current choice
	// (default 16). Probing keeps the estimates fresh so the policy recovers after a regime change.
	ProbeEvery int
	// ProbeBudget bounds what probes may lose: a probe runs only while the time probes have cost beyond the
	// current choice's expected rate (a speculative probe while falling back pays a whole draft, a verify of
	// several rows and the drafter's catch-up on the context) is at most this fraction of the decode time so
	// far, in [0, 1) (default 0.02). It is what keeps the adaptive policy from losing to plain decoding when
	// speculation cannot pay. The one exploring round of the largest block is outside it.
	ProbeBudget float64
	// Memory, when non-nil, carries the policy's measurements (costs per block size, per-slot acceptance per
	// block size, probe budget) from one generation to the next, so a generation starts from what earlier
	// ones learned instead of exploring again: the exploratory speculative round verifies the largest block,
	// which can cost several plain steps, several per cent of a short generation. Share one Memory only between generations of the same target,
	// drafter, backend and sampling regime. Generations may run concurrently; the last to finish is kept.
	Memory *PolicyMemory
	// Decay is the weight of the newest round time in the per-block-size moving averages, in (0, 1]
	// (default 0.2); acceptance counts forget by a factor 1−Decay/2 per round.
	Decay float64
	// MaxPendingRounds bounds how many forwards' target taps (the prefill's and one per plain-decoding round)
	// may wait for the drafter while the policy decodes plainly (default 1024). Past it the oldest are given
	// to the drafter, one per round, so the memory they hold stays bounded on long generations (a row holds
	// the tap layers' hidden states: 80 KB at hidden size 4096 with 5 taps); each such round pays one
	// context-only drafter call, which the next probe would have paid anyway.
	MaxPendingRounds int
	// Batch, when non-nil, prices this generation's blocks in the batched rounds it shares with other
	// sequences (domain/batch): the policy then picks the block size that maximises its tokens per second
	// of a round in which every sequence of the batch verifies a block of that size (one batched forward of
	// all their rows, after one batched draft), so the whole batch's rate, not this sequence's share of a
	// round whose cost the others set; a sequence whose drafts are accepted less than the others' still
	// decodes plainly while they speculate. While Batch reports no estimate (the sequence is alone) the
	// policy prices blocks by this generation's own measurements, as without it.
	Batch BatchCost
}

// BatchCost is the price of a block size in a batched round: one target forward verifies every sequence's
// block and one drafter call drafts for all of them. domain/batch's Member implements it.
type BatchCost interface {
	// RoundCost returns the expected time in nanoseconds of a round in which every sequence of the batch
	// verifies rows rows (rows > 1: after drafting), and how many other sequences share the round; ok is
	// false when there is no estimate. Safe for concurrent use.
	RoundCost(rows int) (ns, others float64, ok bool)
}

// Config is the per-generation decoding configuration.
type Config struct {
	// BlockSize is the verify block size, anchor included: 1 means plain autoregressive decoding; 2 or more
	// means DFlash blocks of any size, below or above the drafter's configured one (the drafter drafts exactly
	// bs slots); each round's block is cut to the tokens left plus the anchor, so the context bounds it.
	BlockSize int
	// Adaptive lets the depth policy choose each round's block size (≤ BlockSize), falling back to plain
	// decoding when speculation does not pay.
	Adaptive bool
	// Policy tunes the adaptive policy; ignored unless Adaptive.
	Policy PolicyConfig
	// Tree turns on tree verification (TreeConfig); the zero value verifies chains only.
	Tree TreeConfig
	// MaxTokens, when > 0, is the number of tokens to generate (prompt excluded) unless a stop token comes
	// first; 0 means as many as the context length leaves. It must fit in that room (TokenBudget).
	MaxTokens int
	// ContextLength, when > 0, is the target's context length: prompt plus generated tokens never exceed it,
	// so the session is never asked to hold more positions. Generation then ends with FinishLength.
	ContextLength int
	// StopTokens are stop ids; a stop token is emitted (included in Result.Tokens) and ends generation.
	StopTokens []ports.Token
	// Sampling are the target's sampling parameters; Temperature 0 means greedy.
	Sampling ports.SamplingParams
	// Verify chooses how drafts are verified when Sampling is not greedy (default VerifyResidual).
	Verify Verification
	// Rollback chooses how recurrent state is rolled back after a partial accept.
	Rollback RollbackMode
	// Observe, when non-nil, is called after each decoding step with its account, once its tokens are
	// committed and emitted, on the goroutine running Generate (a slow observer slows decoding). It may keep
	// rs: nothing in it is modified afterwards.
	Observe func(rs RoundStats)
	// LayerKinds, when non-nil, are the target's layer kinds (ports.ModelInfo.LayerKinds). Without them the
	// decoder asks the session: a Snapshot failing with errors.ErrUnsupported means attention-only.
	LayerKinds []ports.LayerKind
	// PrefillStops lists prompt positions, ascending and each strictly between the positions the session
	// already holds and the prompt's length, where the prefill pauses so that Checkpoint can export state
	// there (a recurrent layer's state exists only where the session is).
	PrefillStops []int
	// PrefillChunk, when > 0, splits the prefill into forwards of at most this many tokens, so that a long
	// prompt's prefill, batched with other sequences' decoding steps (domain/batch), lets their streams keep
	// flowing between its chunks. The output is the same as an unchunked prefill's on backends whose forward
	// does not depend on how the positions are split (the CPU backend's); Checkpoint still sees only
	// PrefillStops and the prompt's end.
	PrefillChunk int
	// Checkpoint, when non-nil, is called during the prefill at each of PrefillStops and at the prompt's end,
	// with the session holding exactly the first n prompt tokens in every layer, before the first token is
	// sampled. An error from it ends the generation.
	Checkpoint func(n int) error
	// SyncDrafter, at a normal finish (stop or length), gives the drafter the context it has not seen yet,
	// so that afterwards the draft session holds as many positions as the target session (for a caller that
	// exports both, such as the prefix cache). It costs one context-only Draft call per pending forward.
	SyncDrafter bool
}

// TokenBudget is the domain's one check of a generation's length: it returns how many tokens a generation
// from a prompt of promptLen tokens may produce — maxTokens, or, when that is 0, all the room contextLength
// leaves — or an error. Negative limits and a generation bounded by neither are errors (as in
// Config.Validate); a prompt that leaves no room, or a maxTokens past the room, is an error wrapping
// ports.ErrContextFull. Generate applies it to its Config; callers call it to refuse a request before
// queueing it, so each problem has one message wherever it is found.
func TokenBudget(promptLen, maxTokens, contextLength int) (int, error) {
	if errs := limitProblems(maxTokens, contextLength); len(errs) > 0 {
		return 0, errors.Join(errs...)
	}
	if contextLength == 0 {
		return maxTokens, nil
	}
	room := contextLength - promptLen
	switch {
	case room <= 0:
		return 0, fmt.Errorf("%w: this model's maximum context length is %d tokens, and the prompt has %d tokens",
			ports.ErrContextFull, contextLength, promptLen)
	case maxTokens > room:
		return 0, fmt.Errorf("%w: max tokens %d is too large: this model's maximum context length is %d tokens and the prompt has %d tokens (at most %d can be generated)",
			ports.ErrContextFull, maxTokens, contextLength, promptLen, room)
	case maxTokens == 0:
		return room, nil
	}
	return maxTokens, nil
}

// limitProblems are the checks of the length limits that need no prompt.
func limitProblems(maxTokens, contextLength int) []error {
	var errs []error
	if maxTokens < 0 {
		errs = append(errs, fmt.Errorf("max tokens %d must be ≥ 1 (or 0: as many as the context length leaves)", maxTokens))
	}
	if contextLength < 0 {
		errs = append(errs, fmt.Errorf("context length %d must be ≥ 0", contextLength))
	}
	if maxTokens == 0 && contextLength == 0 {
		errs = append(errs, errors.New("max tokens is required: the model does not state its context length"))
	}
	return errs
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("block size %d must be ≥ 1", c.BlockSize))
	}
	errs = append(errs, limitProblems(c.MaxTokens, c.ContextLength)...)
	for i, s := range c.StopTokens {
		if s < 0 {
			errs = append(errs, fmt.Errorf("stop token %d: id %d must be ≥ 0", i, s))
		}
	}
	if err := c.Sampling.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sampling: %w", err))
	}
	if c.Verify < VerifyResidual || c.Verify > VerifyMatch {
		errs = append(errs, fmt.Errorf("unknown verification %d", int(c.Verify)))
	}
	if c.Rollback < RollbackAuto || c.Rollback > RollbackRecompute {
		errs = append(errs, fmt.Errorf("unknown rollback mode %d", int(c.Rollback)))
	}
	if c.Policy.ProbeEvery < 0 {
		errs = append(errs, fmt.Errorf("policy probe interval %d must be ≥ 0", c.Policy.ProbeEvery))
	}
	if c.Policy.ProbeBudget < 0 || c.Policy.ProbeBudget >= 1 || c.Policy.ProbeBudget != c.Policy.ProbeBudget {
		errs = append(errs, fmt.Errorf("policy probe budget %v out of range [0, 1)", c.Policy.ProbeBudget))
	}
	if c.Policy.MaxPendingRounds < 0 {
		errs = append(errs, fmt.Errorf("policy max pending rounds %d must be ≥ 0", c.Policy.MaxPendingRounds))
	}
	if c.Policy.Decay < 0 || c.Policy.Decay > 1 || c.Policy.Decay != c.Policy.Decay {
		errs = append(errs, fmt.Errorf("policy decay %v out of range [0, 1]", c.Policy.Decay))
	}
	errs = append(errs, c.Tree.validate()...)
	if c.PrefillChunk < 0 {
		errs = append(errs, fmt.Errorf("prefill chunk %d must be ≥ 0 (0: one forward per prefill stop)", c.PrefillChunk))
	}
	for i, n := range c.PrefillStops {
		if n < 1 || (i > 0 && n <= c.PrefillStops[i-1]) {
			errs = append(errs, fmt.Errorf("prefill stops must be ascending positions ≥ 1, got %v", c.PrefillStops))
			break
		}
	}
	for i, k := range c.LayerKinds {
		if k != ports.LayerAttention && k != ports.LayerRecurrent {
			errs = append(errs, fmt.Errorf("layer %d: unknown kind %d", i, int(k)))
		}
	}
	return errors.Join(errs...)
}
