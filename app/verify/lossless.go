package verify

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// DefaultBlockSizes are the block sizes lossless checks when none are given, below or above the drafter's
// block_size alike (the drafter's own is added when it is not among them).
var DefaultBlockSizes = []int{2, 4, 8, 16}

// Distribution-test defaults. The test compares plain sampling with speculative sampling over the first
// DistTokens generated tokens: one two-sample chi-square test of homogeneity for each position's marginal
// distribution and one for their joint distribution (cells with an expected count below 5 are pooled, the usual
// validity rule). With the Bonferroni correction it fails when any p-value is below DistPValue divided by the
// number of tests, so a correct sampler fails at most one run in a thousand by chance — and since the seeds
// are fixed, a given configuration passes or fails reproducibly.
const (
	DefaultDistSamples = 300
	DistTokens         = 3
	DistPValue         = 1e-3
	// distMinExpected is the smallest expected count per cell; rarer categories are pooled.
	distMinExpected = 5
)

// LosslessOptions configure `higgs-verify lossless`.
type LosslessOptions struct {
	Prompts    [][]ports.Token
	BlockSizes []int // nil: DefaultBlockSizes and the drafter's block size
	MaxTokens  int   // generated tokens per run
	StopIDs    []ports.Token
	NoEOS      bool
	Rollbacks  []speculative.RollbackMode // nil: the domain's cost model only
	// Temperature > 0 adds the seeded distribution test (the greedy comparison always runs) and, under
	// VerifyMatch, the seeded comparison: speculative sampling with the seed must give plain sampling's tokens
	// with that seed, token for token, for every prompt and block size.
	Temperature float64
	Seed        uint64
	Samples     int // per sampler; 0: DefaultDistSamples
	// Verify is how sampled drafts are verified (VerifyMatch: reproducible; VerifyResidual: rejection
	// sampling).
	Verify speculative.Verification
	// Tree, when non-nil, is the tree verification of the distribution test's speculative samples (certify's
	// tree section; trees need VerifyMatch at T > 0; a zero Budget: chains); nil: the engine's.
	Tree *speculative.TreeConfig
}

// LosslessCase is one prompt × block size × rollback comparison.
type LosslessCase struct {
	Prompt    int     `json:"prompt"`
	BlockSize int     `json:"block_size"`
	Rollback  string  `json:"rollback"`
	Tokens    int     `json:"tokens"`
	Match     bool    `json:"match"`
	Tau       float64 `json:"tau"`
	Rounds    int     `json:"rounds"`
	// Adaptive marks a seeded case run under the adaptive depth policy (≤ BlockSize).
	Adaptive bool `json:"adaptive,omitempty"`
}

// Mismatch locates the first differing token. Temperature is 0 for the greedy comparison and the sampling
// temperature for the seeded one.
type Mismatch struct {
	Prompt    int         `json:"prompt"`
	BlockSize int         `json:"block_size"`
	Rollback  string      `json:"rollback"`
	Position  int         `json:"position"` // index into the generated tokens
	AR        ports.Token `json:"ar_token"` // -1 when the AR output ended first
	Spec      ports.Token `json:"spec_token"`
	// Temperature, Seed and Adaptive say which comparison failed: temperature 0 is the greedy one.
	Temperature float64 `json:"temperature,omitempty"`
	Seed        uint64  `json:"seed,omitempty"`
	Adaptive    bool    `json:"adaptive,omitempty"`
}

// DistStat is one chi-square test of homogeneity.
type DistStat struct {
	Chi2       float64 `json:"chi2"`
	DoF        int     `json:"dof"`
	Categories int     `json:"categories"`
	PValue     float64 `json:"p_value"`
}

// DistTest is the result of the seeded distribution test. Chi2, DoF, Categories and PValue are those of the
// test with the smallest p-value; it passes when that p-value is at least Threshold/Tests (Bonferroni).
type DistTest struct {
	Temperature float64    `json:"temperature"`
	BlockSize   int        `json:"block_size"`
	Samples     int        `json:"samples"`
	Tokens      int        `json:"tokens"`
	Categories  int        `json:"categories"`
	Chi2        float64    `json:"chi2"`
	DoF         int        `json:"dof"`
	PValue      float64    `json:"p_value"`
	Threshold   float64    `json:"threshold"`
	Tests       int        `json:"tests"`
	Joint       DistStat   `json:"joint"`
	Positions   []DistStat `json:"positions"`
	Pass        bool       `json:"pass"`
	// Budget is the node budget of the speculative samples' trees (absent for chains); TreeRounds of
	// DraftRounds, over the speculative samples, verified a tree.
	Budget      int `json:"budget,omitempty"`
	DraftRounds int `json:"draft_rounds,omitempty"`
	TreeRounds  int `json:"tree_rounds,omitempty"`
}

// LosslessResult is the JSON object `higgs-verify lossless --json` prints.
type LosslessResult struct {
	Model         string         `json:"model"`
	Backend       string         `json:"backend"`
	Pass          bool           `json:"pass"`
	Cases         []LosslessCase `json:"cases"`
	FirstMismatch *Mismatch      `json:"first_mismatch,omitempty"`
	Distribution  *DistTest      `json:"distribution,omitempty"`
	// Verify names the verification of the sampled runs (residual or match) when Temperature > 0.
	Verify string `json:"verify,omitempty"`
	// SeededCases are the seeded comparisons (Temperature > 0 under match): speculative against plain
	// sampling with the same seed, token for token.
	SeededCases []LosslessCase `json:"seeded_cases,omitempty"`
}

// blockSizes are the sizes to check: o.BlockSizes, each at least 2 and within the context length (ctxLen; 0:
// no bound), or the defaults.
func (o LosslessOptions) blockSizes(drafterBS, ctxLen int) ([]int, error) {
	if o.BlockSizes == nil {
		out := slices.Clone(DefaultBlockSizes)
		if !slices.Contains(out, drafterBS) && drafterBS >= 2 {
			out = append(out, drafterBS)
			slices.Sort(out)
		}
		return out, nil
	}
	for _, b := range o.BlockSizes {
		if b < 2 || (ctxLen > 0 && b > ctxLen) {
			return nil, fmt.Errorf("%w: block size %d outside 2..%d (the context length)", ErrBadInput, b, ctxLen)
		}
	}
	return o.BlockSizes, nil
}

// Lossless runs greedy autoregressive and greedy speculative decoding on every prompt and block size and stops
// at the first differing token (ErrCheckFailed). With Temperature > 0 it then runs the distribution test.
func Lossless(ctx context.Context, m *models.Models, o LosslessOptions) (LosslessResult, error) {
	res := LosslessResult{Model: m.Name, Backend: m.Backend, Pass: true, Cases: []LosslessCase{}}
	if m.Drafter == nil {
		return res, fmt.Errorf("%w: lossless needs a drafter (--draft DIR)", ErrBadInput)
	}
	if len(o.Prompts) == 0 {
		return res, fmt.Errorf("%w: no prompts", ErrBadInput)
	}
	// A NaN temperature would skip the distribution test (NaN > 0 is false) and a negative sample count would
	// quietly become the default: refuse both rather than report a pass for a test that did not run as asked.
	if err := (ports.SamplingParams{Temperature: o.Temperature}).Validate(); err != nil {
		return res, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	if o.Samples < 0 {
		return res, fmt.Errorf("%w: samples %d must be ≥ 0 (0: %d)", ErrBadInput, o.Samples, DefaultDistSamples)
	}
	sizes, err := o.blockSizes(m.Drafter.BlockSize(), m.Target.Info().ContextLength)
	if err != nil {
		return res, err
	}
	rbs := o.Rollbacks
	if len(rbs) == 0 {
		rbs = []speculative.RollbackMode{speculative.RollbackAuto}
	}
	for pi, prompt := range o.Prompts {
		base := GenerateOptions{Request: generation.Request{Prompt: prompt, MaxTokens: o.MaxTokens, StopIDs: o.StopIDs, NoEOS: o.NoEOS}}
		ar, _, err := runDecoder(ctx, m, base)
		if err != nil {
			return res, fmt.Errorf("prompt %d, autoregressive: %w", pi, err)
		}
		for _, bs := range sizes {
			for _, rb := range rbs {
				so := base
				so.Speculative, so.BlockSize, so.Rollback = true, bs, rb
				sp, _, err := runDecoder(ctx, m, so)
				if err != nil {
					return res, fmt.Errorf("prompt %d, block size %d, rollback %s: %w", pi, bs, rb, err)
				}
				c := LosslessCase{Prompt: pi, BlockSize: bs, Rollback: rb.String(), Tokens: len(sp.Tokens),
					Tau: sp.Stats.Tau(), Rounds: sp.Stats.NumRounds(), Match: true}
				if pos, ok := firstDiff(ar.Tokens, sp.Tokens); !ok {
					c.Match = false
					res.Cases = append(res.Cases, c)
					res.Pass = false
					res.FirstMismatch = &Mismatch{Prompt: pi, BlockSize: bs, Rollback: rb.String(), Position: pos,
						AR: at(ar.Tokens, pos), Spec: at(sp.Tokens, pos)}
					return res, fmt.Errorf("%w: prompt %d, block size %d: generated token %d differs (autoregressive %d, speculative %d)",
						ErrCheckFailed, pi, bs, pos, at(ar.Tokens, pos), at(sp.Tokens, pos))
				}
				res.Cases = append(res.Cases, c)
			}
		}
	}
	if o.Temperature > 0 {
		res.Verify = o.Verify.String()
	}
	if o.Temperature > 0 && o.Verify == speculative.VerifyMatch {
		if err := seededComparison(ctx, m, o, sizes, &res); err != nil {
			return res, err
		}
	}
	if o.Temperature > 0 {
		dt, err := distributionTest(ctx, m, o, sizes[len(sizes)-1])
		res.Distribution = &dt
		if err != nil {
			res.Pass = false
			return res, err
		}
	}
	return res, nil
}

// seededComparison runs plain sampling and speculative sampling with the same seed (o.Seed) on every prompt
// and block size, fixed and under the adaptive policy, and stops at the first differing token (ErrCheckFailed):
// under sample-and-match the output is a function of the seed alone.
func seededComparison(ctx context.Context, m *models.Models, o LosslessOptions, sizes []int, res *LosslessResult) error {
	params := ports.SamplingParams{Temperature: o.Temperature}
	res.SeededCases = []LosslessCase{}
	for pi, prompt := range o.Prompts {
		base := GenerateOptions{Request: generation.Request{Prompt: prompt, MaxTokens: o.MaxTokens, StopIDs: o.StopIDs, NoEOS: o.NoEOS, Sampling: params, Seed: o.Seed, Verify: o.Verify}}
		plain, _, err := runDecoder(ctx, m, base)
		if err != nil {
			return fmt.Errorf("prompt %d, seeded plain sampling: %w", pi, err)
		}
		for _, bs := range sizes {
			for _, adaptive := range []bool{false, true} {
				so := base
				so.Speculative, so.BlockSize, so.Adaptive = true, bs, adaptive
				sp, _, err := runDecoder(ctx, m, so)
				if err != nil {
					return fmt.Errorf("prompt %d, block size %d, seeded: %w", pi, bs, err)
				}
				rb := speculative.RollbackAuto.String()
				c := LosslessCase{Prompt: pi, BlockSize: bs, Rollback: rb, Tokens: len(sp.Tokens),
					Tau: sp.Stats.Tau(), Rounds: sp.Stats.NumRounds(), Match: true, Adaptive: adaptive}
				if pos, ok := firstDiff(plain.Tokens, sp.Tokens); !ok {
					c.Match = false
					res.SeededCases = append(res.SeededCases, c)
					res.Pass = false
					res.FirstMismatch = &Mismatch{Prompt: pi, BlockSize: bs, Rollback: rb, Position: pos,
						AR: at(plain.Tokens, pos), Spec: at(sp.Tokens, pos), Temperature: o.Temperature, Seed: o.Seed,
						Adaptive: adaptive}
					return fmt.Errorf("%w: prompt %d, block size %d (adaptive %v), T %g seed %d: generated token %d differs (plain sampling %d, speculative %d)",
						ErrCheckFailed, pi, bs, adaptive, o.Temperature, o.Seed, pos, at(plain.Tokens, pos), at(sp.Tokens, pos))
				}
				res.SeededCases = append(res.SeededCases, c)
			}
		}
	}
	return nil
}

func at(t []ports.Token, i int) ports.Token {
	if i < len(t) {
		return t[i]
	}
	return ports.NoToken
}

// firstDiff returns the first index where a and b differ (including one ending early).
func firstDiff(a, b []ports.Token) (int, bool) {
	for i := range max(len(a), len(b)) {
		if at(a, i) != at(b, i) {
			return i, false
		}
	}
	return 0, true
}

// distributionTest samples the first DistTokens tokens of prompt 0 Samples times with plain sampling and
// Samples times with speculative sampling (disjoint seeds) and compares the two empirical distributions.
func distributionTest(ctx context.Context, m *models.Models, o LosslessOptions, bs int) (DistTest, error) {
	n := o.Samples
	if n <= 0 {
		n = DefaultDistSamples
	}
	dt := DistTest{Temperature: o.Temperature, BlockSize: bs, Samples: n, Tokens: DistTokens, Threshold: DistPValue,
		PValue: 1}
	trees := o.Tree != nil && o.Tree.Budget != 0
	if trees {
		dt.Budget = o.Tree.Budget
	}
	sample := func(spec bool, seed uint64) ([]ports.Token, error) {
		g := GenerateOptions{Request: generation.Request{Prompt: o.Prompts[0], MaxTokens: DistTokens, StopIDs: o.StopIDs, NoEOS: o.NoEOS, Sampling: ports.SamplingParams{Temperature: o.Temperature}, Seed: seed, Verify: o.Verify}, Speculative: spec}
		if spec {
			g.BlockSize = bs
			g.Tree = o.Tree
		}
		r, _, err := runDecoder(ctx, m, g)
		if spec && trees {
			for _, rs := range r.Stats.Rounds {
				if rs.Drafting() {
					dt.DraftRounds++
				}
				if rs.Tree != nil {
					dt.TreeRounds++
				}
			}
		}
		return r.Tokens, err
	}
	// keys[0] is the joint outcome; keys[1+j] the token at position j ("" when generation stopped earlier).
	ar := make([][]string, DistTokens+1)
	sp := make([][]string, DistTokens+1)
	add := func(dst [][]string, toks []ports.Token) {
		dst[0] = append(dst[0], fmt.Sprint(toks))
		for j := range DistTokens {
			k := ""
			if j < len(toks) {
				k = fmt.Sprint(toks[j])
			}
			dst[1+j] = append(dst[1+j], k)
		}
	}
	for i := range n {
		a, err := sample(false, o.Seed+uint64(2*i))
		if err != nil {
			return dt, fmt.Errorf("distribution test, plain sample %d: %w", i, err)
		}
		s, err := sample(true, o.Seed+uint64(2*i+1))
		if err != nil {
			return dt, fmt.Errorf("distribution test, speculative sample %d: %w", i, err)
		}
		add(ar, a)
		add(sp, s)
	}
	dt.Tests = len(ar)
	for j := range ar {
		chi2, dof, cats := chiSquareHomogeneity(ar[j], sp[j])
		p := 1.0
		if dof > 0 {
			p = chiSquareSurvival(chi2, dof)
		}
		st := DistStat{Chi2: chi2, DoF: dof, Categories: cats, PValue: p}
		if j == 0 {
			dt.Joint = st
		} else {
			dt.Positions = append(dt.Positions, st)
		}
		if p < dt.PValue {
			dt.PValue, dt.Chi2, dt.DoF, dt.Categories = p, chi2, dof, cats
		}
	}
	dt.Pass = dt.PValue >= DistPValue/float64(dt.Tests)
	if !dt.Pass {
		return dt, fmt.Errorf("%w: speculative sampling's distribution differs from plain sampling (chi2 %.2f, %d dof, p %.2g < %g/%d)",
			ErrCheckFailed, dt.Chi2, dt.DoF, dt.PValue, DistPValue, dt.Tests)
	}
	return dt, nil
}

// chiSquareHomogeneity is the two-sample chi-square statistic over the categories of a and b (equal sizes
// not required). Categories whose expected count falls below distMinExpected in either sample are pooled
// into one; if the pool itself is too small it is merged into the smallest remaining category.
func chiSquareHomogeneity(a, b []string) (chi2 float64, dof, cats int) {
	ca, cb := map[string]int{}, map[string]int{}
	for _, x := range a {
		ca[x]++
	}
	for _, x := range b {
		cb[x]++
	}
	keys := map[string]bool{}
	for k := range ca {
		keys[k] = true
	}
	for k := range cb {
		keys[k] = true
	}
	na, nb := float64(len(a)), float64(len(b))
	n := na + nb
	type cell struct{ a, b int }
	var cells []cell
	pool := cell{}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		tot := float64(ca[k] + cb[k])
		if tot*min(na, nb)/n < distMinExpected {
			pool.a += ca[k]
			pool.b += cb[k]
			continue
		}
		cells = append(cells, cell{ca[k], cb[k]})
	}
	if pool.a+pool.b > 0 {
		if float64(pool.a+pool.b)*min(na, nb)/n >= distMinExpected || len(cells) == 0 {
			cells = append(cells, pool)
		} else {
			i := 0
			for j := range cells {
				if cells[j].a+cells[j].b < cells[i].a+cells[i].b {
					i = j
				}
			}
			cells[i].a += pool.a
			cells[i].b += pool.b
		}
	}
	for _, c := range cells {
		tot := float64(c.a + c.b)
		ea, eb := tot*na/n, tot*nb/n
		chi2 += (float64(c.a)-ea)*(float64(c.a)-ea)/ea + (float64(c.b)-eb)*(float64(c.b)-eb)/eb
	}
	return chi2, len(cells) - 1, len(cells)
}

// chiSquareSurvival returns P(X ≥ x) for X ~ χ²(k): the regularized upper incomplete gamma Q(k/2, x/2).
func chiSquareSurvival(x float64, k int) float64 {
	if x <= 0 {
		return 1
	}
	return gammaQ(float64(k)/2, x/2)
}

// gammaQ is the regularized upper incomplete gamma function (series below a+1, continued fraction above).
func gammaQ(a, x float64) float64 {
	lg, _ := math.Lgamma(a)
	if x < a+1 {
		sum, del := 1/a, 1/a
		for n := 1; n < 1000; n++ {
			del *= x / (a + float64(n))
			sum += del
			if math.Abs(del) < math.Abs(sum)*1e-15 {
				break
			}
		}
		return 1 - sum*math.Exp(-x+a*math.Log(x)-lg)
	}
	const tiny = 1e-300
	b := x + 1 - a
	c, d := 1/tiny, 1/b
	h := d
	for i := 1; i < 1000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return math.Exp(-x+a*math.Log(x)-lg) * h
}

// ParseVerification maps "residual" and "match" to a speculative.Verification.
func ParseVerification(s string) (speculative.Verification, error) {
	for _, v := range []speculative.Verification{speculative.VerifyResidual, speculative.VerifyMatch} {
		if strings.EqualFold(s, v.String()) {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown verification %q (want match or residual)", ErrBadInput, s)
}

// ParseRollback maps "auto", "replay", "recompute" to a RollbackMode.
func ParseRollback(s string) (speculative.RollbackMode, error) {
	for _, m := range []speculative.RollbackMode{speculative.RollbackAuto, speculative.RollbackReplay, speculative.RollbackRecompute} {
		if strings.EqualFold(s, m.String()) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown rollback mode %q (want auto, replay or recompute)", ErrBadInput, s)
}
