package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// Certify's defaults.
const (
	// CertifyMaxBlockSize is the largest block size certify tries by default (1..16).
	CertifyMaxBlockSize = 16
	// DefaultCertifyBatch is the number of generations of the batched runs.
	DefaultCertifyBatch = 8
	// DefaultCertifyTemperature is the distribution test's temperature.
	DefaultCertifyTemperature = 0.7
	// certifyCacheBytes bounds the prefix cache of the prefix-hit runs.
	certifyCacheBytes = 4 << 30
	// DefaultCertifyTreeWidth is the tree section's candidates per draft slot.
	DefaultCertifyTreeWidth = 4
	// minTreeBlockSize is the smallest block size the tree section runs: at 2 a tree is one slot's
	// candidates side by side, which every larger tree holds as its first level.
	minTreeBlockSize = 3
)

// DefaultCertifyTreeBudgets are the tree section's node budgets (anchor included) at each block size: small,
// middle and large trees, each verified in one forward.
var DefaultCertifyTreeBudgets = []int{4, 8, 16}

// The run modes of each block size: alone or in a batch, each without and with a prefix-cache hit.
const (
	ModeAlone          = "alone"
	ModeAlonePrefixHit = "alone+prefix_hit"
	ModeBatch          = "batch"
	ModeBatchPrefixHit = "batch+prefix_hit"
)

// CertifyTolerance is what a certificate calls a pass.
var CertifyTolerance = fmt.Sprintf("greedy: every speculative token equal to plain greedy decoding's (0 disagreements); T > 0: chi-square homogeneity, every p ≥ %g/tests (Bonferroni)", DistPValue)

// CertifyOptions configure `higgs-verify certify`.
type CertifyOptions struct {
	Prompts [][]ports.Token
	// PromptSource names the prompt set in the report ("built-in", a file name, "--prompt").
	PromptSource string
	// BlockSizes are the sizes to try (nil: 1..CertifyMaxBlockSize), below or above the drafter's configured
	// block size; those the context cannot hold are listed as not run.
	BlockSizes []int
	MaxTokens  int
	StopIDs    []ports.Token
	NoEOS      bool
	// Batch is the number of generations decoded together in the batched modes (0: no batched runs).
	Batch int
	// NoPrefixCache leaves out the prefix-hit modes.
	NoPrefixCache bool
	// Temperature > 0 runs the distribution test (Samples per sampler, Seed, Verify) at the largest size run.
	Temperature float64
	Seed        uint64
	Samples     int
	Verify      string
	// TreeBudgets are the tree section's node budgets (nil: DefaultCertifyTreeBudgets), run at each block
	// size ≥ 3 of the chain section whose tree can hold them; TreeWidth its candidates per slot (0:
	// DefaultCertifyTreeWidth); NoTrees leaves the tree section out.
	TreeBudgets []int
	TreeWidth   int
	NoTrees     bool
	// Clock stamps the certificate (nil: the system clock).
	Clock ports.Clock
}

func (o CertifyOptions) check(m *models.Models) error {
	var errs []error
	if m.Drafter == nil {
		errs = append(errs, errors.New("certify needs a drafter (--draft DIR)"))
	}
	if len(o.Prompts) == 0 || slices.ContainsFunc(o.Prompts, func(p []ports.Token) bool { return len(p) == 0 }) {
		errs = append(errs, errors.New("certify needs non-empty prompts"))
	}
	if o.MaxTokens <= 0 {
		errs = append(errs, fmt.Errorf("max tokens %d must be > 0", o.MaxTokens))
	}
	if o.Batch < 0 {
		errs = append(errs, fmt.Errorf("batch %d must be ≥ 0 (0: no batched runs)", o.Batch))
	}
	if o.Samples < 0 {
		errs = append(errs, fmt.Errorf("samples %d must be ≥ 0 (0: %d)", o.Samples, DefaultDistSamples))
	}
	if err := (ports.SamplingParams{Temperature: o.Temperature}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Temperature > 0 {
		// Checked before any run, not after them all.
		if _, err := ParseVerification(o.Verify); err != nil {
			errs = append(errs, fmt.Errorf("verification %q: want match or residual", o.Verify))
		}
	}
	for _, b := range o.BlockSizes {
		if b < 1 {
			errs = append(errs, fmt.Errorf("block size %d must be ≥ 1", b))
		}
	}
	if o.TreeBudgets != nil && len(o.TreeBudgets) == 0 {
		errs = append(errs, errors.New("tree budgets: give at least one, or leave trees out (--no-trees)"))
	}
	for _, b := range o.TreeBudgets {
		if b < 2 {
			errs = append(errs, fmt.Errorf("tree budget %d must be ≥ 2 (the anchor and one candidate)", b))
		}
	}
	if o.TreeWidth < 0 {
		errs = append(errs, fmt.Errorf("tree width %d must be ≥ 1 (0: %d)", o.TreeWidth, DefaultCertifyTreeWidth))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return nil
}

// Certify runs `higgs-verify certify`: plain greedy decoding of every prompt as the reference, then greedy
// speculative decoding (chain) at every block size the drafter allows, in each mode — alone, alone after a
// prefix-cache hit, in a batch of o.Batch, in a batch after prefix-cache hits — then trees (certifyTrees) at
// those sizes from 3 and each budget, each run compared token for token with the reference; every
// disagreement is listed with the target's top-2 margin. With Temperature > 0 the distribution test follows,
// for chains and, when trees were verified, for trees. The certificate is returned whole; the error wraps
// ErrCheckFailed when it does not certify. Writing it is WriteCertificate's.
// It is one function because its phases share the reference runs and fill one report in order (reference,
// chain cases, tree cases, distribution tests, verdict); each case runs in certifyCase.
func Certify(ctx context.Context, m *models.Models, o CertifyOptions) (Certificate, error) {
	clock := o.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	c := Certificate{CertificateSummary: models.CertificateSummary{Format: models.CertificateFormat, When: clock.Now().UTC(),
		Build: BuildRevision(), Model: m.Name, Drafter: dirName(m.DrafterDir), Backend: m.Backend,
		Kernels: kernelMode(m.Backend), Tolerance: CertifyTolerance},
		ModelDir: m.TargetDir, DrafterDir: m.DrafterDir, Quantization: quantization(m.TargetDir), MaxTokens: o.MaxTokens,
		Batch: o.Batch, Disagreements: []Disagreement{}}
	for _, d := range []*string{&c.ModelDir, &c.DrafterDir} {
		if abs, err := filepath.Abs(*d); err == nil && *d != "" {
			*d = abs
		}
	}
	c.Prompts.Source = o.PromptSource
	c.Prompts.Count = len(o.Prompts)
	c.Prompts.Tokens = []int{}
	for _, p := range o.Prompts {
		c.Prompts.Tokens = append(c.Prompts.Tokens, len(p))
	}
	c.Tree = CertSection{Note: "not verified: certify stopped before the tree runs", BlockSizes: []int{}, Cases: []CertCase{}, Modes: []string{}}
	c.Chain = CertSection{BlockSizes: []int{}, Cases: []CertCase{}, Modes: []string{}}
	if err := o.check(m); err != nil {
		return c, err
	}
	if fp, err := models.Fingerprint(m.TargetDir); err == nil {
		c.Fingerprint = fp
	}
	dbs := m.Drafter.BlockSize()
	c.DrafterBlockSize = dbs
	sizes := o.BlockSizes
	if sizes == nil {
		for b := 1; b <= CertifyMaxBlockSize; b++ {
			sizes = append(sizes, b)
		}
	}
	ctxLen := m.Target.Info().ContextLength
	for _, b := range sizes {
		if ctxLen > 0 && b > ctxLen {
			c.Chain.NotRun = append(c.Chain.NotRun, NotRun{BlockSize: b, Reason: fmt.Sprintf("not run: above the context length %d", ctxLen)})
			continue
		}
		c.Chain.BlockSizes = append(c.Chain.BlockSizes, b)
	}
	modes := []string{ModeAlone}
	if !o.NoPrefixCache {
		modes = append(modes, ModeAlonePrefixHit)
	}
	if o.Batch > 0 {
		modes = append(modes, ModeBatch)
		if !o.NoPrefixCache {
			modes = append(modes, ModeBatchPrefixHit)
		}
	}
	c.Chain.Modes = modes
	if len(c.Chain.BlockSizes) == 0 {
		return c, fmt.Errorf("%w: no block size to run: every one asked for is above the context length %d", ErrBadInput, ctxLen)
	}
	c.Chain.Verified = true

	// The reference: plain greedy decoding of each prompt, alone and without the cache.
	refs := make([][]ports.Token, len(o.Prompts))
	for pi, p := range o.Prompts {
		r, err := decode(ctx, m, GenerateOptions{Request: o.request(p)})
		if err != nil {
			return c, fmt.Errorf("prompt %d, plain greedy: %w", pi, err)
		}
		refs[pi] = slices.Clone(r.Tokens)
	}
	// The prefix cache of the prefix-hit modes. A generation reuses at most its prompt's length minus one
	// (the last prompt token must run), and a hybrid target's recurrent state exists only at an entry's
	// end, so each prompt of n ≥ 2 tokens is cached by a speculative generation of its first n−1 tokens (as
	// higgsd caches a request's prompt): every later run of the prompt restores exactly n−1 tokens.
	var cache *prefixcache.Cache
	if !o.NoPrefixCache {
		var err error
		if cache, err = prefixcache.New(prefixcache.Config{Budget: certifyCacheBytes}, SystemClock{}); err != nil {
			return c, err
		}
		for pi, p := range o.Prompts {
			if len(p) < 2 {
				continue
			}
			if _, err := decode(ctx, m, GenerateOptions{Request: o.request(p[:len(p)-1]), Speculative: true, PrefixCache: cache}); err != nil {
				return c, fmt.Errorf("prompt %d, filling the prefix cache: %w", pi, err)
			}
		}
	}

	c.Chain.Pass = c.Chain.Verified
	for _, bs := range c.Chain.BlockSizes {
		for _, mode := range modes {
			cs, err := certifyCase(ctx, m, o, refs, bs, nil, mode, cache, &c)
			if err != nil {
				return c, fmt.Errorf("block size %d, %s: %w", bs, mode, err)
			}
			c.Chain.add(cs)
		}
	}
	if misses := prefixMisses(c.Chain.Cases); misses > 0 {
		c.Chain.Note = fmt.Sprintf("%d runs of the prefix-hit modes restored no prefix (prompts of one token, or a backend without prefix export): they ran as the alone and batch modes do", misses)
	}
	if err := certifyTrees(ctx, m, o, refs, modes, cache, &c); err != nil {
		return c, err
	}
	var failures []string
	if !c.Chain.Pass {
		failures = append(failures, fmt.Sprintf("%d of %d speculative chain runs differ from plain greedy decoding", c.Chain.Totals.Disagreements, c.Chain.Totals.Runs))
	}
	if n := c.Tree.Totals.Disagreements; n > 0 {
		failures = append(failures, fmt.Sprintf("%d of %d speculative tree runs differ from plain greedy decoding", n, c.Tree.Totals.Runs))
	}
	if o.Temperature > 0 {
		c.Verify = o.Verify
		ver, err := ParseVerification(o.Verify)
		if err != nil {
			return c, err
		}
		lo := LosslessOptions{Prompts: o.Prompts, StopIDs: o.StopIDs, NoEOS: o.NoEOS, Temperature: o.Temperature,
			Seed: o.Seed, Samples: o.Samples, Verify: ver, Tree: &speculative.TreeConfig{}}
		dt, err := distributionTest(ctx, m, lo, c.Chain.BlockSizes[len(c.Chain.BlockSizes)-1])
		c.Distribution = &dt
		switch {
		case errors.Is(err, ErrCheckFailed):
			failures = append(failures, err.Error())
		case err != nil:
			return c, err
		}
		// Trees keep the target's distribution under VerifyMatch (a tree's branches are point-mass guesses
		// matched against the target's own sample), so their test runs under it whatever --verify says, at
		// the largest tree run: the largest block size at its largest budget.
		if c.Tree.Verified {
			last := c.Tree.Cases[len(c.Tree.Cases)-1]
			for _, cs := range c.Tree.Cases {
				if cs.BlockSize > last.BlockSize || cs.BlockSize == last.BlockSize && cs.Budget > last.Budget {
					last = cs
				}
			}
			lo.Verify = speculative.VerifyMatch
			lo.Tree = &speculative.TreeConfig{Budget: last.Budget, Width: c.Tree.Width}
			dt, err := distributionTest(ctx, m, lo, last.BlockSize)
			c.TreeDistribution = &dt
			switch {
			case errors.Is(err, ErrCheckFailed):
				failures = append(failures, "trees: "+err.Error())
			case err != nil:
				return c, fmt.Errorf("trees: %w", err)
			}
		}
	}
	c.Certified = len(failures) == 0
	c.Scope = scope(c)
	c.Trees = treeSummary(c)
	if len(failures) > 0 {
		return c, fmt.Errorf("%w: not certified: %s", ErrCheckFailed, strings.Join(failures, "; "))
	}
	return c, nil
}

// certifyTrees fills c's tree section: at each block size of the chain section from minTreeBlockSize, each
// budget whose tree fits, in every mode. When the first case's rounds drafted but verified no tree, the
// backend has no tree verification: the section says so and runs nothing more. Batched members whose
// rounds verified no tree (a scheduler that cannot run them) are noted.
func certifyTrees(ctx context.Context, m *models.Models, o CertifyOptions, refs [][]ports.Token, modes []string,
	cache *prefixcache.Cache, c *Certificate) error {
	t := &c.Tree
	if o.NoTrees {
		t.Note = treeNoteOff
		return nil
	}
	t.Budgets = slices.Clone(o.TreeBudgets)
	if t.Budgets == nil {
		t.Budgets = slices.Clone(DefaultCertifyTreeBudgets)
	}
	t.Width = o.TreeWidth
	if t.Width == 0 {
		t.Width = DefaultCertifyTreeWidth
	}
	if slices.Max(c.Chain.BlockSizes) < minTreeBlockSize {
		t.Note = treeNoteSizes
		return nil
	}
	t.Modes = modes
	t.Pass = true
	t.Note = ""
	for _, bs := range c.Chain.BlockSizes {
		if bs < minTreeBlockSize {
			continue
		}
		var fits []int
		for _, b := range t.Budgets {
			if room := treeRoom(bs, t.Width); b > room {
				t.NotRun = append(t.NotRun, NotRun{BlockSize: bs, Budget: b, Reason: fmt.Sprintf(
					"not run: a tree at block size %d with %d candidates per slot holds at most %d nodes", bs, t.Width, room)})
				continue
			}
			fits = append(fits, b)
		}
		if len(fits) == 0 {
			continue
		}
		t.BlockSizes = append(t.BlockSizes, bs)
		for _, b := range fits {
			for _, mode := range modes {
				listed := len(c.Disagreements)
				cs, err := certifyCase(ctx, m, o, refs, bs, &speculative.TreeConfig{Budget: b, Width: t.Width}, mode, cache, c)
				if err != nil {
					return fmt.Errorf("tree, block size %d, budget %d, %s: %w", bs, b, mode, err)
				}
				if len(t.Cases) == 0 && cs.DraftRounds > 0 && cs.TreeRounds == 0 {
					// No tree verification: the first case ran the chains the chain section ran at this size
					// alone, so it is dropped, with any disagreement it listed again, rather than shown as trees.
					c.Disagreements = c.Disagreements[:listed]
					t.Note, t.Pass, t.Modes = treeNoteBackend, false, []string{}
					return nil
				}
				t.add(cs)
			}
		}
	}
	if aloneTreeRounds(t.Cases) == 0 {
		t.Note, t.Pass = treeNoteRounds, false
		return nil
	}
	t.Verified = true
	var notes []string
	batched, batchTrees := 0, 0
	for _, cs := range t.Cases {
		if cs.Mode == ModeBatch || cs.Mode == ModeBatchPrefixHit {
			batched++
			batchTrees += cs.TreeRounds
		}
	}
	if batched > 0 && batchTrees == 0 {
		notes = append(notes, treeNoteBatch)
	}
	if misses := prefixMisses(t.Cases); misses > 0 {
		notes = append(notes, fmt.Sprintf("%d runs of the prefix-hit modes restored no prefix (prompts of one token, or a backend without prefix export): they ran as the alone and batch modes do", misses))
	}
	t.Note = strings.Join(notes, "; ")
	return nil
}

// aloneTreeRounds counts the tree rounds of the alone modes' cases.
func aloneTreeRounds(cases []CertCase) int {
	n := 0
	for _, cs := range cases {
		if cs.Mode == ModeAlone || cs.Mode == ModeAlonePrefixHit {
			n += cs.TreeRounds
		}
	}
	return n
}

// treeRoom is the most nodes a tree of block size bs holds with width candidates per slot: the anchor and
// width^d nodes at each depth d up to bs−1 (a larger budget builds the same tree).
func treeRoom(bs, width int) int {
	room, level := 1, 1
	for d := 1; d < bs; d++ {
		if level > math.MaxInt32/width {
			return math.MaxInt32
		}
		level *= width
		room += level
		if room >= math.MaxInt32 {
			return math.MaxInt32
		}
	}
	return room
}

// treeSummary is the certificate head's account of its tree section.
func treeSummary(c Certificate) *models.TreeSummary {
	t := c.Tree
	s := &models.TreeSummary{Verified: t.Verified, Pass: t.Verified && t.Pass, BlockSizes: slices.Clone(t.BlockSizes),
		Budgets: slices.Clone(t.Budgets), TreeRounds: t.Totals.TreeRounds, DraftRounds: t.Totals.DraftRounds, Note: t.Note}
	if s.Budgets == nil {
		s.Budgets = []int{}
	}
	if dt := c.TreeDistribution; dt != nil {
		s.Pass = s.Pass && dt.Pass
		pass := dt.Pass
		s.DistributionPass = &pass
	}
	return s
}

func prefixMisses(cases []CertCase) int {
	n := 0
	for _, cs := range cases {
		n += cs.PrefixMisses
	}
	return n
}

// request is o's greedy request for prompt p.
func (o CertifyOptions) request(p []ports.Token) generation.Request {
	return generation.Request{Prompt: p, MaxTokens: o.MaxTokens, StopIDs: o.StopIDs, NoEOS: o.NoEOS}
}

// certifyCase runs block size bs (as trees of tree's budget when tree is non-nil, else chains) in mode,
// compares every run with its reference and records the disagreements in c.
func certifyCase(ctx context.Context, m *models.Models, o CertifyOptions, refs [][]ports.Token, bs int,
	tree *speculative.TreeConfig, mode string, cache *prefixcache.Cache, c *Certificate) (CertCase, error) {
	cs := CertCase{BlockSize: bs, Mode: mode}
	shape := "chain"
	if tree != nil {
		cs.Budget, shape = tree.Budget, "tree"
	} else {
		// Chains said explicitly: the request's zero budget, whatever the engine's default.
		tree = &speculative.TreeConfig{}
	}
	hit := mode == ModeAlonePrefixHit || mode == ModeBatchPrefixHit
	var pc *prefixcache.Cache
	if hit {
		pc = cache
	}
	type run struct {
		prompt, member int
		out            decoded
		err            error
	}
	var runs []run
	if mode == ModeAlone || mode == ModeAlonePrefixHit {
		for pi, p := range o.Prompts {
			g := GenerateOptions{Request: o.request(p), Speculative: true, PrefixCache: pc}
			g.BlockSize, g.Tree = bs, tree
			out, err := decode(ctx, m, g)
			runs = append(runs, run{prompt: pi, member: -1, out: out, err: err})
		}
	} else {
		sched, err := batch.New(batch.Config{}, SystemClock{}, m.Target, m.Drafter)
		if err != nil {
			return cs, err
		}
		runs = make([]run, o.Batch)
		var wg sync.WaitGroup
		for k := range runs {
			pi := k % len(o.Prompts)
			runs[k] = run{prompt: pi, member: k}
			wg.Go(func() {
				g := GenerateOptions{Request: o.request(o.Prompts[pi]), Speculative: true, PrefixCache: pc, Batch: sched}
				g.BlockSize, g.Tree = bs, tree
				runs[k].out, runs[k].err = decode(ctx, m, g)
			})
		}
		wg.Wait()
	}
	var committed int
	for _, r := range runs {
		if r.err != nil {
			if r.member >= 0 {
				return cs, fmt.Errorf("prompt %d (batch member %d): %w", r.prompt, r.member, r.err)
			}
			return cs, fmt.Errorf("prompt %d: %w", r.prompt, r.err)
		}
		cs.Runs++
		cs.Tokens += len(r.out.Tokens)
		cs.CachedTokens += r.out.Cached
		if hit && r.out.Cached == 0 {
			cs.PrefixMisses++
		}
		for _, rs := range r.out.Stats.Rounds {
			if rs.Drafting() {
				cs.DraftRounds++
				committed += rs.Accepted + 1
			}
			if rs.Tree != nil {
				cs.TreeRounds++
				cs.LargestTree = max(cs.LargestTree, rs.BlockSize)
			}
		}
		ref := refs[r.prompt]
		if pos, same := firstDiff(ref, r.out.Tokens); !same {
			cs.Disagreements++
			d := Disagreement{Shape: shape, BlockSize: bs, Budget: cs.Budget, Mode: mode, Prompt: r.prompt, Member: r.member,
				Position: pos, Plain: at(ref, pos), Spec: at(r.out.Tokens, pos)}
			ctxTokens := append(slices.Clone(o.Prompts[r.prompt]), ref[:min(pos, len(ref))]...)
			if mg, err := TopMargin(ctx, m.Target, ctxTokens); err != nil {
				d.MarginError = err.Error()
			} else {
				d.Margin = &mg
			}
			c.Disagreements = append(c.Disagreements, d)
		}
	}
	if cs.DraftRounds > 0 {
		cs.Tau = float64(committed) / float64(cs.DraftRounds)
	}
	cs.Pass = cs.Disagreements == 0
	return cs, nil
}

// TopMargin reads the target's next-token logits after tokens on a fresh plain session (one forward, the
// last row) and returns its top-2 margin.
func TopMargin(ctx context.Context, t ports.Target, tokens []ports.Token) (Margin, error) {
	if err := checkTokens(t, tokens); err != nil {
		return Margin{}, err
	}
	sess, err := t.NewSession(ctx, nil)
	if err != nil {
		return Margin{}, fmt.Errorf("open session: %w", err)
	}
	defer sess.Close()
	fr, err := sess.Forward(ctx, tokens, ports.ForwardOptions{Rows: 1, Logits: true})
	if err != nil {
		return Margin{}, fmt.Errorf("forward: %w", err)
	}
	V := t.Info().VocabSize
	if fr.Logits == nil {
		return Margin{}, fmt.Errorf("session %T: %w", sess, ErrNoRawLogits)
	}
	if len(fr.Logits) < V || V < 2 {
		return Margin{}, fmt.Errorf("forward returned %d logits for a vocabulary of %d", len(fr.Logits), V)
	}
	return marginOf(fr.Logits[len(fr.Logits)-V:]), nil
}

// marginOf is row's top-2 margin (ties: lowest id first, as greedy decoding picks).
func marginOf(row []float32) Margin {
	i1, i2 := -1, -1
	for i, v := range row {
		switch {
		case i1 < 0 || v > row[i1]:
			i1, i2 = i, i1
		case i2 < 0 || v > row[i2]:
			i2 = i
		}
	}
	top := float64(row[i1])
	var z float64
	for _, v := range row {
		z += math.Exp(float64(v) - top)
	}
	l1, l2 := float64(row[i1]), float64(row[i2])
	return Margin{Top1: ports.Token(i1), Top2: ports.Token(i2), Top1Logit: l1, Top2Logit: l2, LogitGap: l1 - l2,
		ProbGap: (1 - math.Exp(l2-l1)) / z}
}
