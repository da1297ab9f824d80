package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
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

// GenerateOptions configure one verify generation: the generation's knobs (a MaxTokens > 0 is required:
// the contract promises exactly that many tokens unless a stop token ends generation; a BlockSize of 0
// means the drafter's configured block size when speculating) and what the harness decides around them.
type GenerateOptions struct {
	generation.Request
	// Speculative turns DFlash on (needs Models.Drafter); otherwise decoding is autoregressive.
	Speculative bool
	// PrefixCache, when non-nil, restores the longest cached prefix of Prompt first and caches this
	// generation's boundaries (as higgsd does), all in one partition: a bench is one tenant.
	PrefixCache *prefixcache.Cache
	// Batch, when non-nil, decodes through this scheduler's shared rounds (as higgsd does with several
	// clients), with prefill chunks of PrefillChunk tokens (0: whole).
	Batch        *batch.Scheduler
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
	// Parents and Path describe a tree round (absent for a chain): Block holds the tree's nodes, Parents[i]
	// node i's parent (−1 for the anchor), Path the accepted nodes after the anchor.
	Parents []int `json:"parents,omitempty"`
	Path    []int `json:"path,omitempty"`
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
		if t := r.Tree; t != nil {
			rounds[len(rounds)-1].Parents, rounds[len(rounds)-1].Path = slices.Clone(t.Parents), slices.Clone(t.Path)
		}
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

// engine is m as the generation pipeline sees it; spec false leaves the drafter out (plain decoding).
func engine(m *models.Models, spec bool) *generation.Engine {
	e := &generation.Engine{Target: m.Target, EOS: m.EOS}
	if spec {
		e.Drafter = m.Drafter
	}
	return e
}

// plan checks o against the loaded models through the generation pipeline's plan, the only place a
// generation's knobs are checked (the CLI's contract adds that max tokens is given and that speculation has a
// drafter to run). The engine's default block size is the drafter's.
func plan(m *models.Models, o GenerateOptions) (*generation.Engine, generation.Plan, error) {
	var errs []error
	// The contract promises exactly MaxTokens tokens unless a stop token ends generation, so 0 (the decoder's
	// "as many as fit") is refused.
	if o.MaxTokens <= 0 {
		errs = append(errs, fmt.Errorf("max tokens %d must be > 0", o.MaxTokens))
	}
	if o.Speculative && m.Drafter == nil {
		errs = append(errs, errors.New("speculative decoding needs a drafter (--draft DIR)"))
	}
	e := engine(m, o.Speculative)
	req := o.Request
	req.MaxTokens = max(req.MaxTokens, 0)
	if !o.Speculative && req.BlockSize == 0 {
		req.BlockSize = 1
	}
	p, err := e.Plan(req)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, p, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return e, p, nil
}

// runDecoder runs one generation, returning the domain result and the block size used.
func runDecoder(ctx context.Context, m *models.Models, o GenerateOptions) (speculative.Result, int, error) {
	r, err := decode(ctx, m, o)
	return r.Result, r.blockSize, err
}

// decoded is one decode's result with what the bench measures around the decoder.
type decoded struct {
	generation.Outcome
	blockSize int
}

// decode runs one generation through the pipeline higgsd runs (generation.Engine's Plan and Run).
func decode(ctx context.Context, m *models.Models, o GenerateOptions) (decoded, error) {
	e, p, err := plan(m, o)
	if err != nil {
		return decoded{}, err
	}
	out := decoded{blockSize: p.Config.BlockSize}
	var emit func([]ports.Token) error
	if o.Emit != nil {
		emit = func(toks []ports.Token) error { o.Emit(toks); return nil }
	}
	out.Outcome, err = e.Run(ctx, p, generation.RunOptions{PrefixCache: o.PrefixCache.Partition(""), Batch: o.Batch,
		PrefillChunk: o.PrefillChunk, Emit: emit})
	if err == nil {
		err = out.Warn
	}
	return out, err
}

// Generate runs `higgs-verify generate`: autoregressive, or DFlash speculative decoding with a per-round trace.
func Generate(ctx context.Context, m *models.Models, o GenerateOptions) (GenerateResult, error) {
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
