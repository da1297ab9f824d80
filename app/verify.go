package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// The verify use cases (higgs-verify's subcommands) report two kinds of failure that map to distinct exit
// statuses: a check that ran and failed (ErrCheckFailed, exit 1) and bad usage or input (everything else,
// exit 2).
var (
	// ErrCheckFailed is wrapped when a verification ran and found a difference past its tolerance.
	ErrCheckFailed = errors.New("check failed")
	// ErrBadInput is wrapped for problems with the arguments or the input files.
	ErrBadInput = errors.New("bad input")
)

// SystemClock is the wall clock as a ports.Clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After is the system clock's timer (batch.Timer).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// GenerateOptions configure one verify generation.
type GenerateOptions struct {
	// Prompt are the prompt ids (non-empty).
	Prompt []ports.Token
	// MaxTokens bounds the generated tokens (> 0).
	MaxTokens int
	// Speculative turns DFlash on (needs Models.Drafter); otherwise decoding is autoregressive.
	Speculative bool
	// BlockSize is the DFlash block size (anchor included); 0 means the drafter's block size.
	BlockSize int
	// Adaptive lets the domain's depth policy pick each round's block size (≤ BlockSize).
	Adaptive bool
	// Sampling are the target's sampling parameters (Temperature 0: greedy).
	Sampling ports.SamplingParams
	// Seed seeds the sampler when Temperature > 0.
	Seed uint64
	// Verify is how drafts are verified when Temperature > 0; VerifyMatch (the reproducible one) makes the
	// output a function of the seed alone, whatever the block size.
	Verify speculative.Verification
	// StopIDs are extra stop ids on top of the model's EOS ids.
	StopIDs []ports.Token
	// NoEOS drops the model's EOS ids (only StopIDs stop generation).
	NoEOS bool
	// Rollback forces a recurrent rollback strategy (default: the domain's cost model).
	Rollback speculative.RollbackMode
	// PolicyMemory, when non-nil, carries the adaptive policy's measurements across generations (see
	// speculative.PolicyConfig.Memory).
	PolicyMemory *speculative.PolicyMemory
	// PrefixCache, when non-nil, restores the longest cached prefix of Prompt first and caches this
	// generation's boundaries (as higgsd does).
	PrefixCache *prefixcache.Cache
	// Constraint, when set, masks the target's rows (constrained decoding, as higgsd's structured outputs).
	Constraint *grammar.Matcher
	// Batch, when non-nil, decodes through this member's shared rounds (as higgsd does with several
	// clients), with prefill chunks of PrefillChunk tokens (0: whole).
	Batch        *batch.Member
	PrefillChunk int
	// Emit, when non-nil, is called with each round's committed tokens.
	Emit func([]ports.Token)
}

// RoundJSON is one draft–verify round in higgs-verify's JSON.
type RoundJSON struct {
	// Block is what the target verified: the last committed token followed by the drafter's proposals.
	Block []ports.Token `json:"block"`
	// Accepted is the number of accepted proposals (the bonus/correction token is not counted).
	Accepted   int     `json:"accepted"`
	Committed  int     `json:"committed"`
	BlockSize  int     `json:"block_size"`
	DraftMS    float64 `json:"draft_ms"`
	VerifyMS   float64 `json:"verify_ms"`
	RollbackMS float64 `json:"rollback_ms"`
	Rollback   string  `json:"rollback"`
	Policy     string  `json:"policy"`
}

// StatsJSON is the generation account in higgs-verify's JSON.
type StatsJSON struct {
	// Rounds counts every decoding step (the entries of the rounds list); DraftRounds those that drafted
	// (block size ≥ 2), PlainSteps the others. MeanAccepted and Tau are per draft–verify round (Tau 1 without).
	Rounds              int     `json:"rounds"`
	DraftRounds         int     `json:"draft_rounds"`
	PlainSteps          int     `json:"plain_steps"`
	MeanAccepted        float64 `json:"mean_accepted"`
	Tau                 float64 `json:"tau"`
	Drafted             int     `json:"draft_tokens"`
	Accepted            int     `json:"accepted_tokens"`
	AcceptedPerPosition []int   `json:"accepted_per_position"`
	PromptTokens        int     `json:"prompt_tokens"`
	GeneratedTokens     int     `json:"generated_tokens"`
	PrefillMS           float64 `json:"prefill_ms"`
	DecodeMS            float64 `json:"decode_ms"`
	DecodeTokensPerS    float64 `json:"decode_tokens_per_s"`
	BlockSize           int     `json:"block_size"`
	Finish              string  `json:"finish_reason"`
}

// GenerateResult is the JSON object `higgs-verify generate --json` prints.
type GenerateResult struct {
	Model   string        `json:"model"`
	Backend string        `json:"backend"`
	Prompt  []ports.Token `json:"prompt"`
	Tokens  []ports.Token `json:"tokens"`
	Text    *string       `json:"text,omitempty"`
	Rounds  []RoundJSON   `json:"rounds"`
	Stats   StatsJSON     `json:"stats"`
	// Drafter describes the drafter loaded (absent without one).
	Drafter *hfmodel.DrafterInfo `json:"drafter,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// statsJSON converts the domain's stats.
func statsJSON(res speculative.Result, bs int) ([]RoundJSON, StatsJSON) {
	st := res.Stats
	rounds := make([]RoundJSON, 0, len(st.Rounds))
	for _, r := range st.Rounds {
		rounds = append(rounds, RoundJSON{Block: slices.Clone(r.Block), Accepted: r.Accepted, Committed: r.Committed,
			BlockSize: r.BlockSize, DraftMS: ms(r.DraftTime), VerifyMS: ms(r.VerifyTime), RollbackMS: ms(r.RollbackTime),
			Rollback: string(r.Rollback), Policy: r.Policy})
	}
	s := StatsJSON{Rounds: st.NumRounds(), DraftRounds: st.DraftRounds(), PlainSteps: st.PlainSteps(), MeanAccepted: st.MeanAccepted(), Tau: st.Tau(), Drafted: st.Drafted(),
		Accepted: st.Accepted(), AcceptedPerPosition: st.AcceptedPerPosition(), PromptTokens: st.PromptTokens,
		GeneratedTokens: len(res.Tokens), PrefillMS: ms(st.PrefillTime), DecodeMS: ms(st.DecodeTime),
		BlockSize: bs, Finish: string(res.Finish)}
	if s.AcceptedPerPosition == nil {
		s.AcceptedPerPosition = []int{}
	}
	// The first token comes from the prefill; decode time covers the rest.
	if n := len(res.Tokens) - 1; n > 0 && st.DecodeTime > 0 {
		s.DecodeTokensPerS = float64(n) / st.DecodeTime.Seconds()
	}
	return rounds, s
}

// checkGenerate validates opts against the loaded models and returns the effective block size.
func checkGenerate(m *Models, o GenerateOptions) (int, error) {
	var errs []error
	if len(o.Prompt) == 0 {
		errs = append(errs, errors.New("empty prompt"))
	}
	vocab := m.Target.Info().VocabSize
	for i, t := range o.Prompt {
		if t < 0 || int(t) >= vocab {
			errs = append(errs, fmt.Errorf("prompt token %d (position %d) outside the vocabulary of %d", t, i, vocab))
			break
		}
	}
	// The contract promises exactly MaxTokens tokens unless a stop token ends generation, so 0 (the decoder's
	// "as many as fit") is refused; whether the budget fits is the decoder's own check, asked before loading
	// sessions.
	if o.MaxTokens <= 0 {
		errs = append(errs, fmt.Errorf("max tokens %d must be > 0", o.MaxTokens))
	} else if _, err := speculative.TokenBudget(len(o.Prompt), o.MaxTokens, m.Target.Info().ContextLength); err != nil {
		errs = append(errs, err)
	}
	for _, t := range o.StopIDs {
		if t < 0 || int(t) >= vocab {
			errs = append(errs, fmt.Errorf("stop id %d outside the vocabulary of %d", t, vocab))
		}
	}
	if err := o.Sampling.Validate(); err != nil {
		errs = append(errs, err)
	}
	bs := 1
	if o.Speculative {
		if m.Drafter == nil {
			errs = append(errs, errors.New("speculative decoding needs a drafter (--draft DIR)"))
		} else {
			bs = o.BlockSize
			if bs == 0 {
				bs = m.Drafter.BlockSize()
			}
			if bs < 1 || bs > m.Drafter.BlockSize() {
				errs = append(errs, fmt.Errorf("block size %d outside 1..%d (the drafter's block_size)", bs, m.Drafter.BlockSize()))
			}
		}
	} else if o.BlockSize > 1 {
		errs = append(errs, fmt.Errorf("block size %d needs a drafter", o.BlockSize))
	}
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return bs, nil
}

// runDecoder opens sessions and runs one generation, returning the domain result and the block size used.
func runDecoder(ctx context.Context, m *Models, o GenerateOptions) (speculative.Result, int, error) {
	r, err := decode(ctx, m, o)
	return r.Result, r.blockSize, err
}

// decoded is one decode's result with what the bench measures around the decoder.
type decoded struct {
	speculative.Result
	blockSize int
	// cached is the prompt tokens restored from o.PrefixCache; firstToken the time from opening the
	// sessions to the first token's emit (restore and prefill included).
	cached     int
	firstToken time.Duration
	// mask is what constrained decoding cost (zero without GenerateOptions.Constraint).
	mask MaskStats
}

func decode(ctx context.Context, m *Models, o GenerateOptions) (decoded, error) {
	var out decoded
	bs, err := checkGenerate(m, o)
	if err != nil {
		return out, err
	}
	out.blockSize = bs
	start := time.Now()
	info := m.Target.Info()
	stops := slices.Clone(o.StopIDs)
	if !o.NoEOS {
		stops = append(stops, m.EOS...)
	}
	cfg := speculative.Config{BlockSize: bs, Adaptive: o.Adaptive && bs > 1, MaxTokens: o.MaxTokens,
		ContextLength: info.ContextLength, StopTokens: stops, Sampling: o.Sampling, Verify: o.Verify, Rollback: o.Rollback,
		LayerKinds: info.LayerKinds, Policy: speculative.PolicyConfig{Memory: o.PolicyMemory}}
	var rnd ports.Rand
	if !o.Sampling.Greedy() {
		rnd = sampling.NewSource(o.Seed)
	}
	var taps []int
	var ds ports.DraftSession
	if bs > 1 {
		taps = m.Drafter.TapLayers()
		if ds, err = m.Drafter.NewSession(ctx); err != nil {
			return out, fmt.Errorf("open draft session: %w", err)
		}
		defer ds.Close()
	}
	sess, err := m.Target.NewSession(ctx, taps)
	if err != nil {
		return out, fmt.Errorf("open target session: %w", err)
	}
	defer sess.Close()
	prefix, err := startPrefix(o.PrefixCache, o.Prompt, &cfg, sess, ds)
	if err != nil {
		return out, err
	}
	if prefix != nil {
		out.cached = prefix.reused
	}
	gsess, gds := sess, ds
	if o.Batch != nil {
		gsess, gds = batchSessions(o.Batch, &cfg, o.PrefillChunk, sess, ds)
	}
	dec, err := speculative.New(cfg, SystemClock{}, rnd)
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	first := true
	// The constraint wraps the batch member's session: its masked forward must still join the rounds.
	csess, masked := constrain(gsess, o.Constraint, len(o.Prompt), info.VocabSize, SystemClock{})
	out.Result, err = dec.Generate(ctx, csess, gds, o.Prompt, func(toks []ports.Token) error {
		if first {
			out.firstToken, first = time.Since(start), false
		}
		if o.Emit != nil {
			o.Emit(toks)
		}
		return nil
	})
	if masked != nil {
		out.mask = masked.stats
	}
	if err != nil {
		return out, fmt.Errorf("generate: %w", err)
	}
	if prefix != nil {
		if err := prefix.finish(sess, ds, out.Tokens); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Generate runs `higgs-verify generate`: autoregressive, or DFlash speculative decoding with a per-round trace.
func Generate(ctx context.Context, m *Models, o GenerateOptions) (GenerateResult, error) {
	res, bs, err := runDecoder(ctx, m, o)
	if err != nil {
		return GenerateResult{}, err
	}
	out := GenerateResult{Model: m.Name, Backend: m.Backend, Prompt: slices.Clone(o.Prompt),
		Tokens: slices.Clone(res.Tokens), Drafter: m.DrafterInfo}
	if out.Tokens == nil {
		out.Tokens = []ports.Token{}
	}
	out.Rounds, out.Stats = statsJSON(res, bs)
	if m.Tokenizer != nil {
		if text, err := m.Tokenizer.Decode(res.Tokens, false); err == nil {
			out.Text = &text
		}
	}
	return out, nil
}
