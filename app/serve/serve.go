package serve

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

	"github.com/higgs-go/higgs/adapters/constrained"
	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// ServeConfig tunes the Serve use case.
type ServeConfig struct {
	// ServedModelName overrides the model id clients use; "" means the loaded model's name.
	ServedModelName string
	// BlockSize is the default speculative block size (anchor included): 0 means the drafter's configured
	// block size, 1 turns speculation off. Requests may lower or raise it up to the context length.
	BlockSize int
	// Adaptive lets the depth policy pick each round's block size (≤ the request's block size).
	Adaptive bool
	// TreeBudget, when ≥ 2, lets speculative rounds verify a tree of the drafter's top candidates of at most
	// this many nodes (speculative.TreeConfig: with Adaptive the policy chooses tree or chain and the
	// budget); generation.TreeAuto (−1) lets the adaptive policy weigh trees up to the request's block size
	// and keeps fixed blocks on chains; 0 verifies chains only. TreeWidth is the most candidates per slot (0:
	// the default). Where the backend cannot verify trees, or a request's decoding cannot (a constraint,
	// log-probabilities, unseeded sampling), rounds verify chains.
	TreeBudget, TreeWidth int
	// TreeFullDraft drafts a tree round's block in full (speculative.TreeConfig.FullDraft); by default a
	// tree's draft is narrow.
	TreeFullDraft bool
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
	// SpecialTokensInContent encodes special-token text in message content (every role, and the strings of
	// assistant turns' tool calls) as control
	// tokens (the old behaviour). By default that content is plain text: only the template's own markup is
	// special, so a client cannot close its turn and forge a system turn by typing <|im_end|><|im_start|>.
	SpecialTokensInContent bool
	// PrefixCacheBytes is the prefix cache's byte budget; 0 turns the cache off.
	PrefixCacheBytes int64
	// PrefixCacheEvery is the interval, in prompt tokens, of the cache's boundaries inside a prompt (0: only
	// at the prompt's end and the generation's end).
	PrefixCacheEvery int
	// PrefixCacheShared lets every tenant reuse every other tenant's cached prefixes (a trusted
	// deployment). By default each request reuses only what its own tenant (ports.GenerateRequest.Tenant)
	// cached, so that a hit, CachedTokens and the time saved tell a client nothing about another's prompts.
	PrefixCacheShared bool
	// PrefixCacheDir, when set, is the prefix cache's disk tier: entries evicted from memory, and at
	// shutdown (FlushPrefixCache) those still in memory, are written there and read back on a hit, across
	// restarts. PrefixCacheDiskBytes bounds what the tier keeps there (> 0 with a directory).
	PrefixCacheDir       string
	PrefixCacheDiskBytes int64
	// DefaultMaxTokens is the output limit of a request that sets no max_tokens: > 0 that many tokens; 0 the
	// model's generation_config.json max_new_tokens, else FallbackMaxTokens; < 0 none (up to the context
	// length). The limit never exceeds what the context leaves.
	DefaultMaxTokens int
	// ContextLength, when > 0, caps the model's context length (prompt and output together); above the
	// model's own it is an error.
	ContextLength int
	// Version describes the build for GET /v1/system ("" when not known).
	Version string
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
	if c.PrefixCacheDiskBytes < 0 {
		errs = append(errs, fmt.Errorf("prefix cache disk budget %d bytes must be ≥ 0", c.PrefixCacheDiskBytes))
	}
	if c.PrefixCacheDir != "" && c.PrefixCacheDiskBytes == 0 {
		errs = append(errs, errors.New("a prefix cache directory needs a disk budget > 0"))
	}
	if c.PrefixCacheDir != "" && c.PrefixCacheBytes == 0 {
		errs = append(errs, errors.New("a prefix cache directory needs the prefix cache on (a memory budget > 0)"))
	}
	if c.ContextLength < 0 {
		errs = append(errs, fmt.Errorf("context length %d must be ≥ 0 (0: the model's)", c.ContextLength))
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
	// Backend and Kernels say what the target runs on (the model card's backend and kernels).
	Backend string
	Kernels string
	// DrafterName and DrafterGeneration describe the drafter for the model card ("" without one).
	DrafterName       string
	DrafterGeneration string
	// MaxNewTokens is the model's generation_config.json max_new_tokens (0: none), the default output
	// limit unless ServeConfig.DefaultMaxTokens names one.
	MaxNewTokens int
	// Certified is the lossless certificate found beside the model (nil: none), shown in its model card.
	Certified *ports.Certification
	// WeightBytes is the memory the target's and drafter's weights hold (their checkpoint files' sizes; 0:
	// not known). A server of several models counts it in the shared memory budget (ShareMemory).
	WeightBytes int64
	// DeviceMemory reads the accelerator's allocator for GET /v1/system (nil: none, the CPU backend).
	DeviceMemory func() (ports.DeviceMemory, error)
	// Pooling is what the model's sentence-transformers pooling config says (zero: it ships none);
	// PoolingErr why that config could not be read (embeddings are then refused, saying so).
	Pooling    models.Pooling
	PoolingErr error
	// Identity names the model's states exactly for the prefix cache's disk tier (models.Identity): the
	// weights' and the drafter's digests, the backend and its kernel mode. "" (unknown) refuses a disk tier.
	Identity string
}

// EngineFromModels adapts LoadModels' result.
func EngineFromModels(m *models.Models) Engine {
	e := Engine{Target: m.Target, Drafter: m.Drafter, Tokenizer: m.Tokenizer, Template: m.Template,
		EOS: m.EOS, Name: m.Name, Created: time.Now().Unix(), MaxNewTokens: m.MaxNewTokens, DeviceMemory: m.DeviceMemory}
	e.Backend, e.Kernels = backendCard(m.Backend)
	if m.Drafter != nil {
		e.DrafterName = servedDrafterName(m.DrafterDir)
		if m.DrafterInfo != nil {
			e.DrafterGeneration = m.DrafterInfo.Generation
		}
	}
	e.Certified = models.Certification(m.TargetDir, m.Backend)
	e.Identity = models.Identity(m)
	e.WeightBytes = m.WeightBytes()
	if m.TargetDir != "" {
		e.Pooling, e.PoolingErr = models.ReadPooling(m.TargetDir)
	}
	return e
}

// loaded is an Engine checked and prepared for serving.
type loaded struct {
	Engine
	name string
	info ports.ModelInfo
	// gen plans and runs this engine's generations (the pipeline higgs-verify runs too).
	gen *generation.Engine
	// maxTokens is the output limit of a request that sets none (0: up to the context length).
	maxTokens int
	// thinkSplit: the tokenizer knows <think> and </think>.
	thinkSplit bool
	eos        map[ports.Token]bool
	// prefix is the prefix cache of this engine's states (nil: off).
	prefix *prefixcache.Cache
	// sched forms the batched rounds of every running generation; budget and footprint are memory
	// admission's.
	sched     *batch.Scheduler
	budget    *batch.Budget
	footprint memoryPricing
	// constraints compiles requests' output constraints and keeps recent ones' matchers.
	constraints *constrained.Compiler
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
	// shared is the memory budget several Serves share (ShareMemory); nil: each engine has its own.
	shared *SharedMemory
	// started is when NewServe ran (GET /v1/system's uptime).
	started time.Time
	// unflushed are the prefix caches of unloaded engines whose disk tier has not yet received their
	// entries still in memory (FlushPrefixCache).
	unflushedMu sync.Mutex
	unflushed   []*prefixcache.Cache
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
	s.started = s.clock.Now()
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
	l := &loaded{Engine: e, name: e.Name, info: e.Target.Info(), eos: map[ports.Token]bool{},
		gen: &generation.Engine{Target: e.Target, Drafter: e.Drafter, EOS: e.EOS, BlockSize: s.cfg.BlockSize, Policies: &generation.Policies{},
			Tree: speculative.TreeConfig{Budget: s.cfg.TreeBudget, Width: s.cfg.TreeWidth, FullDraft: s.cfg.TreeFullDraft}}}
	if s.cfg.ServedModelName != "" {
		l.name = s.cfg.ServedModelName
	}
	if l.name == "" {
		l.name = "default"
	}
	if err := l.gen.Check(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := s.limits(l); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	cache, err := s.newPrefixCache(e)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	l.prefix = cache
	if err := s.newScheduler(l); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	for _, t := range l.gen.StopTokens() {
		l.eos[t] = true
	}
	if l.constraints, err = constrained.NewCompiler(e.Tokenizer, l.info.VocabSize, l.gen.StopTokens(),
		constrained.Options{ThinkOpen: thinkOpen, ThinkClose: thinkClose}); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	_, open := e.Tokenizer.TokenID(thinkOpen)
	_, closeOK := e.Tokenizer.TokenID(thinkClose)
	l.thinkSplit = open && closeOK
	s.engine.Store(l)
	batchedFwd, batchedDraft := l.sched.Batching()
	s.log.Info().Str("model", l.name).Int("block_size", l.gen.DefaultBlockSize()).Bool("drafter", e.Drafter != nil).
		Int("context_length", l.info.ContextLength).Int("default_max_tokens", l.maxTokens).Bool("reasoning_split", l.thinkSplit).
		Int64("prefix_cache_bytes", s.cfg.PrefixCacheBytes).Str("prefix_cache_dir", s.cfg.PrefixCacheDir).
		Int64("prefix_cache_disk_bytes", s.cfg.PrefixCacheDiskBytes).Int("max_batch", s.cfg.MaxConcurrency).
		Bool("batched_forward", batchedFwd).Bool("batched_draft", batchedDraft).
		Int64("memory_budget_bytes", l.budget.Total()).Bool("memory_estimated", l.footprint.Estimated).Msg("engine ready")
	return nil
}

// ErrRunning is returned by Unload while requests run or wait on the engine.
var ErrRunning = errors.New("requests are running on the engine")

// Unload forgets the engine, its batch scheduler and its prefix cache, so that their memory can be freed
// (the caller then closes the engine's backend). It refuses with ErrRunning while a request runs or waits:
// the caller must have stopped sending requests. Serve is then not ready until the next SetEngine.
func (s *Serve) Unload() error {
	if s.gate.running() > 0 || s.gate.waiting() > 0 {
		return fmt.Errorf("unload: %w", ErrRunning)
	}
	if l := s.engine.Load(); l != nil && l.prefix.DiskBudget() > 0 {
		// Its entries still only in memory go to disk at the next FlushPrefixCache (the fleet calls it
		// before closing the backend, outside its lock).
		s.unflushedMu.Lock()
		s.unflushed = append(s.unflushed, l.prefix)
		s.unflushedMu.Unlock()
	}
	s.engine.Store(nil)
	return nil
}

// Ready reports whether an engine is loaded.
func (s *Serve) Ready() bool { return s.engine.Load() != nil }

// QueueDepth returns the number of requests waiting for the engine.
func (s *Serve) QueueDepth() int { return s.gate.waiting() }

// invalid is a problem with the request's param (the OpenAI wire name; "" when no single field is at fault).
func invalid(param, format string, args ...any) error {
	return &ports.RequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// prepared is a validated request ready for the engine: the generation's plan and the text around it.
type prepared struct {
	generation.Plan
	stop    []string
	think   bool // split <think>…</think> into reasoning
	inThink bool // the prompt leaves the model inside a think block
	// defaultMax: the request set no max_tokens and Config.MaxTokens is the server's default, which memory
	// admission may lower as it caps any request without a limit.
	defaultMax bool
	// cacheBreaks are the prompt positions of the client's cache breakpoints; noCache keeps the request out
	// of the prefix cache.
	cacheBreaks []int
	noCache     bool
}

// prepare tokenizes req and checks it against l: the text-level knobs here, the generation's in its plan.
func (s *Serve) prepare(ctx context.Context, l *loaded, req ports.GenerateRequest) (prepared, error) {
	var p prepared
	if req.Model != "" && req.Model != l.name {
		return p, fmt.Errorf("%w: the model %q does not exist; this server serves %q", ports.ErrUnknownModel, req.Model, l.name)
	}
	chat := req.Messages != nil
	promptParam := "prompt"
	if chat {
		promptParam = "messages"
	}
	enc, errs := s.encode(l, req)
	ids, text := enc.ids, enc.text
	for i, st := range req.Stop {
		if st == "" {
			errs = append(errs, invalid("stop", "stop[%d] must not be empty", i))
		}
	}
	var seed uint64
	if req.Seed != nil {
		seed = *req.Seed
	} else {
		seed = s.seed()
	}
	maxTokens := l.requestMaxTokens(req.MaxTokens, len(ids))
	p.defaultMax = req.MaxTokens == 0 && maxTokens > 0
	gr := generation.Request{Prompt: ids, PromptParam: promptParam, MaxTokens: maxTokens, BlockSize: req.BlockSize,
		Adaptive: s.cfg.Adaptive, Sampling: req.Sampling, Seed: seed, Verify: verification(req.Seed != nil),
		Logprobs: req.Logprobs, TopLogprobs: req.TopLogprobs}
	if len(ids) > 0 || len(errs) == 0 {
		// Without ids the prompt's own error says why; the plan would only add "the prompt is empty".
		plan, err := l.gen.Plan(gr)
		if err != nil {
			errs = append(errs, err)
		}
		p.Plan = plan
	}
	if err := errors.Join(errs...); err != nil {
		return p, err
	}
	if l.prefix != nil && !req.NoCache {
		p.cacheBreaks = s.cacheBreaks(l, req, enc)
	}
	p.noCache = req.NoCache
	p.stop = req.Stop
	p.think = chat && l.thinkSplit
	if p.think {
		p.inThink = strings.LastIndex(text, thinkOpen) > strings.LastIndex(text, thinkClose)
	}
	var err error
	think := p.think && (p.inThink || req.Chat.EnableThinking != nil && *req.Chat.EnableThinking)
	if p.Constraint, err = l.constraints.Matcher(ctx, req.Constraint, think, p.inThink); err != nil {
		return p, err
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
	e, errs := s.encode(l, req)
	return e.ids, e.text, errs
}

// encoded is a request's prompt: its token ids, the text they encode, and the spans of that text encoded as
// plain text (client-written text that must not become control tokens).
type encoded struct {
	ids   []ports.Token
	text  string
	plain []ports.Span
}

// encode is encodePrompt, also returning the plain spans.
func (s *Serve) encode(l *loaded, req ports.GenerateRequest) (_ encoded, errs []error) {
	var prompt []ports.Token
	var text string
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
		if err := l.constraints.CheckToolSchemas(opts.Tools); err != nil {
			errs = append(errs, invalid("tools", "%v", err))
			text = ""
			break
		}
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
		prompt = ids
	}
	return encoded{ids: prompt, text: text, plain: plain}, errs
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
// Every call is logged at info level once it ends (requestLog), refused or not.
func (s *Serve) Generate(ctx context.Context, req ports.GenerateRequest, emit func(ports.GenerateEvent) error) (res ports.GenerateResult, err error) {
	id := req.ID
	if id == "" {
		id = s.requestID()
	}
	l := s.engine.Load()
	rl := s.startRequestLog(id, l, req)
	defer func() { rl.done(ctx, res, err) }()
	if l == nil {
		return ports.GenerateResult{}, fmt.Errorf("generate: %w", ports.ErrNotReady)
	}
	p, err := s.prepare(ctx, l, req)
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
	lv := s.newLive(l, id, req.Tenant, p, req.Messages != nil)
	rl.live = lv
	var prefix *prefixcache.Partition
	if !p.noCache {
		prefix = s.prefixPartition(l, req.Tenant)
	}
	res, err = s.run(ctx, l, p, prefix, lv, emit)
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

func (s *Serve) run(ctx context.Context, l *loaded, p prepared, prefix *prefixcache.Partition, lv *live, emit func(ports.GenerateEvent) error) (ports.GenerateResult, error) {
	res := ports.GenerateResult{Model: l.name, PromptTokens: len(p.Prompt)}
	pipe := newTextPipe(l.Tokenizer.NewStreamDecoder(true), p.stop, p.think, p.inThink, l.eos, emit)
	// Observing costs one atomic load per round while nobody listens (BenchmarkServeEvents).
	ro := generation.RunOptions{Clock: s.clock, PrefixCache: prefix, CacheBreaks: p.cacheBreaks, Batch: l.sched,
		PrefillChunk: s.cfg.PrefillChunk, Observe: lv.observe, Emit: lv.committed(pipe.push)}
	if p.Logprobs {
		pipe.lp = newLogprobText(l.Tokenizer)
		var lps []ports.TokenLogprob // the round's, for the pipe
		emitLP := lv.committed(func(ids []ports.Token) error { return pipe.pushLogprobs(ids, lps) })
		ro.EmitLogprobs = func(ids []ports.Token, round []ports.TokenLogprob) error { lps = round; return emitLP(ids) }
	}
	out, genErr := l.gen.Run(ctx, p.Plan, ro)
	if prefix != nil {
		res.CachedTokens, res.CacheWriteTokens = out.Cached, out.CacheWrite
		s.log.Debug().Int("prompt_tokens", len(p.Prompt)).Int("cached_tokens", out.Cached).
			Int("prefill_tokens", len(p.Prompt)-out.Cached).Msg("prefix cache")
	}
	if out.Warn != nil {
		s.log.Warn().Err(out.Warn).Msg("generation: a session did not close cleanly or an entry was not cached")
	}
	if p.Constraint != nil {
		s.log.Debug().Int("rows", out.Mask.Rows).Int("masks_computed", out.Mask.Computed).
			Dur("mask", out.Mask.Time).Msg("constrained decoding")
	}
	res.CompletionTokens = len(out.Tokens)
	res.Spec = out.Stats.SpecUsage()
	switch {
	case errors.Is(genErr, errStopString):
		res.FinishReason = "stop"
	case genErr != nil:
		if ctx.Err() != nil {
			s.log.Debug().Err(genErr).Int("completion_tokens", res.CompletionTokens).Int("rounds", res.Spec.Rounds).
				Int("plain_steps", res.Spec.PlainSteps).Dur("decode", out.Stats.DecodeTime).
				Msg("generation cancelled (client gone, request timeout or shutdown)")
		}
		return res, genErr
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
	if pipe.lp != nil {
		res.Logprobs = pipe.lp.all
	}
	s.log.Debug().Int("prompt_tokens", res.PromptTokens).Int("completion_tokens", res.CompletionTokens).
		Int("rounds", res.Spec.Rounds).Int("plain_steps", res.Spec.PlainSteps).Float64("tau", res.Spec.Tau).
		Str("policy", res.Spec.Policy.Mode).Str("finish", res.FinishReason).
		Dur("prefill", out.Stats.PrefillTime).Dur("decode", out.Stats.DecodeTime).Msg("generation done")
	return res, nil
}

// Degraded reports why a loaded engine cannot generate (a lost rank of a distributed target, whose ports.Target reports Health), or nil;
// /health answers 503 degraded with it.
func (s *Serve) Degraded() error {
	l := s.engine.Load()
	if l == nil {
		return nil
	}
	if h, ok := l.Target.(interface{ Health() error }); ok {
		return h.Health()
	}
	return nil
}
