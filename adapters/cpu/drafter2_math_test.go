package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// The DFlash2 half of the float64 reference (docs/model-math.md#dflash2, restated from the authors' model.py, not
// from package model): the grouped dynamic causal convolution and the candidate selector's greedy walk.

// convPrepare is GroupedDynamicCausalConv.prepare on h [T, H]: dyn = kernel_projection(h) viewed
// [T, 2, K, G]; it returns the pre side's convolution of h and the post side's kernels [T, K·G].
func (r *draftRef) convPrepare(p string, h []float64) ([]float64, []float64) {
	a := r.a
	H, K := a.HiddenSize, a.ConvKernel
	G := H / a.ConvGroup
	dyn := r.lin(p+".kernel_projection", h, H)
	T := len(h) / H
	pre, post := make([]float64, 0, T*K*G), make([]float64, 0, T*K*G)
	for t := range T {
		row := dyn[t*2*K*G : (t+1)*2*K*G]
		pre = append(pre, row[:K*G]...)
		post = append(post, row[K*G:]...)
	}
	return r.conv(h, pre, r.w[p+".base_kernel"][:K*H]), post
}

// conv is out[t] = Σ_j (base[j] + dyn_t[j] broadcast over its group) ⊙ x[t−j], zero before the block.
func (r *draftRef) conv(x, dyn, base []float64) []float64 {
	a := r.a
	H, K := a.HiddenSize, a.ConvKernel
	G := H / a.ConvGroup
	T := len(x) / H
	out := make([]float64, len(x))
	for t := range T {
		for j := 0; j < K && j <= t; j++ {
			for c := range H {
				out[t*H+c] += (base[j*H+c] + dyn[t*K*G+j*G+c/a.ConvGroup]) * x[(t-j)*H+c]
			}
		}
	}
	return out
}

// selectRef is CandidateSelector's greedy path: per slot the top-k logits (ties to the lower id), scored
// unary + ⟨pred[prev] ⊙ hidden_projection(h), succ[cand]⟩, walked from the anchor. It also returns the
// smallest gap between the best and second-best score met on the way (a path is only pinned down when it is
// clear of float32 rounding).
func (r *draftRef) selectRef(logits, hidden [][]float64, anchor ports.Token) ([]ports.Token, float64) {
	a := r.a
	R, k := a.SelectorRank, a.SelectorTopK
	pred := r.w["candidate_selector.predecessor_codebook"]
	succ := r.w["candidate_selector.successor_codebook"]
	prev := int(anchor)
	var path []ports.Token
	gap := math.Inf(1)
	for t := range logits {
		ids := make([]int, len(logits[t]))
		for i := range ids {
			ids[i] = i
		}
		slices.SortStableFunc(ids, func(x, y int) int {
			switch {
			case logits[t][x] > logits[t][y]:
				return -1
			case logits[t][x] < logits[t][y]:
				return 1
			}
			return 0
		})
		hp := r.lin("candidate_selector.hidden_projection", hidden[t], a.HiddenSize)
		best, bestS, second := -1, math.Inf(-1), math.Inf(-1)
		for _, c := range ids[:k] {
			s := logits[t][c]
			for q := range R {
				s += pred[prev*R+q] * hp[q] * succ[c*R+q]
			}
			if s > bestS {
				best, bestS, second = c, s, bestS
			} else if s > second {
				second = s
			}
		}
		gap = min(gap, bestS-second)
		path = append(path, ports.Token(best))
		prev = best
	}
	return path, gap
}

// tinyDraft2Arch is tinyDraftArch as a DFlash2 drafter: 2 taps over groups of 8 channels, a rank-8 selector
// choosing among 6 candidates.
func tinyDraft2Arch() hfmodel.DrafterArch {
	a := tinyDraftArch()
	a.Generation, a.ConvKernel, a.ConvGroup, a.SelectorRank, a.SelectorTopK = 2, 2, 8, 8, 6
	return a
}

func TestDraft2MatchesFloat64Reference(t *testing.T) {
	plain := tinyDraft2Arch()
	wide := tinyDraft2Arch()
	wide.ConvKernel, wide.ConvGroup, wide.SelectorTopK = 3, 16, 64 // every token a candidate
	capped := tinyDraft2Arch()
	capped.OutputMultiplier, capped.LogitSoftcap = 0.7, 2.5
	capped.SlidingWindows, capped.Causal = []int{5, 5}, []bool{false, false}
	for name, a := range map[string]hfmodel.DrafterArch{"plain": plain, "3-tap-all-candidates": wide, "softcapped-sliding": capped} {
		t.Run(name, func(t *testing.T) { checkDraft2AgainstReference(t, a) })
	}
}

// checkDraft2AgainstReference drafts blocks below, at and above the configured size (8): each runs exactly bs
// slots, so the grouped causal convolutions, the bidirectional attention and the selector's walk all see bs
// slots, as in the reference.
func checkDraft2AgainstReference(t *testing.T, a hfmodel.DrafterArch) {
	d, ddir, tdir := newTinyDrafter(t, 17, a, 2, DrafterOptions{})
	require.NotNil(t, d.m.Selector, "loaded as DFlash2")
	r := loadDraftRef(t, ddir, tdir, a)
	V := d.t.Info().VocabSize
	rng := rand.New(rand.NewPCG(4, 4))
	width := len(a.TapLayers) * a.HiddenSize
	var all []float64
	s, err := d.NewSession(t.Context())
	require.NoError(t, err)
	sess := s.(*DraftSession)
	checked, offArgmax := 0, 0
	for round, m := range []int{5, 3, 1, 4, 2, 6, 2} {
		f := testmodel.NormalVec(rng, m*width, 1)
		for _, v := range f {
			all = append(all, float64(v))
		}
		anchor := ports.Token(rng.IntN(60))
		bs := []int{8, 4, 2, 6, 8, 12, 16}[round]
		p, err := sess.Draft(t.Context(), anchor, &draftTaps{data: f, rows: m, width: width}, bs)
		require.NoError(t, err)
		require.Len(t, p.Tokens, bs-1)
		logits, hidden := r.forward(all, len(all)/width, anchor, bs)
		logits, hidden = logits[:bs-1], hidden[:bs-1]
		for i := range bs - 1 {
			var maxErr float64
			for v := range V {
				maxErr = max(maxErr, math.Abs(float64(sess.logits[i*V+v])-logits[i][v]))
			}
			assert.Less(t, maxErr, 1e-4, "round %d slot %d logits", round, i+1)
		}
		want, gap := r.selectRef(logits, hidden, anchor)
		if gap > 1e-3 {
			assert.Equal(t, want, p.Tokens, "round %d: the selector's path", round)
			checked++
		}
		for i, tok := range want {
			best, _ := top2Of(logits[i])
			if ports.Token(best) != tok {
				offArgmax++
			}
		}
	}
	t.Logf("paths checked %d, choices off the argmax %d", checked, offArgmax)
	assert.Positive(t, checked, "some paths clear of rounding")
	assert.Positive(t, offArgmax, "the pairwise term changes some choices, so the walk is really tested")
}

// TestDraft2Deterministic: DFlash2 drafts (logits and paths) are bit-identical for any worker count, and with
// the codebooks stored with or without the .weight suffix.
func TestDraft2Deterministic(t *testing.T) {
	a := tinyDraft2Arch()
	rng := rand.New(rand.NewPCG(9, 9))
	width := len(a.TapLayers) * a.HiddenSize
	f := testmodel.NormalVec(rng, 20*width, 1)
	var first []float32
	var firstToks []ports.Token
	for i, threads := range []int{1, 2, 5} {
		target, _ := loadTinyTarget(t, tinyTargetSpec(21), threads)
		ddir := testmodel.Drafter(t, rand.New(rand.NewPCG(21, 1)), a, testmodel.DrafterStorage{Nested: true, CodebookSuffix: i == 1})
		d := loadTinyDrafter(t, ddir, target, DrafterOptions{})
		s, err := d.NewSession(t.Context())
		require.NoError(t, err)
		p, err := s.Draft(t.Context(), 1, &draftTaps{data: f, rows: 20, width: width}, 8)
		require.NoError(t, err)
		got := slices.Clone(s.(*DraftSession).logits)
		if first == nil {
			first, firstToks = got, p.Tokens
		}
		assert.Equal(t, first, got, "threads %d", threads)
		assert.Equal(t, firstToks, p.Tokens, "threads %d", threads)
	}
}

// TestLoadDrafter2Refuses: a DFlash2 drafter missing or misshaping its new tensors, or storing both codebook
// names, is refused by name; a DFlash drafter's checkpoint under a DFlash2 config is too.
func TestLoadDrafter2Refuses(t *testing.T) {
	a := tinyDraft2Arch()
	target, _ := loadTinyTarget(t, tinyTargetSpec(23), 1)
	write := func(t *testing.T, edit func(w *testmodel.DrafterWeights)) string {
		dir := t.TempDir()
		w := testmodel.RandomDrafterWeights(rand.New(rand.NewPCG(23, 1)), a)
		edit(&w)
		testmodel.WriteDrafterWeights(t, dir, w, testmodel.DrafterStorage{})
		testmodel.WriteDrafterConfig(t, dir, a, testmodel.DrafterStorage{Nested: true})
		return dir
	}
	tests := []struct {
		name string
		edit func(w *testmodel.DrafterWeights)
		want string
	}{
		{"no base kernel", func(w *testmodel.DrafterWeights) { delete(w.Shapes, "layers.1.mlp_conv.base_kernel") }, "layers.1.mlp_conv.base_kernel"},
		{"no codebook", func(w *testmodel.DrafterWeights) { delete(w.Shapes, "candidate_selector.successor_codebook") }, "candidate_selector.successor_codebook"},
		{"misshapen projection", func(w *testmodel.DrafterWeights) {
			w.Shapes["layers.0.attention_conv.kernel_projection.weight"] = []int{8, 64}
			w.Values["layers.0.attention_conv.kernel_projection.weight"] = make([]float32, 8*64)
		}, "kernel_projection"},
		{"both codebook names", func(w *testmodel.DrafterWeights) {
			w.Shapes["candidate_selector.predecessor_codebook.weight"] = w.Shapes["candidate_selector.predecessor_codebook"]
			w.Values["candidate_selector.predecessor_codebook.weight"] = w.Values["candidate_selector.predecessor_codebook"]
		}, "both stored"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadDrafter(t.Context(), write(t, tc.edit), target, DrafterOptions{})
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("v1 checkpoint with a DFlash2 config", func(t *testing.T) {
		dir := t.TempDir()
		testmodel.WriteDrafterWeights(t, dir, testmodel.RandomDrafterWeights(rand.New(rand.NewPCG(23, 1)), tinyDraftArch()), testmodel.DrafterStorage{})
		testmodel.WriteDrafterConfig(t, dir, a, testmodel.DrafterStorage{})
		_, err := LoadDrafter(t.Context(), dir, target, DrafterOptions{})
		assert.ErrorContains(t, err, "conv")
	})
	t.Run("DFlash2 checkpoint with a v1 config", func(t *testing.T) {
		dir := t.TempDir()
		testmodel.WriteDrafterWeights(t, dir, testmodel.RandomDrafterWeights(rand.New(rand.NewPCG(23, 1)), a), testmodel.DrafterStorage{})
		testmodel.WriteDrafterConfig(t, dir, tinyDraftArch(), testmodel.DrafterStorage{})
		_, err := LoadDrafter(t.Context(), dir, target, DrafterOptions{})
		assert.ErrorContains(t, err, "unexpected tensors")
	})
}

// stepScores returns, for each slot of the reference walk along path (the tokens actually chosen), the
// slot's candidates (largest logit first, ties to the lower id) and their scores.
func (r *draftRef) stepScores(logits, hidden [][]float64, anchor ports.Token, path []ports.Token) ([][]ports.Token, [][]float64) {
	a := r.a
	R, k := a.SelectorRank, a.SelectorTopK
	pred := r.w["candidate_selector.predecessor_codebook"]
	succ := r.w["candidate_selector.successor_codebook"]
	prev := int(anchor)
	var cands [][]ports.Token
	var scores [][]float64
	for t := range path {
		ids := make([]int, len(logits[t]))
		for i := range ids {
			ids[i] = i
		}
		slices.SortStableFunc(ids, func(x, y int) int {
			switch {
			case logits[t][x] > logits[t][y]:
				return -1
			case logits[t][x] < logits[t][y]:
				return 1
			}
			return 0
		})
		hp := r.lin("candidate_selector.hidden_projection", hidden[t], a.HiddenSize)
		var cs []ports.Token
		var ss []float64
		for _, c := range ids[:k] {
			s := logits[t][c]
			for q := range R {
				s += pred[prev*R+q] * hp[q] * succ[c*R+q]
			}
			cs, ss = append(cs, ports.Token(c)), append(ss, s)
		}
		cands, scores = append(cands, cs), append(scores, ss)
		prev = int(path[t])
	}
	return cands, scores
}

// TestDraft2Sampled: at T > 0 the selector's proposal distributions are softmax(score/T) over each slot's
// candidates, scores as the float64 reference computes them along the path drawn; the tokens are drawn from
// exactly those distributions (chi-square goodness of fit of the first slot over many seeded draws, whose
// distribution depends only on the context); a seeded draft is reproducible.
func TestDraft2Sampled(t *testing.T) {
	a := tinyDraft2Arch()
	d, ddir, tdir := newTinyDrafter(t, 17, a, 2, DrafterOptions{})
	r := loadDraftRef(t, ddir, tdir, a)
	rng := rand.New(rand.NewPCG(6, 6))
	width := len(a.TapLayers) * a.HiddenSize
	f := testmodel.NormalVec(rng, 7*width, 1)
	f64 := make([]float64, len(f))
	for i, v := range f {
		f64[i] = float64(v)
	}
	const anchor, temp, bs = ports.Token(9), 2.0, 8
	logits, hidden := r.forward(f64, 7, anchor, a.BlockSize)
	s, err := d.NewSession(t.Context())
	require.NoError(t, err)
	ds := s.(*DraftSession)
	_, err = ds.Draft(t.Context(), anchor, &draftTaps{data: f, rows: 7, width: width}, 1)
	require.NoError(t, err)

	src := rand.New(rand.NewPCG(1, 2))
	counts := map[ports.Token]int{}
	var first *model.CandidateDist
	const n = 2000
	for i := range n {
		p, err := ds.DraftSampled(t.Context(), anchor, nil, bs, temp, src)
		require.NoError(t, err)
		require.Len(t, p.Dists, bs-1)
		if i < 20 {
			cands, scores := r.stepScores(logits, hidden, anchor, p.Tokens)
			for j, dist := range p.Dists {
				c := dist.(*model.CandidateDist)
				require.Equal(t, cands[j], c.Tokens, "draw %d slot %d: candidates", i, j+1)
				m := slices.Max(scores[j])
				var z float64
				for _, sc := range scores[j] {
					z += math.Exp((sc - m) / temp)
				}
				for q, sc := range scores[j] {
					assert.InDelta(t, math.Exp((sc-m)/temp)/z, c.Probs[q], 1e-4, "draw %d slot %d candidate %d", i, j+1, q)
				}
				assert.Positive(t, c.Prob(p.Tokens[j]), "the drawn token is a candidate")
			}
		}
		if first == nil {
			first = p.Dists[0].(*model.CandidateDist)
		}
		require.Equal(t, first.Probs, p.Dists[0].(*model.CandidateDist).Probs, "slot 1's distribution depends only on the context")
		counts[p.Tokens[0]]++
	}
	var chi float64
	dof := -1
	for j, tok := range first.Tokens {
		e := first.Probs[j] * n
		if e < 5 {
			continue
		}
		o := float64(counts[tok])
		chi += (o - e) * (o - e) / e
		dof++
	}
	require.Greater(t, dof, 2, "several candidates likely enough to test")
	// About 6 standard deviations above the mean of a chi-square with dof degrees of freedom.
	assert.Less(t, chi, float64(dof)+6*math.Sqrt(2*float64(dof)), "slot 1 drawn from its reported distribution (chi2 %.1f, dof %d)", chi, dof)
	t.Logf("slot 1: chi2 %.1f over %d dof, q %v", chi, dof, first.Probs)

	p1, err := ds.DraftSampled(t.Context(), anchor, nil, bs, temp, rand.New(rand.NewPCG(5, 5)))
	require.NoError(t, err)
	p2, err := ds.DraftSampled(t.Context(), anchor, nil, bs, temp, rand.New(rand.NewPCG(5, 5)))
	require.NoError(t, err)
	assert.Equal(t, p1.Tokens, p2.Tokens, "seeded drafts are reproducible")
	_, err = ds.DraftSampled(t.Context(), anchor, nil, bs, 0, src)
	assert.ErrorContains(t, err, "temperature > 0")
}
