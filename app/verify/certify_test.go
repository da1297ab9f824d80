package verify

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

var certTime = time.Date(2026, 12, 6, 4, 30, 0, 0, time.UTC)

// TestCertifyPasses: on a correct backend, dense and hybrid, every block size — below, at and above the
// drafter's configured 4 — agrees with plain greedy decoding in every mode (alone, batch, each with a
// prefix-cache hit); a size past the context length is listed as not run. Trees run at the sizes from 3 with
// the default budgets in every mode: every round verifies a tree of its budget, batched members' too, and the
// distribution test passes with trees too.
func TestCertifyPasses(t *testing.T) {
	drafter := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 9, Taps: []int{1, 3}, Mask: 62, BlockSize: 4})
	for _, fam := range []string{"qwen3", "qwen3_next"} {
		t.Run(fam, func(t *testing.T) {
			m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: fam, Seed: 5}), drafter)
			c, err := Certify(t.Context(), m, CertifyOptions{Prompts: testPrompts, PromptSource: "test", MaxTokens: 8, BlockSizes: []int{1, 2, 3, 4, 6, 1 << 24},
				NoEOS: true, Batch: 3, Temperature: 0.8, Seed: 3, Samples: 40, Verify: "residual", Clock: fixedClock{certTime}})
			require.NoError(t, err)
			assert.True(t, c.Certified)
			assert.True(t, c.Chain.Pass)
			assert.Equal(t, []int{1, 2, 3, 4, 6}, c.Chain.BlockSizes)
			require.Len(t, c.Chain.NotRun, 1)
			assert.Equal(t, 1<<24, c.Chain.NotRun[0].BlockSize)
			assert.Contains(t, c.Chain.NotRun[0].Reason, "not run: above the context length")
			assert.Equal(t, []string{ModeAlone, ModeAlonePrefixHit, ModeBatch, ModeBatchPrefixHit}, c.Chain.Modes)
			assert.Len(t, c.Chain.Cases, 5*4)
			for _, cs := range c.Chain.Cases {
				assert.True(t, cs.Pass, "%+v", cs)
				want := len(testPrompts)
				if cs.Mode == ModeBatch || cs.Mode == ModeBatchPrefixHit {
					want = 3
				}
				assert.Equal(t, want, cs.Runs, "%+v", cs)
				assert.Equal(t, 8*want, cs.Tokens, "%+v", cs)
				switch cs.Mode {
				case ModeAlonePrefixHit:
					// Prompts of 4 and 24 tokens restore 3 and 23; the one-token prompt cannot hit.
					assert.Equal(t, 3+23, cs.CachedTokens, "%+v", cs)
					assert.Equal(t, 1, cs.PrefixMisses)
				case ModeBatchPrefixHit:
					assert.Equal(t, 3+23, cs.CachedTokens, "%+v", cs) // members 0, 1, 2: prompts 0, 1, 2
				default:
					assert.Zero(t, cs.CachedTokens)
				}
			}
			assert.Empty(t, c.Disagreements)
			for _, cs := range c.Chain.Cases {
				assert.Zero(t, cs.TreeRounds, "%+v", cs)
				assert.Zero(t, cs.Budget, "%+v", cs)
			}

			tr := c.Tree
			assert.True(t, tr.Verified, tr.Note)
			assert.True(t, tr.Pass)
			assert.Equal(t, []int{3, 4, 6}, tr.BlockSizes)
			assert.Equal(t, DefaultCertifyTreeBudgets, tr.Budgets)
			assert.Equal(t, DefaultCertifyTreeWidth, tr.Width)
			assert.Empty(t, tr.NotRun, "a tree of block size 3 holds 21 nodes")
			assert.Equal(t, []string{ModeAlone, ModeAlonePrefixHit, ModeBatch, ModeBatchPrefixHit}, tr.Modes)
			require.Len(t, tr.Cases, 3*3*4, "3 sizes × 3 budgets × 4 modes")
			for _, cs := range tr.Cases {
				assert.True(t, cs.Pass, "%+v", cs)
				assert.Positive(t, cs.DraftRounds, "%+v", cs)
				assert.Equal(t, cs.DraftRounds, cs.TreeRounds, "every round a tree: %+v", cs)
				assert.Equal(t, cs.Budget, cs.LargestTree, "%+v", cs)
				switch cs.Mode {
				case ModeBatch, ModeBatchPrefixHit:
					assert.Equal(t, 8*3, cs.Tokens, "%+v", cs)
				default:
					assert.Equal(t, 8*len(testPrompts), cs.Tokens, "%+v", cs)
				}
				if cs.Mode == ModeAlonePrefixHit || cs.Mode == ModeBatchPrefixHit {
					assert.Equal(t, 3+23, cs.CachedTokens, "%+v", cs)
				}
			}
			assert.Positive(t, tr.Totals.TreeRounds)
			assert.Equal(t, tr.Totals.DraftRounds, tr.Totals.TreeRounds)
			assert.NotContains(t, tr.Note, "batched members verify chains")
			assert.Contains(t, c.Scope, "; tree, block sizes 3,4,6, budgets 4,8,16, alone, alone+prefix_hit, batch, batch+prefix_hit, T=0.8 distribution (match)")
			require.NotNil(t, c.TreeDistribution)
			assert.True(t, c.TreeDistribution.Pass)
			assert.Equal(t, 6, c.TreeDistribution.BlockSize)
			assert.Equal(t, 16, c.TreeDistribution.Budget)
			assert.Positive(t, c.TreeDistribution.TreeRounds)
			assert.Equal(t, c.TreeDistribution.DraftRounds, c.TreeDistribution.TreeRounds, "match keeps trees at T > 0")
			require.NotNil(t, c.Trees)
			assert.Equal(t, models.TreeSummary{Verified: true, Pass: true, BlockSizes: []int{3, 4, 6}, Budgets: []int{4, 8, 16},
				TreeRounds: tr.Totals.TreeRounds, DraftRounds: tr.Totals.DraftRounds, Note: tr.Note,
				DistributionPass: &c.TreeDistribution.Pass}, *c.Trees)
			require.NotNil(t, c.Distribution)
			assert.True(t, c.Distribution.Pass)
			assert.Equal(t, 6, c.Distribution.BlockSize, "the largest size run")
			assert.Equal(t, certTime, c.When)
			assert.Equal(t, models.BackendCPU, c.Backend)
			assert.Equal(t, models.KernelsExact, c.Kernels)
			assert.NotEmpty(t, c.Fingerprint)
			assert.Equal(t, CertifyTolerance, c.Tolerance)
		})
	}
}

// TestCertifyReportsDisagreement: with a target that perturbs one row at position 10 of verify blocks,
// certify fails (ErrCheckFailed) and lists each disagreement with its position and the target's top-2 margin:
// prompt 0 (1 token) at generated token 10, prompt 1 (4 tokens) at 7 (the row at position 10 predicts the
// token at 11); prompt 2 (24 tokens) holds position 10
// in its prompt and agrees. Block size 1 (no verify blocks) agrees everywhere.
func TestCertifyReportsDisagreement(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 41}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 42, Taps: []int{1}, Mask: 60, BlockSize: 4}))
	bad := *m
	bad.Target = portfake.Perturbed(m.Target, 10, false)
	c, err := Certify(t.Context(), &bad, CertifyOptions{Prompts: testPrompts, MaxTokens: 12, NoEOS: true, Batch: 3,
		BlockSizes: []int{1, 2, 4}})
	require.ErrorIs(t, err, ErrCheckFailed)
	assert.Contains(t, err.Error(), "not certified")
	assert.False(t, c.Certified)
	assert.False(t, c.Chain.Pass)
	require.NotEmpty(t, c.Disagreements)
	want := map[int]int{0: 10, 1: 7}
	seen := map[int]bool{}
	for _, d := range c.Disagreements {
		assert.NotEqual(t, 1, d.BlockSize, "%+v", d)
		require.Contains(t, want, d.Prompt, "%+v", d)
		assert.Equal(t, want[d.Prompt], d.Position, "%+v", d)
		assert.NotEqual(t, d.Plain, d.Spec)
		require.NotNil(t, d.Margin, "%+v", d)
		// The margin is the true target's (a plain session): its best token is plain decoding's.
		assert.Equal(t, d.Plain, d.Margin.Top1)
		assert.Greater(t, d.Margin.LogitGap, 0.0)
		assert.Greater(t, d.Margin.ProbGap, 0.0)
		assert.LessOrEqual(t, d.Margin.ProbGap, 1.0)
		seen[d.Prompt] = true
		if d.Mode == ModeBatch || d.Mode == ModeBatchPrefixHit {
			assert.GreaterOrEqual(t, d.Member, 0)
		} else {
			assert.Equal(t, -1, d.Member)
		}
	}
	assert.Len(t, seen, 2)
	for _, cs := range c.Chain.Cases {
		if cs.BlockSize == 1 {
			assert.True(t, cs.Pass, "%+v", cs)
			continue
		}
		// Alone: prompts 0 and 1 differ; batch of 3: members 0 and 1 (prompts 0 and 1).
		assert.Equal(t, 2, cs.Disagreements, "%+v", cs)
	}
	assert.Equal(t, 2*4*2, c.Chain.Totals.Disagreements)
	// The perturbing session has no tree verification: the first tree case's rounds were chains.
	assert.False(t, c.Tree.Verified)
	assert.Equal(t, treeNoteBackend, c.Tree.Note)
	assert.Empty(t, c.Tree.Cases, "the probe's chains are the chain section's")
	assert.Contains(t, c.Scope, "trees not verified (this backend does not verify trees)")
	for _, d := range c.Disagreements {
		assert.Equal(t, "chain", d.Shape)
	}
}

// TestCertifyReportsTreeDisagreement: with a target whose trees (and verify blocks) perturb the row at
// position 10, the tree runs disagree where the chains do — prompt 0 at generated token 10, prompt 1 at 7 —
// and each tree disagreement is listed with shape "tree", its budget and the target's top-2 margin, in
// every mode (batched members verify trees too).
func TestCertifyReportsTreeDisagreement(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 41}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 42, Taps: []int{1}, Mask: 60, BlockSize: 4}))
	bad := *m
	bad.Target = portfake.Perturbed(m.Target, 10, true)
	c, err := Certify(t.Context(), &bad, CertifyOptions{Prompts: testPrompts, MaxTokens: 12, NoEOS: true, Batch: 3,
		BlockSizes: []int{1, 4}, TreeBudgets: []int{4, 8}})
	require.ErrorIs(t, err, ErrCheckFailed)
	assert.Contains(t, err.Error(), "speculative tree runs differ from plain greedy decoding")
	assert.False(t, c.Certified)
	assert.True(t, c.Tree.Verified, c.Tree.Note)
	assert.False(t, c.Tree.Pass)
	assert.Equal(t, []int{4}, c.Tree.BlockSizes)
	require.Len(t, c.Tree.Cases, 2*4)
	for _, cs := range c.Tree.Cases {
		assert.Equal(t, 2, cs.Disagreements, "prompts 0 and 1 (batch members 0 and 1): %+v", cs)
		assert.Equal(t, cs.DraftRounds, cs.TreeRounds, "%+v", cs)
	}
	assert.Equal(t, 8*2, c.Tree.Totals.Disagreements)
	want := map[int]int{0: 10, 1: 7}
	budgets := map[int]int{}
	for _, d := range c.Disagreements {
		if d.Shape != "tree" {
			assert.Equal(t, "chain", d.Shape)
			assert.Zero(t, d.Budget)
			continue
		}
		budgets[d.Budget]++
		assert.Equal(t, 4, d.BlockSize, "%+v", d)
		require.Contains(t, want, d.Prompt, "%+v", d)
		assert.Equal(t, want[d.Prompt], d.Position, "%+v", d)
		assert.NotEqual(t, d.Plain, d.Spec)
		require.NotNil(t, d.Margin, "%+v", d)
		assert.Equal(t, d.Plain, d.Margin.Top1)
		assert.Greater(t, d.Margin.LogitGap, 0.0)
	}
	assert.Equal(t, map[int]int{4: 4 * 2, 8: 4 * 2}, budgets, "each budget: 4 modes, 2 prompts")
	require.NotNil(t, c.Trees)
	assert.True(t, c.Trees.Verified)
	assert.False(t, c.Trees.Pass)
}

// chainTarget hides its sessions' tree verification, as a backend without trees.
type chainTarget struct{ ports.Target }

func (t chainTarget) NewSession(ctx context.Context, taps []int) (ports.Session, error) {
	s, err := t.Target.NewSession(ctx, taps)
	return struct{ ports.Session }{s}, err
}

// TestCertifyTreesNotVerified: a backend without tree verification, --no-trees and block sizes below 3
// leave the tree section unverified, each with its reason in the note and the scope, and the chains still
// certify; budgets a tree cannot hold at a block size are listed as not run.
func TestCertifyTreesNotVerified(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 5}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 9, Taps: []int{1, 3}, Mask: 62, BlockSize: 4}))
	chainOnly := *m
	chainOnly.Target = chainTarget{m.Target}
	for _, tc := range []struct {
		name         string
		m            *models.Models
		o            CertifyOptions
		note, reason string
	}{
		{"backend", &chainOnly, CertifyOptions{BlockSizes: []int{2, 4}}, treeNoteBackend, "this backend does not verify trees"},
		{"no trees", m, CertifyOptions{BlockSizes: []int{2, 4}, NoTrees: true}, treeNoteOff, "--no-trees"},
		{"sizes", m, CertifyOptions{BlockSizes: []int{1, 2}}, treeNoteSizes, "no block size ≥ 3"},
		// One token comes from the prefill: no round drafts.
		{"rounds", m, CertifyOptions{BlockSizes: []int{3}, MaxTokens: 1}, treeNoteRounds, "no round drafted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if o.MaxTokens == 0 {
				o.MaxTokens = 6
			}
			o.Prompts, o.NoEOS, o.Temperature, o.Samples, o.Seed, o.Verify = testPrompts[:2], true, 0.8, 20, 1, "residual"
			c, err := Certify(t.Context(), tc.m, o)
			require.NoError(t, err)
			assert.True(t, c.Certified)
			assert.False(t, c.Tree.Verified)
			assert.False(t, c.Tree.Pass)
			assert.Equal(t, tc.note, c.Tree.Note)
			assert.Contains(t, c.Scope, "; trees not verified ("+tc.reason+")")
			assert.Nil(t, c.TreeDistribution, "no tree distribution test without trees")
			require.NotNil(t, c.Trees)
			assert.False(t, c.Trees.Verified)
			assert.Equal(t, tc.note, c.Trees.Note)
			assert.Nil(t, c.Trees.DistributionPass)
		})
	}

	// Width 2: a tree of block size 3 holds 7 nodes, of block size 4 holds 15.
	c, err := Certify(t.Context(), m, CertifyOptions{Prompts: testPrompts[:2], MaxTokens: 6, NoEOS: true, NoPrefixCache: true,
		BlockSizes: []int{3, 4}, TreeBudgets: []int{4, 8, 16}, TreeWidth: 2})
	require.NoError(t, err)
	assert.True(t, c.Tree.Verified)
	assert.Equal(t, 2, c.Tree.Width)
	assert.Equal(t, []NotRun{
		{BlockSize: 3, Budget: 8, Reason: "not run: a tree at block size 3 with 2 candidates per slot holds at most 7 nodes"},
		{BlockSize: 3, Budget: 16, Reason: "not run: a tree at block size 3 with 2 candidates per slot holds at most 7 nodes"},
		{BlockSize: 4, Budget: 16, Reason: "not run: a tree at block size 4 with 2 candidates per slot holds at most 15 nodes"},
	}, c.Tree.NotRun)
	var ran [][2]int
	for _, cs := range c.Tree.Cases {
		ran = append(ran, [2]int{cs.BlockSize, cs.Budget})
		assert.LessOrEqual(t, cs.LargestTree, cs.Budget)
	}
	assert.Equal(t, [][2]int{{3, 4}, {4, 4}, {4, 8}}, ran)
}

// TestScopeTrees: the scope line names the tree modes that verified trees and marks those whose rounds were
// chains (batched members on a scheduler without trees), and says why trees were not verified.
func TestScopeTrees(t *testing.T) {
	c := Certificate{Chain: CertSection{BlockSizes: []int{1, 2, 3}, Modes: []string{ModeAlone, ModeBatch}}}
	c.Tree = CertSection{Verified: true, BlockSizes: []int{3}, Budgets: []int{4, 8}, Modes: []string{ModeAlone, ModeBatch},
		Cases: []CertCase{{BlockSize: 3, Budget: 4, Mode: ModeAlone, DraftRounds: 5, TreeRounds: 5},
			{BlockSize: 3, Budget: 4, Mode: ModeBatch, DraftRounds: 5}}}
	assert.Equal(t, "chain, block sizes 1-3, alone, batch; tree, block sizes 3, budgets 4,8, alone (batch: chains)", scope(c))
	c.Tree.Cases[1].TreeRounds = 5
	assert.Equal(t, "chain, block sizes 1-3, alone, batch; tree, block sizes 3, budgets 4,8, alone, batch", scope(c))
	c.Tree = CertSection{Note: treeNoteBackend}
	assert.Equal(t, "chain, block sizes 1-3, alone, batch; trees not verified (this backend does not verify trees)", scope(c))
}

func TestTreeRoom(t *testing.T) {
	assert.Equal(t, 1, treeRoom(1, 4))
	assert.Equal(t, 5, treeRoom(2, 4))
	assert.Equal(t, 21, treeRoom(3, 4))
	assert.Equal(t, 3, treeRoom(3, 1))
	assert.Equal(t, math.MaxInt32, treeRoom(40, 4))
}

func TestTopMargin(t *testing.T) {
	mg := marginOf([]float32{0.5, 3, -1, 3, 2})
	assert.Equal(t, ports.Token(1), mg.Top1, "ties go to the lowest id, as greedy decoding")
	assert.Equal(t, ports.Token(3), mg.Top2)
	assert.Zero(t, mg.LogitGap)
	assert.Zero(t, mg.ProbGap)
	mg = marginOf([]float32{0, 2, 1})
	assert.Equal(t, ports.Token(1), mg.Top1)
	assert.Equal(t, ports.Token(2), mg.Top2)
	assert.InDelta(t, 1.0, mg.LogitGap, 1e-12)
	assert.InDelta(t, 0.6652-0.2447, mg.ProbGap, 1e-3)
}

// TestCertificateRoundTrip: the written file reads back as the same certificate, its head is what higgsd reads
// (models.ReadCertificate, models.Certification), and a model directory that cannot be written sends it to the
// working directory with a note saying so.
func TestCertificateRoundTrip(t *testing.T) {
	target := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 5})
	m := load(t, target, testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 9, Taps: []int{1, 3}, Mask: 62, BlockSize: 2}))
	c, err := Certify(t.Context(), m, CertifyOptions{Prompts: testPrompts[:2], MaxTokens: 4, NoEOS: true, Batch: 2,
		Clock: fixedClock{certTime}})
	require.NoError(t, err)

	require.NoError(t, WriteCertificate(&c, ""))
	assert.Equal(t, filepath.Join(target, models.CertificateFile), c.File)
	assert.Empty(t, c.FileNote)
	data, err := os.ReadFile(c.File)
	require.NoError(t, err)
	var back Certificate
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, c, back)

	head, err := models.ReadCertificate(target)
	require.NoError(t, err)
	require.NotNil(t, head)
	assert.Equal(t, c.CertificateSummary, *head)
	card := models.Certification(target, m.Backend)
	require.NotNil(t, card)
	assert.True(t, card.Pass)
	assert.True(t, card.Matches)
	assert.Equal(t, certTime, card.When)
	assert.False(t, models.Certification(target, "mlx").Matches, "made on another backend")

	// --out elsewhere.
	out := filepath.Join(t.TempDir(), "cert.json")
	c2 := c
	require.NoError(t, WriteCertificate(&c2, out))
	assert.Equal(t, out, c2.File)

	// A model directory that cannot be written: the working directory, said so.
	ro := t.TempDir()
	c3 := c
	c3.ModelDir = filepath.Join(ro, "missing", "dir")
	wd := t.TempDir()
	t.Chdir(wd)
	require.NoError(t, WriteCertificate(&c3, ""))
	assert.Equal(t, filepath.Join(wd, "higgs-certificate-"+safeName(c.Model)+".json"), c3.File)
	assert.Contains(t, c3.FileNote, "not written beside the model")
	assert.Contains(t, c3.FileNote, c3.File)
	assert.FileExists(t, c3.File)

	// An --out that cannot be written is an error.
	c4 := c
	require.ErrorIs(t, WriteCertificate(&c4, filepath.Join(ro, "missing", "cert.json")), ErrBadInput)
}

func TestCertifyBadInput(t *testing.T) {
	m := load(t, testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 5}),
		testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 9, Taps: []int{1, 3}, Mask: 62, BlockSize: 4}))
	for name, o := range map[string]CertifyOptions{
		"no prompts":       {MaxTokens: 4},
		"no tokens":        {Prompts: testPrompts, MaxTokens: 0},
		"size 0":           {Prompts: testPrompts, MaxTokens: 4, BlockSizes: []int{0, 2}},
		"all too large":    {Prompts: testPrompts, MaxTokens: 4, BlockSizes: []int{1 << 24, 1 << 25}},
		"negative batch":   {Prompts: testPrompts, MaxTokens: 4, Batch: -1},
		"NaN temperature":  {Prompts: testPrompts, MaxTokens: 4, Temperature: math.NaN()},
		"negative samples": {Prompts: testPrompts, MaxTokens: 4, Samples: -1},
		"tree budget 1":    {Prompts: testPrompts, MaxTokens: 4, TreeBudgets: []int{4, 1}},
		"no tree budgets":  {Prompts: testPrompts, MaxTokens: 4, TreeBudgets: []int{}},
		"negative width":   {Prompts: testPrompts, MaxTokens: 4, TreeWidth: -1},
		"no verification":  {Prompts: testPrompts, MaxTokens: 4, Temperature: 0.7},
	} {
		_, err := Certify(t.Context(), m, o)
		assert.ErrorIs(t, err, ErrBadInput, name)
	}
	noDraft := *m
	noDraft.Drafter = nil
	_, err := Certify(t.Context(), &noDraft, CertifyOptions{Prompts: testPrompts, MaxTokens: 4})
	assert.ErrorIs(t, err, ErrBadInput)
}

func TestDirName(t *testing.T) {
	assert.Equal(t, "z-lab/Qwen3-4B-DFlash-b16@0123abc", dirName("/h/.cache/huggingface/hub/models--z-lab--Qwen3-4B-DFlash-b16/snapshots/0123abc"))
	assert.Equal(t, "drafter", dirName("models/demo/drafter"))
	assert.Empty(t, dirName(""))
}
