package app

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// ServeConfig tunes the Serve use case.
type ServeConfig struct {
	// ServedModelName overrides the model id clients use; "" means the loaded model's name.
	ServedModelName string
	// BlockSize is the default speculative block size (anchor included): 0 means the drafter's trained block
	// size, 1 turns speculation off. Requests may lower or raise it up to the drafter's block size.
	BlockSize int
	// Adaptive lets the depth policy pick each round's block size (≤ the request's block size).
	Adaptive bool
	// MaxConcurrency is the batch size: the number of generations decoded together, each round's drafts
	// and verifies of all of them run as one batched drafter call and one batched target forward
	// (domain/batch). More requests wait in the queue.
	MaxConcurrency int
	// BatchWait bounds how long a round waits for a generation that has not submitted its next call (one
	// busy writing to a slow client); 0 means batch.DefaultMaxWait.
	BatchWait time.Duration
	// PrefillChunk, when > 0, splits each prompt's prefill into forwards of at most this many tokens, so the
	// streams batched beside a new request keep flowing while it prefills.
	PrefillChunk int
	// MemoryBudget is the bytes of KV cache and state the running requests may reserve together (memory
	// admission); 0 means half the machine's memory less the prefix cache's budget.
	MemoryBudget int64
	// QueueSize is the number of requests that may wait for the engine; one more is refused with
	// ports.ErrBusy.
	QueueSize int
	// SpecialTokensInContent encodes special-token text in user, system and tool message content as control
	// tokens (the old behaviour). By default that content is plain text: only the template's own markup is
	// special, so a client cannot close its turn and forge a system turn by typing <|im_end|><|im_start|>.
	SpecialTokensInContent bool
	// PrefixCacheBytes is the prefix cache's byte budget; 0 turns the cache off.
	PrefixCacheBytes int64
	// PrefixCacheEvery is the interval, in prompt tokens, of the cache's boundaries inside a prompt (0: only
	// at the prompt's end and the generation's end).
	PrefixCacheEvery int
}

// Validate reports every problem at once.
func (c ServeConfig) Validate() error {
	var errs []error
	if c.BlockSize < 0 {
		errs = append(errs, fmt.Errorf("block size %d must be ≥ 0", c.BlockSize))
	}
	if c.MaxConcurrency < 1 {
		errs = append(errs, fmt.Errorf("max concurrency %d must be ≥ 1", c.MaxConcurrency))
	}
	if c.QueueSize < 0 {
		errs = append(errs, fmt.Errorf("queue size %d must be ≥ 0", c.QueueSize))
	}
	if c.BatchWait < 0 {
		errs = append(errs, fmt.Errorf("batch wait %v must be ≥ 0", c.BatchWait))
	}
	if c.PrefillChunk < 0 {
		errs = append(errs, fmt.Errorf("prefill chunk %d tokens must be ≥ 0", c.PrefillChunk))
	}
	if c.MemoryBudget < 0 {
		errs = append(errs, fmt.Errorf("memory budget %d bytes must be ≥ 0", c.MemoryBudget))
	}
	if c.PrefixCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("prefix cache budget %d bytes must be ≥ 0", c.PrefixCacheBytes))
	}
	if c.PrefixCacheEvery < 0 {
		errs = append(errs, fmt.Errorf("prefix cache interval %d tokens must be ≥ 0", c.PrefixCacheEvery))
	}
	return errors.Join(errs...)
}

// Engine is what Serve generates with: a loaded target, its optional drafter, tokenizer and chat template.
type Engine struct {
	Target    ports.Target
	Drafter   ports.Drafter // nil: speculation off
	Tokenizer ports.Tokenizer
	Template  ports.ChatTemplate // nil: chat requests are refused
	EOS       []ports.Token
	Name      string
	// Created is the model card's creation time (Unix seconds).
	Created int64
	// Memory is what one sequence holds besides the weights (memory admission); nil: estimated from the
	// target's ModelInfo.
	Memory *MemoryFootprint
}

// EngineFromModels adapts LoadModels' result.
func EngineFromModels(m *Models) Engine {
	e := Engine{Target: m.Target, Drafter: m.Drafter, Tokenizer: m.Tokenizer, Template: m.Template,
		EOS: m.EOS, Name: m.Name, Created: time.Now().Unix()}
	var taps []int
	if m.Drafter != nil {
		taps = m.Drafter.TapLayers()
	}
	if f, err := ReadMemoryFootprint(m.TargetDir, m.DrafterDir, taps); err == nil {
		e.Memory = &f
	}
	return e
}

// loaded is an Engine checked and prepared for serving.
type loaded struct {
	Engine
	name       string
	info       ports.ModelInfo
	blockSize  int  // default block size after resolving 0
	maxBlock   int  // the drafter's block size, 1 without drafter
	thinkSplit bool // the tokenizer knows <think> and </think>
	eos        map[ports.Token]bool
	// prefix is the prefix cache of this engine's states (nil: off).
	prefix *prefixcache.Cache
	// policies carries the adaptive depth policy's measurements from request to request (one memory per
	// block size and sampling regime, as speculative.PolicyConfig.Memory requires), so short requests do not
	// pay for exploring block sizes afresh. Keyed by policyKey.
	policies sync.Map
	// sched forms the batched rounds of every running generation; budget and footprint are memory
	// admission's.
	sched     *batch.Scheduler
	budget    *batch.Budget
	footprint MemoryFootprint
	// vocab is the vocabulary as byte strings, built for the first constrained request.
	vocab vocabCache
}

// policyKey names one adaptive-policy memory: the largest block size and whether decoding is greedy.
type policyKey struct {
	blockSize int
	greedy    bool
}

// policyMemory returns the shared memory for requests decoding with block size bs in this sampling regime.
func (l *loaded) policyMemory(bs int, greedy bool) *speculative.PolicyMemory {
	m, _ := l.policies.LoadOrStore(policyKey{bs, greedy}, speculative.NewPolicyMemory())
	return m.(*speculative.PolicyMemory)
}

// Serve is the serving use case: it implements ports.Generator over the speculative decoder. It is safe for
// concurrent use. Until SetEngine is called it reports ports.ErrNotReady.
type Serve struct {
	cfg    ServeConfig
	log    zerolog.Logger
	clock  ports.Clock
	gate   *gate
	engine atomic.Pointer[loaded]
	// seed returns a fresh seed for requests without one.
	seed func() uint64
	// events feeds live views (Events); ids numbers requests that come without an ID.
	events *hub
	ids    atomic.Uint64
	// metrics receives batch sizes and queue waits (SetMetrics).
	metrics atomic.Pointer[metricsBox]
}

var (
	_ ports.Generator    = (*Serve)(nil)
	_ ports.TokenCounter = (*Serve)(nil)
)

// NewServe returns a Serve that is not ready until SetEngine.
func NewServe(cfg ServeConfig, log zerolog.Logger) (*Serve, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("serve config: %w", err)
	}
	s := &Serve{cfg: cfg, log: log, clock: systemClock{}, gate: newGate(cfg.MaxConcurrency, cfg.QueueSize),
		seed: rand.Uint64}
	s.events = newHub(s.helloEvent)
	s.gate.changed = s.publishQueue
	return s, nil
}

// systemClock is the real ports.Clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

var _ batch.Clock = systemClock{}

// SetEngine checks e and makes Serve ready to generate with it.
func (s *Serve) SetEngine(e Engine) error {
	var errs []error
	if e.Target == nil {
		errs = append(errs, errors.New("no target model"))
	}
	if e.Tokenizer == nil {
		errs = append(errs, errors.New("the model has no tokenizer (tokenizer.json); higgsd needs one to serve text"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	l := &loaded{Engine: e, name: e.Name, info: e.Target.Info(), maxBlock: 1, eos: map[ports.Token]bool{}}
	if s.cfg.ServedModelName != "" {
		l.name = s.cfg.ServedModelName
	}
	if l.name == "" {
		l.name = "default"
	}
	if e.Drafter != nil {
		l.maxBlock = e.Drafter.BlockSize()
	}
	switch bs := s.cfg.BlockSize; {
	case bs == 0:
		l.blockSize = l.maxBlock
	case bs > l.maxBlock && e.Drafter == nil:
		return fmt.Errorf("serve: block size %d needs a drafter, and none is loaded", bs)
	case bs > l.maxBlock:
		return fmt.Errorf("serve: block size %d exceeds the drafter's block size %d", bs, l.maxBlock)
	default:
		l.blockSize = bs
	}
	cache, err := newPrefixCache(s.cfg, s.clock)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	l.prefix = cache
	if err := s.newScheduler(l); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	for _, t := range e.EOS {
		l.eos[t] = true
	}
	for _, t := range l.info.EOSTokens {
		l.eos[t] = true
	}
	_, open := e.Tokenizer.TokenID(thinkOpen)
	_, closeOK := e.Tokenizer.TokenID(thinkClose)
	l.thinkSplit = open && closeOK
	s.engine.Store(l)
	batchedFwd, batchedDraft := l.sched.Batching()
	s.log.Info().Str("model", l.name).Int("block_size", l.blockSize).Bool("drafter", e.Drafter != nil).
		Int("context_length", l.info.ContextLength).Bool("reasoning_split", l.thinkSplit).
		Int64("prefix_cache_bytes", s.cfg.PrefixCacheBytes).Int("max_batch", s.cfg.MaxConcurrency).
		Bool("batched_forward", batchedFwd).Bool("batched_draft", batchedDraft).
		Int64("memory_budget_bytes", l.budget.Total()).Bool("memory_estimated", l.footprint.Estimated).Msg("engine ready")
	return nil
}

// Ready reports whether an engine is loaded.
func (s *Serve) Ready() bool { return s.engine.Load() != nil }

// QueueDepth returns the number of requests waiting for the engine.
func (s *Serve) QueueDepth() int { return s.gate.waiting() }

// Models lists the served model (none while loading).
func (s *Serve) Models() []ports.ModelCard {
	l := s.engine.Load()
	if l == nil {
		return nil
	}
	return []ports.ModelCard{{ID: l.name, Created: l.Created, OwnedBy: "higgs"}}
}

// invalid is a problem with the request's param (the OpenAI wire name; "" when no single field is at fault).
func invalid(param, format string, args ...any) error {
	return &ports.RequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// prepared is a validated request ready for the engine.
type prepared struct {
	prompt    []ports.Token
	cfg       speculative.Config
	seed      uint64
	stop      []string
	think     bool // split <think>…</think> into reasoning
	inThink   bool // the prompt leaves the model inside a think block
	maxTokens int
	match     *grammar.Matcher // the output's constraint; nil: free text
}

// prepare tokenizes and validates req against l.
func (s *Serve) prepare(l *loaded, req ports.GenerateRequest) (prepared, error) {
	var p prepared
	if req.Model != "" && req.Model != l.name {
		return p, fmt.Errorf("%w: the model %q does not exist; this server serves %q", ports.ErrUnknownModel, req.Model, l.name)
	}
	chat := req.Messages != nil
	promptParam := "prompt"
	if chat {
		promptParam = "messages"
	}
	ids, text, errs := s.encodePrompt(l, req)
	p.prompt = ids
	ctxLen := l.info.ContextLength
	// The sign of max_tokens was checked where the request was parsed; whether it fits is the decoder's own
	// invariant (speculative.TokenBudget), asked here so that a request that cannot run is refused before it
	// queues, naming the field at fault.
	if len(p.prompt) > 0 {
		if _, err := speculative.TokenBudget(len(p.prompt), req.MaxTokens, ctxLen); err != nil {
			param := "max_tokens"
			if ctxLen > 0 && len(p.prompt) >= ctxLen {
				param = promptParam
			}
			errs = append(errs, invalid(param, "%v", err))
		}
	}
	if err := req.Sampling.Validate(); err != nil {
		errs = append(errs, invalid("", "%v", err))
	}
	bs := l.blockSize
	switch {
	case req.BlockSize < 0:
		errs = append(errs, invalid("block_size", "block_size %d must be ≥ 1", req.BlockSize))
	case req.BlockSize > 1 && l.Drafter == nil:
		errs = append(errs, invalid("block_size", "block_size %d needs speculative decoding, which is off on this server (no drafter)", req.BlockSize))
	case req.BlockSize > l.maxBlock:
		errs = append(errs, invalid("block_size", "block_size %d exceeds the drafter's block size %d", req.BlockSize, l.maxBlock))
	case req.BlockSize > 0:
		bs = req.BlockSize
	}
	for i, st := range req.Stop {
		if st == "" {
			errs = append(errs, invalid("stop", "stop[%d] must not be empty", i))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return p, err
	}
	p.stop = req.Stop
	p.maxTokens = req.MaxTokens
	p.think = chat && l.thinkSplit
	if p.think {
		p.inThink = strings.LastIndex(text, thinkOpen) > strings.LastIndex(text, thinkClose)
	}
	var err error
	if p.match, err = prepareConstraint(l, req, p.think && (p.inThink || req.Chat.EnableThinking != nil && *req.Chat.EnableThinking), p.inThink); err != nil {
		return p, err
	}
	if req.Seed != nil {
		p.seed = *req.Seed
	} else {
		p.seed = s.seed()
	}
	stops := make([]ports.Token, 0, len(l.eos))
	for t := range l.eos {
		stops = append(stops, t)
	}
	p.cfg = speculative.Config{
		BlockSize:     bs,
		Adaptive:      s.cfg.Adaptive && bs > 1,
		MaxTokens:     req.MaxTokens,
		ContextLength: ctxLen,
		StopTokens:    stops,
		Sampling:      req.Sampling,
		Verify:        verification(req.Seed != nil),
		LayerKinds:    l.info.LayerKinds,
	}
	if p.cfg.Adaptive {
		p.cfg.Policy.Memory = l.policyMemory(bs, req.Sampling.Greedy())
	}
	if err := p.cfg.Validate(); err != nil {
		return p, invalid("", "%v", err)
	}
	return p, nil
}

// verification picks how a sampled request's drafts are verified. A request that names a seed gets
// sample-and-match, whose output is a function of (model, prompt, parameters, seed) alone — the same under
// any block size, adaptive-policy decision or timing, as the seed parameter promises. Without a seed nothing
// can be reproduced anyway, and residual rejection sampling is kept: with DFlash's point-mass drafts both
// accept each draft with probability p(d) (τ measured equal on the demo, README), and residual sampling
// accepts more than matching would from a drafter that samples its drafts.
func verification(seeded bool) speculative.Verification {
	if seeded {
		return speculative.VerifyMatch
	}
	return speculative.VerifyResidual
}

// encodePrompt renders (chat) and tokenizes a request's prompt, checking it against the model's vocabulary.
func (s *Serve) encodePrompt(l *loaded, req ports.GenerateRequest) (prompt []ports.Token, text string, errs []error) {
	chat := req.Messages != nil
	promptParam := "prompt"
	if chat {
		promptParam = "messages"
	}
	var plain []ports.Span // client-written text that must not become control tokens
	switch {
	case chat && req.Prompt != "":
		errs = append(errs, invalid("messages", "set either a prompt or messages, not both"))
	case chat && len(req.Messages) == 0:
		errs = append(errs, invalid("messages", "messages must not be empty"))
	case chat && l.Template == nil:
		errs = append(errs, invalid("messages", "model %q has no chat template; use /v1/completions", l.name))
	case chat:
		opts := req.Chat
		opts.AddGenerationPrompt = true
		t, err := l.Template.Render(req.Messages, opts)
		if err != nil {
			errs = append(errs, invalid("messages", "chat template: %v", err))
			break
		}
		text = t
		if !s.cfg.SpecialTokensInContent {
			if err := toolsSpecial(l, opts.Tools); err != nil {
				errs = append(errs, err)
				text = ""
				break
			}
			if plain, err = s.plainSpans(l, req.Messages, opts, text); err != nil {
				errs = append(errs, err)
				text = ""
			}
		}
	case req.Prompt == "":
		errs = append(errs, invalid("prompt", "prompt must not be empty"))
	default:
		text = req.Prompt
	}
	if text != "" {
		ids, err := encodeText(l.Tokenizer, text, plain)
		switch {
		case err != nil:
			errs = append(errs, invalid(promptParam, "tokenize prompt: %v", err))
		case len(ids) == 0:
			errs = append(errs, invalid(promptParam, "the prompt tokenizes to nothing"))
		}
		// A tokenizer may know more ids than the model embeds (added tokens past the embedding table); a prompt
		// that uses one is refused here with its reason rather than failing inside the forward as a 500.
		for _, id := range ids {
			if id < 0 || int(id) >= l.info.VocabSize {
				errs = append(errs, invalid(promptParam, "the prompt encodes to token id %d, outside this model's vocabulary of %d (the tokenizer knows ids the model cannot embed)",
					id, l.info.VocabSize))
				break
			}
		}
		prompt = ids
	}
	return prompt, text, errs
}

// CountTokens returns the number of prompt tokens req would have (ports.TokenCounter), without generating.
func (s *Serve) CountTokens(_ context.Context, req ports.GenerateRequest) (int, error) {
	l := s.engine.Load()
	if l == nil {
		return 0, fmt.Errorf("count tokens: %w", ports.ErrNotReady)
	}
	if req.Model != "" && req.Model != l.name {
		return 0, fmt.Errorf("%w: the model %q does not exist; this server serves %q", ports.ErrUnknownModel, req.Model, l.name)
	}
	ids, _, errs := s.encodePrompt(l, req)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return len(ids), nil
}

// Generate runs one request: tokenize, validate, wait for the engine, decode speculatively, and stream text.
func (s *Serve) Generate(ctx context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	l := s.engine.Load()
	if l == nil {
		return ports.GenerateResult{}, fmt.Errorf("generate: %w", ports.ErrNotReady)
	}
	p, err := s.prepare(l, req)
	if err != nil {
		return ports.GenerateResult{}, err
	}
	need, err := s.admissionBytes(l, &p)
	if err != nil {
		return ports.GenerateResult{}, err
	}
	release, err := s.admit(ctx, l, need)
	if err != nil {
		return ports.GenerateResult{}, fmt.Errorf("generate: %w", err)
	}
	defer release()
	id := req.ID
	if id == "" {
		id = s.requestID()
	}
	lv := s.newLive(l, id, p, req.Messages != nil)
	res, err := s.run(ctx, l, p, lv, emit)
	switch {
	case err == nil:
		lv.end(res.FinishReason, res)
	case ctx.Err() != nil:
		lv.end("cancelled", res)
	default:
		lv.end("error", res)
	}
	return res, err
}

// errStopString stops the decoder when a stop string appeared.
var errStopString = fmt.Errorf("stop string reached: %w", speculative.ErrStop)

func (s *Serve) run(ctx context.Context, l *loaded, p prepared, lv *live, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	res := ports.GenerateResult{Model: l.name, PromptTokens: len(p.prompt)}
	// Observing costs one atomic load per round while nobody listens (BenchmarkServeEvents).
	p.cfg.Observe = lv.observe
	var taps []int
	if p.cfg.BlockSize > 1 {
		taps = l.Drafter.TapLayers()
	}
	sess, err := l.Target.NewSession(ctx, taps)
	if err != nil {
		return res, fmt.Errorf("open target session: %w", err)
	}
	defer closeLogged(s.log, "target session", sess.Close)
	var draft ports.DraftSession
	if p.cfg.BlockSize > 1 {
		ds, err := l.Drafter.NewSession(ctx)
		if err != nil {
			return res, fmt.Errorf("open draft session: %w", err)
		}
		defer closeLogged(s.log, "draft session", ds.Close)
		draft = ds
	}
	prefix, err := s.startPrefix(l, &p, sess, draft)
	if err != nil {
		return res, err
	}
	if prefix != nil {
		res.CachedTokens = prefix.reused
		s.log.Debug().Int("prompt_tokens", len(p.prompt)).Int("cached_tokens", prefix.reused).
			Int("prefill_tokens", len(p.prompt)-prefix.reused).Msg("prefix cache")
	}
	// The prefix cache restored into the backend's own sessions; the decoder's forwards and drafts go
	// through the batch's rounds.
	bsess, bdraft, leave := s.batched(l, &p.cfg, sess, draft)
	defer leave()
	dec, err := speculative.New(p.cfg, s.clock, sampling.NewSource(p.seed))
	if err != nil {
		return res, invalid("", "%v", err)
	}
	pipe := newTextPipe(l.Tokenizer.NewStreamDecoder(true), p.stop, p.think, p.inThink, l.eos, emit)
	gsess, masked := constrain(bsess, p.match, len(p.prompt), l.info.VocabSize, s.clock)
	out, genErr := dec.Generate(ctx, gsess, bdraft, p.prompt, lv.committed(pipe.push))
	leave() // now, not after the prefix cache's exports below: the rounds stop waiting for this request
	if masked != nil {
		s.log.Debug().Int("rows", masked.stats.Rows).Int("masks_computed", masked.stats.Computed).
			Dur("mask", masked.stats.Time).Msg("constrained decoding")
	}
	res.CompletionTokens = len(out.Tokens)
	res.Spec = out.Stats.SpecUsage()
	// Cache what this request computed once it ended cleanly (a stop string ends it through emit, with
	// every layer at the committed position); a failed or cancelled one leaves no entry.
	if prefix != nil && (genErr == nil || errors.Is(genErr, errStopString)) {
		if err := prefix.finish(sess, draft, out.Tokens); err != nil {
			s.log.Warn().Err(err).Msg("prefix cache: an entry was not cached")
		}
	}
	switch {
	case errors.Is(genErr, errStopString):
		res.FinishReason = "stop"
	case genErr != nil:
		if ctx.Err() != nil {
			s.log.Debug().Err(genErr).Int("completion_tokens", res.CompletionTokens).Int("rounds", res.Spec.Rounds).
				Int("plain_steps", res.Spec.PlainSteps).Dur("decode", out.Stats.DecodeTime).
				Msg("generation cancelled (client gone, request timeout or shutdown)")
		}
		return res, fmt.Errorf("generate: %w", genErr)
	case out.Finish == speculative.FinishStop:
		res.FinishReason = "stop"
	case out.Finish == speculative.FinishLength:
		res.FinishReason = "length"
	default:
		return res, fmt.Errorf("generate: unexpected finish %q", out.Finish)
	}
	if err := pipe.finish(); err != nil {
		return res, fmt.Errorf("generate: %w", err)
	}
	if pipe.stop.hit != "" {
		// The stop string may also be found only in the text held back when generation ended.
		res.FinishReason, res.StopSequence = "stop", pipe.stop.hit
	}
	res.Content, res.Reasoning = pipe.content.String(), pipe.reasoning.String()
	s.log.Debug().Int("prompt_tokens", res.PromptTokens).Int("completion_tokens", res.CompletionTokens).
		Int("rounds", res.Spec.Rounds).Int("plain_steps", res.Spec.PlainSteps).Float64("tau", res.Spec.Tau).
		Str("policy", res.Spec.Policy.Mode).Str("finish", res.FinishReason).
		Dur("prefill", out.Stats.PrefillTime).Dur("decode", out.Stats.DecodeTime).Msg("generation done")
	return res, nil
}

func closeLogged(log zerolog.Logger, what string, f func() error) {
	if err := f(); err != nil {
		log.Warn().Err(err).Str("what", what).Msg("close failed")
	}
}
