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
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

var certTime = time.Date(2026, 12, 6, 4, 30, 0, 0, time.UTC)

// TestCertifyPasses: on a correct backend, dense and hybrid, every block size — below, at and above the
// drafter's configured 4 — agrees with plain greedy decoding in every mode (alone, batch, each with a
// prefix-cache hit); a size past the context length is listed as not run; the tree section says trees are
// not verified.
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
			assert.False(t, c.Tree.Verified)
			assert.Contains(t, c.Tree.Note, "not verified")
			assert.Contains(t, c.Scope, "trees not verified")
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

// perturbedTarget is a deliberately broken backend: its multi-token forwards after the prefill (verify
// blocks) report a different greedy token for the row at absolute position pos, so the speculative path
// diverges from plain decoding (whose forwards there are one token) at the token after pos.
type perturbedTarget struct {
	ports.Target
	pos int
}

type perturbedSession struct {
	ports.Session
	pos, vocab int
}

func (t perturbedTarget) NewSession(ctx context.Context, taps []int) (ports.Session, error) {
	s, err := t.Target.NewSession(ctx, taps)
	return perturbedSession{Session: s, pos: t.pos, vocab: t.Info().VocabSize}, err
}

func (s perturbedSession) Forward(ctx context.Context, toks []ports.Token, o ports.ForwardOptions) (ports.ForwardResult, error) {
	fr, err := s.Session.Forward(ctx, toks, o)
	if err != nil || len(toks) < 2 || s.Len() == len(toks) {
		return fr, err
	}
	first := s.Len() - len(fr.Greedy)
	if i := s.pos - first; i >= 0 && i < len(fr.Greedy) {
		fr.Greedy[i] = (fr.Greedy[i] + 1) % ports.Token(s.vocab)
	}
	return fr, err
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
	bad.Target = perturbedTarget{Target: m.Target, pos: 10}
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
