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

// PolicyConfig tunes the adaptive depth policy (Config.Adaptive). The zero value means the defaults.
type PolicyConfig struct {
	// ProbeEvery is the least number of rounds between probes of a block size other than the current choice
	// (default 16). Probing keeps the estimates fresh so the policy recovers after a regime change.
	ProbeEvery int
	// ProbeBudget bounds what probes may lose: a probe runs only while the time probes have cost beyond the
	// current choice's expected rate (a speculative probe while falling back pays a whole draft, a verify of
	// several rows and the drafter's catch-up on the context) is at most this fraction of the decode time so
	// far, in [0, 1) (default 0.02). It is what keeps the adaptive policy from losing to plain decoding when
	// speculation cannot pay.
	ProbeBudget float64
	// Memory, when non-nil, carries the policy's measurements (costs per block size, per-slot acceptance,
	// probe budget) from one generation to the next, so a generation starts from what earlier ones learned
	// instead of exploring again: on a fast target one exploratory speculative round can cost several
	// per cent of a short generation. Share one Memory only between generations of the same target,
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
}

// Config is the per-generation decoding configuration.
type Config struct {
	// BlockSize is the verify block size, anchor included: 1 means plain autoregressive decoding; 2 or more
	// means DFlash blocks, at most the drafter's BlockSize: the decoder cannot see that bound (DraftSession
	// does not expose it), so callers check it; a larger block fails at the first Draft call.
	BlockSize int
	// Adaptive lets the depth policy choose each round's block size (≤ BlockSize), falling back to plain
	// decoding when speculation does not pay.
	Adaptive bool
	// Policy tunes the adaptive policy; ignored unless Adaptive.
	Policy PolicyConfig
	// MaxTokens, when > 0, bounds the number of generated tokens (prompt excluded).
	MaxTokens int
	// ContextLength, when > 0, is the target's context length: prompt plus generated tokens never exceed it,
	// so the session is never asked to hold more positions. Generation then ends with FinishLength.
	ContextLength int
	// StopTokens are stop ids; a stop token is emitted (included in Result.Tokens) and ends generation.
	StopTokens []ports.Token
	// Sampling are the target's sampling parameters; Temperature 0 means greedy.
	Sampling ports.SamplingParams
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
	// Checkpoint, when non-nil, is called during the prefill at each of PrefillStops and at the prompt's end,
	// with the session holding exactly the first n prompt tokens in every layer, before the first token is
	// sampled. An error from it ends the generation.
	Checkpoint func(n int) error
	// SyncDrafter, at a normal finish (stop or length), gives the drafter the context it has not seen yet,
	// so that afterwards the draft session holds as many positions as the target session (for a caller that
	// exports both, such as the prefix cache). It costs one context-only Draft call per pending forward.
	SyncDrafter bool
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("block size %d must be ≥ 1", c.BlockSize))
	}
	if c.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("max tokens %d must be ≥ 0", c.MaxTokens))
	}
	if c.ContextLength < 0 {
		errs = append(errs, fmt.Errorf("context length %d must be ≥ 0", c.ContextLength))
	}
	if c.MaxTokens == 0 && c.ContextLength == 0 {
		errs = append(errs, errors.New("unbounded generation: set max tokens or context length"))
	}
	for i, s := range c.StopTokens {
		if s < 0 {
			errs = append(errs, fmt.Errorf("stop token %d: id %d must be ≥ 0", i, s))
		}
	}
	if err := c.Sampling.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sampling: %w", err))
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
