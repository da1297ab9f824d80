package generation

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// Engine is what generations run on: a target, its optional drafter and the defaults requests inherit. The
// zero Policies field means every adaptive request starts its policy afresh.
type Engine struct {
	Target  ports.Target
	Drafter ports.Drafter // nil: speculation off
	// EOS are end-of-sequence ids beside the target's own (ModelInfo.EOSTokens), e.g. generation_config.json's.
	EOS []ports.Token
	// BlockSize is the block size a request that names none decodes with (anchor included): 0 means the
	// drafter's configured block size, 1 plain decoding.
	BlockSize int
	// Policies, when set, carries the adaptive policy's measurements from request to request.
	Policies *Policies
	// ContextLength, when > 0, caps the target's context length (an operator's --context-length).
	ContextLength int
	// Tree is the tree verification a speculative request runs with (the zero value: chains only; a Budget
	// of TreeAuto: trees up to the request's block size under the adaptive policy, chains without it). The
	// decoder uses it only where the backend's sessions can verify trees (speculative.TreeConfig).
	Tree speculative.TreeConfig
}

// TreeAuto as Engine.Tree.Budget lets the adaptive policy weigh trees of up to the request's block size
// against chains, and keeps a request without the policy (a fixed block) on chains.
const TreeAuto = -1

// Check reports a configuration the engine cannot run (a default block size without a drafter, or past the
// context length).
func (e *Engine) Check() error {
	if e.Target == nil {
		return errors.New("no target model")
	}
	if e.BlockSize < 0 {
		return fmt.Errorf("block size %d must be ≥ 0", e.BlockSize)
	}
	return BlockSizeProblem(e.BlockSize, e.MaxBlockSize(), e.Drafter != nil)
}

// contextLength is the target's context length under the engine's cap (0: the model states none).
func (e *Engine) contextLength() int {
	return CappedContextLength(e.Target.Info().ContextLength, e.ContextLength)
}

// CappedContextLength is a model's own context length (0: none stated) under an operator's cap (0: none):
// the cap where it is lower or the model states none (higgsd doctor asks it before loading).
func CappedContextLength(own, limit int) int {
	if limit > 0 && (own == 0 || limit < own) {
		return limit
	}
	return own
}

// MaxBlockSize is the largest block size a request may name: the context length with a drafter (a drafter
// drafts any block size, as its authors run it; its configured size is only the default), 0 when the model
// states no context length (a request's max_tokens bounds it then), 1 without a drafter.
func (e *Engine) MaxBlockSize() int {
	if e.Drafter == nil {
		return 1
	}
	return e.contextLength()
}

// DrafterBlockSize is the drafter's configured block size, the default block (1 without a drafter).
func (e *Engine) DrafterBlockSize() int {
	if e.Drafter == nil {
		return 1
	}
	return e.Drafter.BlockSize()
}

// DefaultBlockSize is the block size of a request that names none.
func (e *Engine) DefaultBlockSize() int {
	if e.BlockSize == 0 {
		return e.DrafterBlockSize()
	}
	return e.BlockSize
}

// StopTokens are the ids that end a generation: the target's EOS ids and the engine's, once each.
func (e *Engine) StopTokens() []ports.Token {
	var out []ports.Token
	for _, t := range slices.Concat(e.EOS, e.Target.Info().EOSTokens) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// BlockSizeProblem is the one message for a block size the loaded models cannot decode with (higgsd doctor
// asks it before loading): speculation without a drafter, or a block longer than the context (maxBlock; 0: no
// bound).
func BlockSizeProblem(bs, maxBlock int, drafter bool) error {
	switch {
	case bs > 1 && !drafter:
		return fmt.Errorf("block_size %d needs speculative decoding, which needs a drafter, and none is loaded", bs)
	case maxBlock > 0 && bs > maxBlock:
		return fmt.Errorf("block_size %d exceeds this model's context length %d", bs, maxBlock)
	}
	return nil
}

// Request is one generation's knobs, as a client or the harness states them.
type Request struct {
	// Prompt are the prompt ids; PromptParam names them in errors ("prompt" when empty).
	Prompt      []ports.Token
	PromptParam string
	// MaxTokens bounds the generated tokens; 0 means as many as the context holds.
	MaxTokens int
	// BlockSize is the block size (anchor included): 0 means the engine's default, 1 plain decoding.
	BlockSize int
	// Adaptive lets the depth policy pick each round's block size (≤ the block size).
	Adaptive bool
	// Tree, when non-nil, replaces the engine's tree verification for this request (a zero Budget: chains
	// only).
	Tree *speculative.TreeConfig
	// Sampling are the target's sampling parameters (Temperature 0: greedy); Seed seeds them.
	Sampling ports.SamplingParams
	Seed     uint64
	// Verify is how sampled drafts are verified (VerifyMatch makes the output a function of the seed alone).
	Verify speculative.Verification
	// StopIDs are extra stop ids; NoEOS drops the model's EOS ids (only StopIDs stop generation).
	StopIDs []ports.Token
	NoEOS   bool
	// Rollback forces a recurrent rollback strategy (default: the domain's cost model).
	Rollback speculative.RollbackMode
	// PolicyMemory, when set, is the adaptive policy's memory for this request (else the engine's Policies).
	PolicyMemory *speculative.PolicyMemory
	// Constraint, when set, holds the output to a grammar (constrained decoding).
	Constraint *grammar.Matcher
	// Logprobs asks for each generated token's log-probability under the target (RunOptions.EmitLogprobs),
	// with TopLogprobs alternatives (0..ports.MaxTopLogprobs) at each position.
	Logprobs    bool
	TopLogprobs int
}

// Plan is a checked request, ready to run.
type Plan struct {
	Prompt []ports.Token
	// Config is the decoder's configuration; Run adds the prefix cache's and the batch's settings.
	Config     speculative.Config
	Seed       uint64
	Constraint *grammar.Matcher
	// Logprobs: Run reports each generated token's log-probability and TopLogprobs alternatives.
	Logprobs    bool
	TopLogprobs int
}

// Plan checks req against the engine, reporting every problem at once as *ports.RequestError values that
// name the parameter at fault, and returns what Run needs.
func (e *Engine) Plan(req Request) (Plan, error) {
	info := e.Target.Info()
	info.ContextLength = e.contextLength()
	param := req.PromptParam
	if param == "" {
		param = "prompt"
	}
	var errs []error
	if len(req.Prompt) == 0 {
		errs = append(errs, invalid(param, "the prompt is empty"))
	}
	// A tokenizer may know more ids than the model embeds (added tokens past the embedding table); a prompt
	// that uses one is refused here with its reason rather than failing inside the forward.
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= info.VocabSize {
			errs = append(errs, invalid(param, "the prompt's token id %d (position %d) is outside this model's vocabulary of %d",
				t, i, info.VocabSize))
			break
		}
	}
	// Whether the prompt and its budget fit is the decoder's own invariant (speculative.TokenBudget), asked
	// here so that a request that cannot run is refused before it queues or opens sessions.
	if req.MaxTokens < 0 {
		errs = append(errs, invalid("max_tokens", "max_tokens %d must be ≥ 0", req.MaxTokens))
	} else if len(req.Prompt) > 0 {
		if _, err := speculative.TokenBudget(len(req.Prompt), req.MaxTokens, info.ContextLength); err != nil {
			p := "max_tokens"
			if info.ContextLength > 0 && len(req.Prompt) >= info.ContextLength {
				p = param
			}
			errs = append(errs, invalid(p, "%v", err))
		}
	}
	for i, t := range req.StopIDs {
		if t < 0 || int(t) >= info.VocabSize {
			errs = append(errs, invalid("stop", "stop id %d (stop[%d]) is outside this model's vocabulary of %d", t, i, info.VocabSize))
		}
	}
	if err := req.Sampling.Validate(); err != nil {
		errs = append(errs, invalid("", "%v", err))
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > ports.MaxTopLogprobs {
		errs = append(errs, invalid("top_logprobs", "top_logprobs must be between 0 and %d, not %d", ports.MaxTopLogprobs, req.TopLogprobs))
	} else if req.TopLogprobs > 0 && !req.Logprobs {
		errs = append(errs, invalid("top_logprobs", "top_logprobs needs logprobs"))
	}
	bs := req.BlockSize
	switch {
	case bs < 0:
		errs = append(errs, invalid("block_size", "block_size %d must be ≥ 1", bs))
	case bs == 0:
		bs = e.DefaultBlockSize()
	default:
		// Without a stated context length the request's max_tokens bounds the block: a round never verifies
		// more than the tokens left, plus the anchor.
		maxBlock := e.MaxBlockSize()
		if maxBlock == 0 && req.MaxTokens > 0 {
			maxBlock = req.MaxTokens + 1
		}
		if err := BlockSizeProblem(bs, maxBlock, e.Drafter != nil); err != nil {
			errs = append(errs, invalid("block_size", "%v", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Plan{}, err
	}
	stops := slices.Clone(req.StopIDs)
	if !req.NoEOS {
		for _, t := range e.StopTokens() {
			if !slices.Contains(stops, t) {
				stops = append(stops, t)
			}
		}
	}
	cfg := speculative.Config{
		BlockSize:     bs,
		Adaptive:      req.Adaptive && bs > 1,
		MaxTokens:     req.MaxTokens,
		ContextLength: info.ContextLength,
		StopTokens:    stops,
		Sampling:      req.Sampling,
		Verify:        req.Verify,
		Rollback:      req.Rollback,
		LayerKinds:    info.LayerKinds,
	}
	if bs > 1 {
		cfg.Tree = e.Tree
		if req.Tree != nil {
			cfg.Tree = *req.Tree
		}
		if cfg.Tree.Budget == TreeAuto {
			cfg.Tree.Budget = 0
			if cfg.Adaptive {
				cfg.Tree.Budget = bs
			}
		}
	}
	if cfg.Adaptive {
		cfg.Policy.Memory = req.PolicyMemory
		if cfg.Policy.Memory == nil && e.Policies != nil {
			cfg.Policy.Memory = e.Policies.Memory(bs, req.Sampling.Greedy())
		}
	}
	if err := cfg.Validate(); err != nil {
		return Plan{}, invalid("", "%v", err)
	}
	return Plan{Prompt: req.Prompt, Config: cfg, Seed: req.Seed, Constraint: req.Constraint,
		Logprobs: req.Logprobs, TopLogprobs: req.TopLogprobs}, nil
}

// invalid is a problem with the request's param ("" when no single field is at fault).
func invalid(param, format string, args ...any) error {
	return &ports.RequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// Policies carries the adaptive depth policy's measurements from request to request (one memory per block
// size and sampling regime, as speculative.PolicyConfig.Memory requires), so short requests do not pay for
// exploring block sizes afresh. The zero value is ready; it is safe for concurrent use.
type Policies struct{ m sync.Map }

// policyKey names one adaptive-policy memory: the largest block size and whether decoding is greedy.
type policyKey struct {
	blockSize int
	greedy    bool
}

// Memory returns the shared memory for requests decoding with block size bs in this sampling regime.
func (p *Policies) Memory(bs int, greedy bool) *speculative.PolicyMemory {
	m, _ := p.m.LoadOrStore(policyKey{bs, greedy}, speculative.NewPolicyMemory())
	return m.(*speculative.PolicyMemory)
}
