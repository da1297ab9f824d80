package speculative

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

func cands(pairs ...float64) []ports.Candidate {
	var out []ports.Candidate
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, ports.Candidate{Token: ports.Token(pairs[i]), Prob: pairs[i+1]})
	}
	return out
}

// TestBuildTree: the tree holds the budget's most probable paths, best first, each node's parent before it,
// a slot's candidates under every parent, at most width of them.
func TestBuildTree(t *testing.T) {
	top := [][]ports.Candidate{
		cands(10, 0.6, 11, 0.3, 12, 0.1),
		cands(20, 0.9, 21, 0.05, 22, 0.05),
		cands(30, 0.5, 31, 0.5),
	}
	for _, tc := range []struct {
		name           string
		budget, width  int
		tokens         []ports.Token
		parents, depth []int
	}{
		{"budget 1 is the anchor alone", 1, 3, []ports.Token{7}, []int{-1}, []int{0}},
		{"budget 2 is the best first slot", 2, 3, []ports.Token{7, 10}, []int{-1, 0}, []int{0, 1}},
		// Scores: 10 .6, 10·20 .54, 11 .3, then 10·20·30, 10·20·31 and 11·20 tie at .27 (pushed in that order).
		{"best first", 6, 3, []ports.Token{7, 10, 20, 11, 30, 31}, []int{-1, 0, 1, 0, 2, 2}, []int{0, 1, 2, 1, 3, 3}},
		{"width 1 is a chain", 8, 1, []ports.Token{7, 10, 20, 30}, []int{-1, 0, 1, 2}, []int{0, 1, 2, 3}},
		{"width 2 leaves the third candidate out", 20, 2, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := buildTree(7, top, tc.budget, tc.width)
			if tc.tokens != nil {
				assert.Equal(t, tc.tokens, tr.tokens)
				assert.Equal(t, tc.parents, tr.parents)
				assert.Equal(t, tc.depth, tr.depth)
			}
			assert.LessOrEqual(t, len(tr.tokens), tc.budget)
			for v := 1; v < len(tr.tokens); v++ {
				p := tr.parents[v]
				require.Less(t, p, v)
				require.Equal(t, tr.depth[p]+1, tr.depth[v])
				require.Contains(t, tr.children[p], v)
				rank := slices.IndexFunc(top[tr.depth[v]-1], func(c ports.Candidate) bool { return c.Token == tr.tokens[v] })
				require.GreaterOrEqual(t, rank, 0)
				require.Less(t, rank, tc.width)
			}
			if tc.width == 2 {
				// Every path of two candidates per slot over three slots: 2 + 4 + 8 nodes and the anchor.
				assert.Len(t, tr.tokens, 15)
			}
		})
	}
}

// TestBuildTreeNaNProbability: a candidate whose probability is NaN scores as a zero one (minProb), so the
// paths through it stay behind every path of real probability, as they do for a zero: a NaN score would
// compare neither above nor below the others and break the frontier's order.
func TestBuildTreeNaNProbability(t *testing.T) {
	tops := func(p float64) [][]ports.Candidate {
		return [][]ports.Candidate{cands(10, p, 11, 0.5), cands(20, 0.9, 21, 0.1)}
	}
	zero := buildTree(7, tops(0), 4, 2)
	// 10 first (rank 0 is always taken first), then 11 (0.5), then 11·20 (0.45) before 10·20 (0·0.9).
	require.Equal(t, []ports.Token{7, 10, 11, 20}, zero.tokens)
	require.Equal(t, []int{-1, 0, 0, 2}, zero.parents)
	nan := buildTree(7, tops(math.NaN()), 4, 2)
	assert.Equal(t, zero.tokens, nan.tokens)
	assert.Equal(t, zero.parents, nan.parents)
}

// TestAcceptTree: the walk follows the child carrying the target's token, whichever rank it has, and stops
// at the first node none of whose children carries it, that token being the bonus.
func TestAcceptTree(t *testing.T) {
	top := [][]ports.Candidate{cands(10, 0.6, 11, 0.4), cands(20, 0.7, 21, 0.3)}
	tr := buildTree(7, top, 7, 2) // 7 → {10 → {20, 21}, 11 → {20, 21}}: 10, 10·20, 11, 11·20, 10·21, 11·21
	require.Equal(t, []ports.Token{7, 10, 20, 11, 20, 21, 21}, tr.tokens)
	node := func(parent int, tok ports.Token) int {
		for _, c := range tr.children[parent] {
			if tr.tokens[c] == tok {
				return c
			}
		}
		t.Fatalf("no child %d of %d", tok, parent)
		return -1
	}
	greedy := make([]ports.Token, len(tr.tokens))
	for i := range greedy {
		greedy[i] = 99
	}
	greedy[0] = 11 // the target wants the second candidate of slot 1
	n11 := node(0, 11)
	greedy[n11] = 21
	n21 := node(n11, 21)
	greedy[n21] = 5
	path, bonus, err := acceptTree(tr, greedy, nil, nil, 0)
	require.NoError(t, err)
	assert.Equal(t, []int{n11, n21}, path)
	assert.Equal(t, ports.Token(5), bonus)

	greedy[0] = 12 // no candidate: nothing accepted, the target's token is the bonus
	path, bonus, err = acceptTree(tr, greedy, nil, nil, 0)
	require.NoError(t, err)
	assert.Empty(t, path)
	assert.Equal(t, ports.Token(12), bonus)

	_, _, err = acceptTree(tr, greedy[:3], nil, nil, 0)
	assert.Error(t, err)
}

// treeRounds counts a result's tree rounds and their accepted drafts.
func treeRounds(res Result) (rounds, accepted int) {
	for _, rs := range res.Stats.Rounds {
		if rs.Tree != nil {
			rounds++
			accepted += rs.Accepted
		}
	}
	return rounds, accepted
}

// TestTreeGreedyEqualsPlain: greedy decoding with trees commits plain greedy decoding's tokens, whatever the
// drafts, the budget, the width and the model's layers, and after every round the session holds exactly the
// committed tokens (rig.generate checks it).
func TestTreeGreedyEqualsPlain(t *testing.T) {
	layers := map[string][]ports.LayerKind{
		"hybrid":    nil,
		"attention": {ports.LayerAttention, ports.LayerAttention},
		"recurrent": {ports.LayerRecurrent},
	}
	proposers := map[string]func(m *portfake.Model) portfake.Proposer{
		"perfect":         func(m *portfake.Model) portfake.Proposer { return portfake.Perfect(m) },
		"truth at rank 1": func(m *portfake.Model) portfake.Proposer { return portfake.Ranked(m, 4, 1) },
		"mixed ranks":     func(m *portfake.Model) portfake.Proposer { return portfake.Ranked(m, 3, 0, 2, 1, 0, 5) },
		"random":          func(*portfake.Model) portfake.Proposer { return portfake.RandomTokens(32, 9) },
		"no top":          func(m *portfake.Model) portfake.Proposer { return portfake.MatchThenDiverge(m, 2) },
	}
	prompt := testPrompt(5, 32)
	for ln, kinds := range layers {
		for pn, prop := range proposers {
			for _, tree := range []TreeConfig{{Budget: 2}, {Budget: 5, Width: 1}, {Budget: 8, Width: 2}, {Budget: 24, Width: 4}} {
				t.Run(fmt.Sprintf("%s/%s/budget %d width %d", ln, pn, tree.Budget, tree.Width), func(t *testing.T) {
					mcfg := portfake.Config{Layers: kinds}
					m := portfake.MustNew(mcfg)
					r := newRig(t, mcfg, prop(m), portfake.DrafterConfig{BlockSize: 6})
					res, err := r.generate(t, t.Context(), Config{BlockSize: 6, MaxTokens: 40, Tree: tree}, nil, prompt)
					require.NoError(t, err)
					want, err := m.GreedyContinuation(prompt, 40)
					require.NoError(t, err)
					require.Equal(t, want, res.Tokens)
					rounds, _ := treeRounds(res)
					assert.Equal(t, len(res.Stats.Rounds), rounds, "every round verifies a tree")
				})
			}
		}
	}
}

// TestTreeAcceptsWhereTheChainCannot: with the target's token always the drafter's second candidate, a chain
// accepts nothing and a tree follows the second candidates.
func TestTreeAcceptsWhereTheChainCannot(t *testing.T) {
	prompt := testPrompt(5, 32)
	run := func(tree TreeConfig) Result {
		mcfg := portfake.Config{Tape: true}
		m := portfake.MustNew(mcfg)
		r := newRig(t, mcfg, portfake.Ranked(m, 2, 1), portfake.DrafterConfig{BlockSize: 8})
		res, err := r.generate(t, t.Context(), Config{BlockSize: 8, MaxTokens: 48, Tree: tree}, nil, prompt)
		require.NoError(t, err)
		return res
	}
	chain := run(TreeConfig{})
	assert.Zero(t, chain.Stats.Accepted())
	// Budget 16, width 2: the all-second-candidate path has the lowest score of its depth, so the tree
	// reaches only a few slots down it, but every round accepts at least one.
	tree := run(TreeConfig{Budget: 16, Width: 2})
	rounds, accepted := treeRounds(tree)
	require.Equal(t, len(tree.Stats.Rounds), rounds)
	assert.GreaterOrEqual(t, accepted, rounds)
	assert.Equal(t, chain.Tokens, tree.Tokens)
	assert.Less(t, len(tree.Stats.Rounds), len(chain.Stats.Rounds))
}

// A tree round asks for a narrow draft (ports.TopRequest.Narrow) unless TreeConfig.FullDraft, and the output
// does not depend on it.
func TestTreeDraftNarrowUnlessFull(t *testing.T) {
	prompt := testPrompt(5, 32)
	run := func(tree TreeConfig) (Result, []portfake.DraftCall) {
		mcfg := portfake.Config{Tape: true}
		m := portfake.MustNew(mcfg)
		r := newRig(t, mcfg, portfake.Ranked(m, 2, 0), portfake.DrafterConfig{BlockSize: 8})
		res, err := r.generate(t, t.Context(), Config{BlockSize: 8, MaxTokens: 32, Tree: tree}, nil, prompt)
		require.NoError(t, err)
		return res, r.draft.Calls()
	}
	for _, full := range []bool{false, true} {
		res, calls := run(TreeConfig{Budget: 4, Width: 2, FullDraft: full})
		plain, _ := run(TreeConfig{})
		assert.Equal(t, plain.Tokens, res.Tokens)
		tops := 0
		for _, c := range calls {
			if c.Top.K == 0 {
				continue
			}
			tops++
			assert.Equal(t, !full, c.Top.Narrow, "full draft %v", full)
			assert.Equal(t, 3, c.Top.Slots, "a tree of 4 nodes reaches 3 slots deep")
		}
		assert.Positive(t, tops, "tree rounds drafted with DraftTop")
	}
}

// hidden hides a session's optional abilities (a decorator's view of it).
type hidden struct{ ports.Session }

// TestTreesNeedTheirAbilitiesAndARule: without the session's or the drafter's ability, or under
// VerifyResidual sampling, rounds verify chains — and the output is the same.
func TestTreesNeedTheirAbilitiesAndARule(t *testing.T) {
	prompt := testPrompt(5, 32)
	tree := TreeConfig{Budget: 8, Width: 2}
	mcfg := portfake.Config{Tape: true}
	m := portfake.MustNew(mcfg)

	r := newRig(t, mcfg, portfake.Ranked(m, 2, 1), portfake.DrafterConfig{BlockSize: 6})
	dec, err := New(Config{BlockSize: 6, MaxTokens: 20, Tree: tree}, portfake.NewClock(time.Millisecond), nil)
	require.NoError(t, err)
	res, err := dec.Generate(t.Context(), hidden{r.sess}, r.draft, prompt, func([]ports.Token) error { return nil })
	require.NoError(t, err)
	rounds, _ := treeRounds(res)
	assert.Zero(t, rounds, "a session without TreeVerifier verifies chains")
	want, err := m.GreedyContinuation(prompt, 20)
	require.NoError(t, err)
	assert.Equal(t, want, res.Tokens)

	r = newRig(t, mcfg, portfake.Ranked(m, 2, 1), portfake.DrafterConfig{BlockSize: 6})
	res, err = r.generate(t, t.Context(), Config{BlockSize: 6, MaxTokens: 20, Tree: tree, Sampling: ports.SamplingParams{Temperature: 0.8}}, portfake.NewRand(3), prompt)
	require.NoError(t, err)
	rounds, _ = treeRounds(res)
	assert.Zero(t, rounds, "residual sampling verifies chains")
}

// TestTreeStopsAndLength: a stop token or the token budget inside an accepted path cuts the round there, and
// the session keeps only the committed positions.
func TestTreeStopsAndLength(t *testing.T) {
	prompt := testPrompt(5, 32)
	mcfg := portfake.Config{}
	m := portfake.MustNew(mcfg)
	want, err := m.GreedyContinuation(prompt, 30)
	require.NoError(t, err)
	for _, n := range []int{1, 2, 7, 13} {
		r := newRig(t, mcfg, portfake.Perfect(m), portfake.DrafterConfig{BlockSize: 8})
		res, err := r.generate(t, t.Context(), Config{BlockSize: 8, MaxTokens: n, Tree: TreeConfig{Budget: 10, Width: 2}}, nil, prompt)
		require.NoError(t, err)
		assert.Equal(t, want[:n], res.Tokens)
		assert.Equal(t, FinishLength, res.Finish)
	}
	stop := want[9]
	r := newRig(t, mcfg, portfake.Perfect(m), portfake.DrafterConfig{BlockSize: 8})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 8, MaxTokens: 30, StopTokens: []ports.Token{stop}, Tree: TreeConfig{Budget: 10, Width: 2}}, nil, prompt)
	require.NoError(t, err)
	i := slices.Index(want, stop)
	assert.Equal(t, want[:i+1], res.Tokens)
	assert.Equal(t, FinishStop, res.Finish)
}

// TestPolicyWeighsTreesAgainstChains: the adaptive policy settles on a tree where the target's tokens sit at
// the drafter's second rank (a chain accepts nothing) and on a chain where its first guesses are right (a
// tree's extra rows buy nothing), with verify costs growing with the rows.
func TestPolicyWeighsTreesAgainstChains(t *testing.T) {
	prompt := testPrompt(5, 32)
	run := func(prop func(m *portfake.Model) portfake.Proposer) Result {
		clock := portfake.NewClock(0)
		mcfg := portfake.Config{Tape: true, Clock: clock, ForwardCost: func(n int) time.Duration { return time.Duration(1000+100*n) * time.Microsecond }}
		m := portfake.MustNew(mcfg)
		r := newRig(t, mcfg, prop(m), portfake.DrafterConfig{BlockSize: 8, Clock: clock, DraftCost: func(int) time.Duration { return 200 * time.Microsecond }})
		dec, err := New(Config{BlockSize: 8, Adaptive: true, MaxTokens: 300, Tree: TreeConfig{Budget: 16, Width: 2}}, clock, nil)
		require.NoError(t, err)
		res, err := dec.Generate(t.Context(), r.sess, r.draft, prompt, func([]ports.Token) error { return nil })
		require.NoError(t, err)
		want, err := m.GreedyContinuation(prompt, 300)
		require.NoError(t, err)
		require.Equal(t, want, res.Tokens)
		return res
	}
	last := func(res Result) []RoundStats { return res.Stats.Rounds[len(res.Stats.Rounds)*3/4:] }

	res := run(func(m *portfake.Model) portfake.Proposer { return portfake.Ranked(m, 2, 1) })
	trees := 0
	for _, rs := range last(res) {
		if rs.Tree != nil {
			trees++
		}
	}
	assert.Greater(t, trees, len(last(res))*3/4, "second-rank truths: trees win")
	assert.Positive(t, res.Stats.Decision.Tree)

	res = run(func(m *portfake.Model) portfake.Proposer { return portfake.Ranked(m, 2, 0) })
	trees = 0
	for _, rs := range last(res) {
		if rs.Tree != nil {
			trees++
		}
	}
	assert.Less(t, trees, len(last(res))/4, "first-rank truths: chains win")
}

// TestRememberedTreesWithoutTheAbility: a policy memory that learned trees, loaded by a generation whose
// session cannot verify them (a decorator's), keeps to chains — and the next generation able to verify trees
// finds the trees' measurements still there.
func TestRememberedTreesWithoutTheAbility(t *testing.T) {
	prompt := testPrompt(5, 32)
	mem := NewPolicyMemory()
	run := func(hide bool) Result {
		clock := portfake.NewClock(0)
		mcfg := portfake.Config{Tape: true, Clock: clock, ForwardCost: func(n int) time.Duration { return time.Duration(1000+100*n) * time.Microsecond }}
		m := portfake.MustNew(mcfg)
		r := newRig(t, mcfg, portfake.Ranked(m, 2, 1), portfake.DrafterConfig{BlockSize: 8, Clock: clock, DraftCost: func(int) time.Duration { return 200 * time.Microsecond }})
		cfg := Config{BlockSize: 8, Adaptive: true, MaxTokens: 120, Tree: TreeConfig{Budget: 16, Width: 2}}
		cfg.Policy.Memory = mem
		dec, err := New(cfg, clock, nil)
		require.NoError(t, err)
		var sess ports.Session = r.sess
		if hide {
			sess = hidden{r.sess}
		}
		res, err := dec.Generate(t.Context(), sess, r.draft, prompt, func([]ports.Token) error { return nil })
		require.NoError(t, err)
		want, err := m.GreedyContinuation(prompt, 120)
		require.NoError(t, err)
		require.Equal(t, want, res.Tokens)
		return res
	}
	first := run(false)
	trees, _ := treeRounds(first)
	require.Positive(t, trees)
	blind := run(true)
	trees, _ = treeRounds(blind)
	assert.Zero(t, trees, "no tree without the ability")
	again := run(false)
	assert.NotEqual(t, reasonExplore, again.Stats.Rounds[len(again.Stats.Rounds)/2].Policy)
	trees, _ = treeRounds(again)
	assert.Positive(t, trees, "the remembered trees are used again")
}

// TestTreeArmMeasuresFullBlocksOnly: a tree round the token budget cut to a shorter block (its last rounds)
// counts in the probe budget's books but leaves the arm's price and yield, which are those of trees over the
// largest block: a far cheaper time would replace the arm's average outright.
func TestTreeArmMeasuresFullBlocksOnly(t *testing.T) {
	p := newDepthPolicy(8, PolicyConfig{})
	p.enableTrees([]int{4, 8})
	p.observeTree(8, 8, 3, time.Millisecond, 0, 10*time.Millisecond)
	full := *p.tree(8)
	require.True(t, full.verify.ok)
	p.observeTree(8, 2, 0, time.Microsecond, 0, 100*time.Microsecond)
	assert.Equal(t, full, *p.tree(8), "a round over a block of 2 is not the arm's")
	assert.Equal(t, 2, p.rounds)
	p.observeTree(8, 8, 1, time.Millisecond, 0, 10*time.Millisecond)
	assert.NotEqual(t, full.accepted, p.tree(8).accepted, "a full-block round is")
}

// TestCatchUpDoesNotPriceTheDraft: a draft call that also took in more than a block's worth of context (the
// positions of a plain stretch, or a prompt) may lower a size's draft price, or set its first, but never
// raise it; the count is the round's own.
func TestCatchUpDoesNotPriceTheDraft(t *testing.T) {
	p := newDepthPolicy(8, PolicyConfig{})
	p.enableTrees([]int{4})
	p.caughtUp(300)
	p.observeTree(4, 8, 2, 6*time.Millisecond, 0, 2*time.Millisecond)
	assert.Equal(t, float64(6*time.Millisecond), p.tree(4).draft.v, "the first price is taken whatever it carried")
	p.caughtUp(3)
	p.observeTree(4, 8, 2, 500*time.Microsecond, 0, 2*time.Millisecond)
	warm := p.tree(4).draft.v
	require.Equal(t, float64(500*time.Microsecond), warm, "a round's worth of context prices it")
	p.caughtUp(120)
	p.observeTree(4, 8, 2, 5*time.Millisecond, 0, 2*time.Millisecond)
	assert.Equal(t, warm, p.tree(4).draft.v, "a catch-up does not raise it")
	p.caughtUp(120)
	p.observe(3, 1, 4*time.Millisecond, 0, 2*time.Millisecond, 0)
	p.caughtUp(120)
	p.observe(3, 1, 5*time.Millisecond, 0, 2*time.Millisecond, 0)
	assert.Equal(t, float64(4*time.Millisecond), p.draft[2].v, "nor a chain's")
	p.caughtUp(120)
	p.observe(3, 1, 300*time.Microsecond, 0, 2*time.Millisecond, 0)
	assert.Less(t, p.draft[2].v, float64(4*time.Millisecond), "a cheaper one lowers it")
	p.observe(3, 1, 6*time.Millisecond, 0, 2*time.Millisecond, 0)
	assert.Greater(t, p.draft[2].v, float64(300*time.Microsecond), "the count is forgotten after the round")
}

// TestTreeLeadsTheProbes: falling back to plain decoding, the policy's probes measure the tree that promises
// more than any speculative chain, not only every third probe: on gocoder a tree of 4 nodes paid 1.1× where
// chains never did, and probes of chains left it unmeasured for hundreds of rounds.
func TestTreeLeadsTheProbes(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{})
	p.enableTrees([]int{4})
	for range 400 {
		observeArms(p, p.choose(p.maxBS), 1)
	}
	require.Equal(t, 1, p.choose(p.maxBS).BlockSize, "plain decoding is the choice (the tree commits 2 tokens in 2.5 ms)")
	probes, trees := 0, 0
	for range 400 {
		d := p.choose(p.maxBS)
		if d.Code == reasonProbe {
			probes++
			if d.Tree > 0 {
				trees++
			}
		}
		observeArms(p, d, 1)
	}
	require.Positive(t, probes)
	assert.Equal(t, probes, trees, "every probe measures the tree")
}
