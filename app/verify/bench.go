package verify

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// BenchOptions configure `higgs-verify bench`.
type BenchOptions struct {
	Prompts   [][]ports.Token
	MaxTokens int // generated tokens per run (≥ 1)
	// Repeats is the number of measured passes over the prompts (≥ 1); Warmup passes run first and are
	// discarded (≥ 0).
	Repeats, Warmup int
	// BlockSize is the DFlash block size of "spec" (0: the drafter's block_size); Adaptive runs "spec" under
	// the domain's adaptive depth policy.
	BlockSize int
	Adaptive  bool
	// Sweep lists extra fixed block sizes measured beside "spec"; when set, the adaptive policy is measured
	// too (as "adaptive").
	Sweep []int
	// TreeBudget, when ≥ 2, gives "spec" (and "adaptive") tree verification of that node budget
	// (speculative.TreeConfig, TreeWidth candidates per slot: with the adaptive policy it chooses tree or
	// chain); generation.TreeAuto, higgsd's default, lets the adaptive rows weigh trees up to the block size
	// and keeps a fixed main figure on chains; 0 measures chains only. Trees lists fixed tree budgets
	// measured beside them at the main figure's block size.
	TreeBudget, TreeWidth int
	// TreeFullDraft drafts every tree round's block in full (speculative.TreeConfig.FullDraft).
	TreeFullDraft bool
	Trees         []int
	StopIDs       []ports.Token
	NoEOS         bool
	// Sampling, when not greedy, makes every run sample (autoregressive runs too); Seed seeds run k of a pass
	// (prompt k) with Seed + pass·prompts + k, the same for every variant, and Verify is how the speculative
	// variants verify their drafts. Under VerifyMatch every variant then generates the same tokens.
	Sampling ports.SamplingParams
	Seed     uint64
	Verify   speculative.Verification
	// MultiTurn, when set, also runs the multi-turn prefix-cache scenario (BenchResult.MultiTurn).
	MultiTurn *MultiTurnOptions
	// Costs, when set, also measures the target's kernel costs through the session port (BenchResult.Costs).
	Costs *CostsOptions
	// Constrain, when set, also measures constrained decoding (BenchResult.Constrained).
	Constrain *ConstrainOptions
	// Clients, when set, also measures concurrent clients decoding together (BenchResult.Clients).
	Clients *ClientsOptions
}

// BenchAR is the autoregressive figure.
type BenchAR struct {
	TokensPerS float64 `json:"tokens_per_s"`
	MsPerToken float64 `json:"ms_per_token"`
	// StepMs is a plain step's forward, the mean over the runs' steps, timed as BenchArm times its rounds
	// (without what the loop does around it, which MsPerToken includes).
	StepMs float64 `json:"step_ms"`
	Runs   int     `json:"runs"`
	Tokens int     `json:"tokens"`
}

// BenchSpec is a speculative figure.
type BenchSpec struct {
	TokensPerS       float64 `json:"tokens_per_s"`
	Tau              float64 `json:"tau"`
	DraftMsPerRound  float64 `json:"draft_ms_per_round"`
	VerifyMsPerRound float64 `json:"verify_ms_per_round"`
	RollbackMsPerRnd float64 `json:"rollback_ms_per_round"`
	MsPerToken       float64 `json:"ms_per_token"`
	BlockSize        int     `json:"block_size"`
	Adaptive         bool    `json:"adaptive"`
	// Tree is the tree budget (0: chains only); RowsPerRound the target rows a speculative round verified,
	// on average (τ is the tokens a round, so one target forward, committed).
	Tree         int     `json:"tree,omitempty"`
	RowsPerRound float64 `json:"rows_per_round"`
	// TreeRounds is how many of the rounds verified a tree.
	TreeRounds int `json:"tree_rounds,omitempty"`
	Rounds     int `json:"rounds"`
	Runs       int `json:"runs"`
	Tokens     int `json:"tokens"`
	// Speedup is the median over runs of tokens/s against the autoregressive run of the same prompt and pass
	// (run back to back), so a slow spell of a shared machine slows both sides of a ratio.
	Speedup float64 `json:"speedup"`
	// PredictedSpeedup is what the measured costs predict: τ committed tokens per round of
	// draft + verify + rollback milliseconds, against the autoregressive milliseconds per token.
	PredictedSpeedup float64 `json:"predicted_speedup"`
	// Arms is what the figure's rounds ran, arm by arm (plain steps, chains of each block size, trees of each
	// node budget), over every measured run: where the adaptive policy spent its time and what each arm
	// cost and committed there.
	Arms []BenchArm `json:"arms,omitempty"`
}

// BenchArm is one arm of a speculative figure (BenchSpec.Arms): plain steps, chains of one block size, or
// trees of one node budget.
type BenchArm struct {
	// Arm is "plain", "chain N" (N rows) or "tree N" (at most N nodes).
	Arm string `json:"arm"`
	// Rounds is how many rounds ran the arm; Probes how many of them the adaptive policy ran to measure it
	// (its probes and its exploring rounds) rather than as its choice.
	Rounds int `json:"rounds"`
	Probes int `json:"probes"`
	// Tau is the tokens a round committed (the accepted drafts and the bonus token; a round the stop or the
	// token budget cut, what it kept).
	Tau float64 `json:"tau"`
	// MsPerRound is a round's draft, verify and rollback time, the mean over the arm's rounds, and MsPerToken
	// that time over the tokens committed. Neither counts what a round does between those phases (the
	// policy's choice, accepting, emitting): compare them with BenchAR.StepMs, a plain step timed the same way.
	MsPerRound float64 `json:"ms_per_round"`
	MsPerToken float64 `json:"ms_per_token"`
	// TimeShare is the arm's part of all the figure's round time.
	TimeShare float64 `json:"time_share"`
}

// BenchResult is the JSON object `higgs-verify bench --json` prints. Throughput is decode throughput (the
// tokens after the first, which comes from the prefill, over the decode time), the median over runs; each
// speedup is the median of per-run ratios against the autoregressive run of the same prompt and pass.
type BenchResult struct {
	Model     string      `json:"model"`
	Backend   string      `json:"backend"`
	AR        BenchAR     `json:"ar"`
	Spec      BenchSpec   `json:"spec"`
	Speedup   float64     `json:"speedup"`
	Adaptive  *BenchSpec  `json:"adaptive,omitempty"`
	Sweep     []BenchSpec `json:"sweep,omitempty"`
	Trees     []BenchSpec `json:"trees,omitempty"`
	Prompts   int         `json:"prompts"`
	MaxTokens int         `json:"max_tokens"`
	Repeats   int         `json:"repeats"`
	Warmup    int         `json:"warmup"`
	// Temperature, Seed and Verify describe sampled runs (absent when greedy).
	Temperature float64 `json:"temperature,omitempty"`
	Seed        uint64  `json:"seed,omitempty"`
	Verify      string  `json:"verify,omitempty"`
	// MultiTurn is the multi-turn prefix-cache scenario (bench --multi-turn).
	MultiTurn *MultiTurnResult `json:"multi_turn,omitempty"`
	// Costs are the target's kernel costs (bench --kernel-costs).
	Costs *KernelCosts `json:"costs,omitempty"`
	// Constrained is constrained decoding's cost, the mask cost per token among it (bench --constrain).
	Constrained *ConstrainedBench `json:"constrained,omitempty"`
	// Clients are the concurrent-clients figures (bench --clients), one row per client count, and
	// ClientsBatch how their rounds ran (batched calls or one item after another).
	Clients      []BenchClientsRow `json:"clients,omitempty"`
	ClientsBatch *BenchClientsMeta `json:"clients_batch,omitempty"`
}

type benchAcc struct {
	tps []float64
	// ratio holds tps / the autoregressive tps of the same prompt and pass.
	ratio                     []float64
	draft, verify, rollback   []float64
	rounds, committed, tokens int
	rows                      int
	arms                      map[armKey]*armAcc
}

// armKey names an arm of rounds: plain steps (plainArm), chains of n rows (chainArm), trees of at most n nodes
// (treeArm); kind then n is the order of BenchSpec.Arms.
type armKey struct{ kind, n int }

// The kinds of armKey.
const (
	plainArm = iota
	chainArm
	treeArm
)

type armAcc struct {
	rounds, probes, committed int
	ms                        float64
}

// addRound counts rs in its arm.
func (a *benchAcc) addRound(rs speculative.RoundStats) {
	k := armKey{plainArm, 1}
	switch {
	case rs.Tree != nil:
		k = armKey{treeArm, rs.Decision.Tree} // a tree round always has its budget (its decision's)
	case rs.BlockSize > 1:
		k = armKey{chainArm, rs.BlockSize}
	}
	if a.arms == nil {
		a.arms = map[armKey]*armAcc{}
	}
	arm := a.arms[k]
	if arm == nil {
		arm = &armAcc{}
		a.arms[k] = arm
	}
	arm.rounds++
	arm.committed += rs.Committed
	arm.ms += ms(rs.DraftTime) + ms(rs.VerifyTime) + ms(rs.RollbackTime)
	if rs.Measuring() {
		arm.probes++
	}
}

// armsOf returns the arms a counted, plain steps first, then chains and trees, smallest first.
func (a *benchAcc) armsOf() []BenchArm {
	keys := slices.SortedFunc(maps.Keys(a.arms), func(x, y armKey) int {
		return cmp.Or(cmp.Compare(x.kind, y.kind), cmp.Compare(x.n, y.n))
	})
	total := 0.0
	for _, k := range keys {
		total += a.arms[k].ms
	}
	out := make([]BenchArm, 0, len(keys))
	for _, k := range keys {
		arm := a.arms[k]
		b := BenchArm{Arm: [...]string{"plain", "chain", "tree"}[k.kind], Rounds: arm.rounds, Probes: arm.probes,
			Tau: float64(arm.committed) / float64(arm.rounds), MsPerRound: arm.ms / float64(arm.rounds)}
		if arm.committed > 0 {
			b.MsPerToken = arm.ms / float64(arm.committed)
		}
		if k.kind != plainArm {
			b.Arm += fmt.Sprintf(" %d", k.n)
		}
		if total > 0 {
			b.TimeShare = arm.ms / total
		}
		out = append(out, b)
	}
	return out
}

func (a *benchAcc) spec(bs int, adaptive bool) BenchSpec {
	s := BenchSpec{TokensPerS: median(a.tps), DraftMsPerRound: median(a.draft), VerifyMsPerRound: median(a.verify),
		RollbackMsPerRnd: median(a.rollback), BlockSize: bs, Adaptive: adaptive, Rounds: a.rounds, Runs: len(a.tps),
		Tokens: a.tokens}
	if a.rounds > 0 {
		s.Tau = float64(a.committed) / float64(a.rounds)
		s.RowsPerRound = float64(a.rows) / float64(a.rounds)
	}
	for k, arm := range a.arms {
		if k.kind == treeArm {
			s.TreeRounds += arm.rounds
		}
	}
	s.Arms = a.armsOf()
	if s.TokensPerS > 0 {
		s.MsPerToken = 1000 / s.TokensPerS
	}
	return s
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Bench decodes the same prompts autoregressively and speculatively, interleaved run by run, after warm-up
// passes, and reports medians.
// It is one function because the interleaving of runs is the measurement (plain and speculative runs of a
// prompt side by side); the scenarios beside the main figure are their own functions.
func Bench(ctx context.Context, m *models.Models, o BenchOptions) (BenchResult, error) {
	// No zero-means-default here: the caller's 0 would silently measure something else than asked.
	if o.MaxTokens < 1 || o.Repeats < 1 || o.Warmup < 0 {
		return BenchResult{}, fmt.Errorf("%w: --max-tokens %d and --repeats %d must be ≥ 1, --warmup %d ≥ 0",
			ErrBadInput, o.MaxTokens, o.Repeats, o.Warmup)
	}
	res := BenchResult{Model: m.Name, Backend: m.Backend, Prompts: len(o.Prompts), MaxTokens: o.MaxTokens,
		Repeats: o.Repeats, Warmup: o.Warmup}
	if !o.Sampling.Greedy() {
		res.Temperature, res.Seed, res.Verify = o.Sampling.Temperature, o.Seed, o.Verify.String()
	}
	if m.Drafter == nil {
		return res, fmt.Errorf("%w: bench needs a drafter (--draft DIR)", ErrBadInput)
	}
	if len(o.Prompts) == 0 {
		return res, fmt.Errorf("%w: no prompts", ErrBadInput)
	}
	type variant struct {
		bs       int
		adaptive bool
		acc      benchAcc
		// mem carries the adaptive policy's measurements from run to run (warm-up included), as a server
		// keeps them across requests: a 128-token generation is too short to amortise exploring afresh.
		mem *speculative.PolicyMemory
		// tree is the variant's tree verification (a zero budget: chains).
		tree speculative.TreeConfig
	}
	bs := o.BlockSize
	if bs == 0 {
		bs = m.Drafter.BlockSize()
	}
	// generation.TreeAuto resolves per request as higgsd's default does: trees up to the block size under the
	// adaptive policy, chains for a fixed block.
	mainTree := speculative.TreeConfig{Budget: o.TreeBudget, Width: o.TreeWidth, FullDraft: o.TreeFullDraft}
	variants := []*variant{{bs: 1}, {bs: bs, adaptive: o.Adaptive, mem: speculative.NewPolicyMemory(), tree: mainTree}}
	if len(o.Sweep) > 0 {
		if !o.Adaptive {
			variants = append(variants, &variant{bs: m.Drafter.BlockSize(), adaptive: true, mem: speculative.NewPolicyMemory(), tree: mainTree})
		}
		for _, b := range o.Sweep {
			if n := m.Target.Info().ContextLength; b < 2 || (n > 0 && b > n) {
				return res, fmt.Errorf("%w: sweep block size %d outside 2..%d (the context length)", ErrBadInput, b, n)
			}
			if b == bs && !o.Adaptive || slices.ContainsFunc(variants[2:], func(v *variant) bool { return v.bs == b && !v.adaptive }) {
				// Already measured as the main figure (or listed twice): one row per configuration.
				continue
			}
			variants = append(variants, &variant{bs: b})
		}
	}
	sweepEnd := len(variants)
	for _, b := range o.Trees {
		if b < 2 {
			return res, fmt.Errorf("%w: tree budget %d must be ≥ 2", ErrBadInput, b)
		}
		variants = append(variants, &variant{bs: bs, tree: speculative.TreeConfig{Budget: b, Width: o.TreeWidth, FullDraft: o.TreeFullDraft}})
	}
	for pass := range o.Warmup + o.Repeats {
		for pi, p := range o.Prompts {
			// The variants of one prompt run back to back, starting each time from the next one, so none of
			// them always runs first (after the previous prompt's longest run) or last.
			tps := make([]float64, len(variants))
			first := (pass + pi) % len(variants)
			for k := range variants {
				vi := (first + k) % len(variants)
				v := variants[vi]
				g := GenerateOptions{Request: generation.Request{Prompt: p, MaxTokens: o.MaxTokens, StopIDs: o.StopIDs, NoEOS: o.NoEOS, BlockSize: v.bs, Adaptive: v.adaptive, PolicyMemory: v.mem, Sampling: o.Sampling, Seed: o.Seed + uint64(pass*len(o.Prompts)+pi), Verify: o.Verify, Tree: &v.tree}, Speculative: v.bs > 1}
				r, _, err := runDecoder(ctx, m, g)
				if err != nil {
					return res, err
				}
				if pass < o.Warmup {
					continue
				}
				st := r.Stats
				n := len(r.Tokens) - 1
				if n <= 0 || st.DecodeTime <= 0 {
					continue
				}
				a := &v.acc
				tps[vi] = float64(n) / st.DecodeTime.Seconds()
				a.tps = append(a.tps, tps[vi])
				a.tokens += len(r.Tokens)
				for _, rs := range st.Rounds {
					a.addRound(rs) // every variant's, the autoregressive one's too (BenchAR.StepMs)
				}
				if k := st.NumRounds(); k > 0 && v.bs > 1 {
					var dr, vr, rb float64
					for _, rs := range st.Rounds {
						dr += ms(rs.DraftTime)
						vr += ms(rs.VerifyTime)
						rb += ms(rs.RollbackTime)
						a.committed += rs.Accepted + 1
						a.rows += rs.BlockSize
					}
					a.rounds += k
					a.draft = append(a.draft, dr/float64(k))
					a.verify = append(a.verify, vr/float64(k))
					a.rollback = append(a.rollback, rb/float64(k))
				}
			}
			if tps[0] > 0 {
				for vi, v := range variants[1:] {
					if t := tps[vi+1]; t > 0 {
						v.acc.ratio = append(v.acc.ratio, t/tps[0])
					}
				}
			}
		}
	}
	ar := variants[0].acc
	res.AR = BenchAR{TokensPerS: median(ar.tps), Runs: len(ar.tps), Tokens: ar.tokens}
	if arms := ar.armsOf(); len(arms) == 1 {
		res.AR.StepMs = arms[0].MsPerRound
	}
	if res.AR.TokensPerS > 0 {
		res.AR.MsPerToken = 1000 / res.AR.TokensPerS
	}
	speed := func(s BenchSpec, a *benchAcc) BenchSpec {
		s.Speedup = median(a.ratio)
		if round := s.DraftMsPerRound + s.VerifyMsPerRound + s.RollbackMsPerRnd; round > 0 && res.AR.MsPerToken > 0 {
			s.PredictedSpeedup = s.Tau * res.AR.MsPerToken / round
		}
		return s
	}
	spec := func(v *variant) BenchSpec {
		s := speed(v.acc.spec(v.bs, v.adaptive), &v.acc)
		s.Tree = v.tree.Budget
		if s.Tree == generation.TreeAuto {
			s.Tree = 0
			if v.adaptive {
				s.Tree = v.bs
			}
		}
		return s
	}
	res.Spec = spec(variants[1])
	res.Speedup = res.Spec.Speedup
	rest := variants[2:sweepEnd]
	if len(o.Sweep) > 0 && !o.Adaptive {
		a := spec(rest[0])
		res.Adaptive = &a
		rest = rest[1:]
	}
	for _, v := range rest {
		res.Sweep = append(res.Sweep, spec(v))
	}
	for _, v := range variants[sweepEnd:] {
		res.Trees = append(res.Trees, spec(v))
	}
	if o.MultiTurn != nil {
		mt, err := MultiTurn(ctx, m, o, *o.MultiTurn)
		if err != nil {
			return res, err
		}
		res.MultiTurn = &mt
	}
	if o.Costs != nil {
		kc, err := MeasureCosts(ctx, m, o.Prompts, *o.Costs)
		if err != nil {
			return res, err
		}
		res.Costs = &kc
	}
	if o.Constrain != nil {
		cb, err := measureConstrained(ctx, m, o, variants[1].bs, res.Spec.Tau)
		if err != nil {
			return res, err
		}
		res.Constrained = &cb
	}
	if o.Clients != nil {
		rows, meta, err := benchClients(ctx, m, o, *o.Clients)
		if err != nil {
			return res, err
		}
		res.Clients, res.ClientsBatch = rows, &meta
	}
	return res, nil
}
