package mlx

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// treeFixture is a target to verify trees on: a synth fixture or a testmodel spec (gated attention with
// partial rotary, MoE), loaded with kvBits.
type treeFixture struct {
	f      fixture
	tm     *testmodel.TargetSpec
	kvBits int
}

func treeFixtures() map[string]treeFixture {
	p := parityFixtures()
	return map[string]treeFixture{
		"qwen3 f32":                    {f: p["qwen3 f32"]},
		"qwen3_next f32":               {f: p["qwen3_next f32"]},
		"qwen3_next q4 g32":            {f: p["qwen3_next q4 g32"]},
		"qwen3 kv8":                    {f: fixture{spec: synth.TargetSpec{Family: "qwen3", Seed: 15, Layers: 2, Vocab: 96}}, kvBits: 8},
		"qwen3_next kv8 q4":            {f: fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 16, Layers: 4, Vocab: 96}, quant: &quant.Spec{Bits: 4, GroupSize: 32}}, kvBits: 8},
		"qwen3_5 gated partial rotary": {tm: &testmodel.TargetSpec{Family: "qwen3_5", Seed: 85, Layers: 4, OutputGate: true, PartialRotary: 0.25}},
		"qwen3_next moe q4 kv8": {tm: &testmodel.TargetSpec{Family: "qwen3_next", Seed: 88, Layers: 4, MoE: true,
			ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: &quant.Spec{Bits: 4, GroupSize: 32}}, kvBits: 8},
	}
}

func (tf treeFixture) load(t *testing.T) *Target {
	t.Helper()
	dir := ""
	if tf.tm != nil {
		dir = testmodel.Target(t, *tf.tm)
	} else {
		dir = writeFixture(t, tf.f)
	}
	tg, err := Load(t.Context(), dir, LoadOptions{KVBits: tf.kvBits})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	return tg
}

// layers is the fixture's decoder layer count.
func (tf treeFixture) layers() int {
	if tf.tm != nil {
		return tf.tm.Layers
	}
	return tf.f.spec.Layers
}

// fullTree is the tree of width children per node, depth levels deep (top-w per slot), in level order.
func fullTree(width, depth int) []int {
	var parents []int
	level := []int{-1}
	for range depth {
		var next []int
		for _, p := range level {
			for range width {
				parents = append(parents, p)
				next = append(next, len(parents)-1)
			}
		}
		level = next
	}
	return parents
}

// treeShapes are the trees every fixture verifies: a chain, a star of roots, top-2 per slot 4 deep, and a
// mixed tree whose nodes are not in depth order (two roots, branches of different depths interleaved).
var treeShapes = map[string][]int{
	"chain":       {-1, 0, 1, 2, 3},
	"star":        {-1, -1, -1, -1},
	"top2 depth4": fullTree(2, 4),
	"mixed":       {-1, 0, -1, 1, 0, 2, 3, 4, 5, 3, 7},
}

// treeTokens are deterministic token ids for a tree of n nodes.
func treeTokens(n, vocab int) []ports.Token {
	out := make([]ports.Token, n)
	for i := range out {
		out[i] = ports.Token((i*37 + 11) % vocab)
	}
	return out
}

// pathTo is root … node of the tree of parents.
func pathTo(parents []int, node int) []int {
	var p []int
	for ; node >= 0; node = parents[node] {
		p = append([]int{node}, p...)
	}
	return p
}

func tokensOf(tokens []ports.Token, path []int) []ports.Token {
	out := make([]ports.Token, len(path))
	for k, i := range path {
		out[k] = tokens[i]
	}
	return out
}

func maxGap(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		worst = max(worst, float64(abs32(a[i]-b[i])))
	}
	return worst
}

// chainRun feeds prefix then block to a fresh session and returns the block's Forward (logits and taps).
func chainRun(t *testing.T, tg *Target, taps []int, prefix, block []ports.Token) (ports.Session, ports.ForwardResult) {
	t.Helper()
	s, err := tg.NewSession(t.Context(), taps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	if len(prefix) > 0 {
		_, err = s.Forward(t.Context(), prefix, ports.ForwardOptions{})
		require.NoError(t, err)
	}
	r, err := s.Forward(t.Context(), block, ports.ForwardOptions{Logits: true, Taps: true})
	require.NoError(t, err)
	return s, r
}

// Every node's row (logits, greedy token, taps) equals the last row of a chain Forward of its path, within
// the batch tolerance (MLX's products round differently for different row counts), on dense and hybrid
// targets, float, 4-bit and with 8-bit KV, from an empty session and after a prompt.
func TestForwardTreeNodesMatchChain(t *testing.T) {
	requireMLX(t)
	for name, tf := range treeFixtures() {
		t.Run(name, func(t *testing.T) {
			tg := tf.load(t)
			V := tg.Info().VocabSize
			taps := []int{tf.layers() - 1, 0}
			for shape, parents := range treeShapes {
				for _, prefix := range [][]ports.Token{nil, prompt} {
					t.Run(fmt.Sprintf("%s after %d", shape, len(prefix)), func(t *testing.T) {
						tokens := treeTokens(len(parents), V)
						s, err := tg.NewSession(t.Context(), taps)
						require.NoError(t, err)
						defer s.Close()
						if len(prefix) > 0 {
							_, err = s.Forward(t.Context(), prefix, ports.ForwardOptions{})
							require.NoError(t, err)
						}
						res, err := s.(ports.TreeVerifier).ForwardTree(t.Context(), tokens, parents, ports.ForwardOptions{Logits: true, Taps: true})
						require.NoError(t, err)
						require.Len(t, res.Greedy, len(parents))
						require.Len(t, res.Logits, len(parents)*V)
						require.Equal(t, len(parents), res.Taps.Rows())
						treeTaps, err := readTaps(res.Taps)
						require.NoError(t, err)
						assert.Equal(t, len(prefix), s.Len(), "Len while the tree is pending")
						worst, worstTap := 0.0, 0.0
						for node := range parents {
							path := pathTo(parents, node)
							_, c := chainRun(t, tg, taps, prefix, tokensOf(tokens, path))
							last := len(path) - 1
							worst = max(worst, maxGap(res.Logits[node*V:(node+1)*V], c.Logits[last*V:(last+1)*V]))
							assert.Equal(t, c.Greedy[last], res.Greedy[node], "node %d greedy", node)
							chainTaps, err := readTaps(c.Taps)
							require.NoError(t, err)
							worstTap = max(worstTap, maxGap(treeTaps[node], chainTaps[last]))
						}
						t.Logf("max |Δlogit| %.3g, max |Δtap| %.3g", worst, worstTap)
						assert.LessOrEqual(t, worst, batchTolerance)
						assert.LessOrEqual(t, worstTap, batchTolerance)
						_, err = s.(ports.TreeVerifier).KeepPath(t.Context(), nil)
						require.NoError(t, err)
					})
				}
			}
		})
	}
}

// After KeepPath(path) the session is the one fed the path as a chain: the same length, the kept taps
// equal the chain's rows, the recurrent state agrees, and the next Forward's logits and greedy tokens agree.
func TestKeepPathMatchesChainFed(t *testing.T) {
	requireMLX(t)
	parents := treeShapes["mixed"]
	paths := [][]int{
		{},           // nothing accepted
		{0, 1, 3, 6}, // the node-order prefix 0,1 then a jump
		{0, 4, 7},    // a branch after a sibling's nodes
		{2, 5, 8},    // the second root's branch
		{0, 1, 3, 9}, // a leaf that ends a shared stem
		{0},          // the first node alone: already in place
	}
	next := []ports.Token{7, 30, 5}
	for name, tf := range treeFixtures() {
		t.Run(name, func(t *testing.T) {
			tg := tf.load(t)
			V := tg.Info().VocabSize
			taps := []int{tf.layers() - 1, 0}
			tokens := treeTokens(len(parents), V)
			for _, path := range paths {
				t.Run(fmt.Sprint(path), func(t *testing.T) {
					s, err := tg.NewSession(t.Context(), taps)
					require.NoError(t, err)
					defer s.Close()
					_, err = s.Forward(t.Context(), prompt, ports.ForwardOptions{})
					require.NoError(t, err)
					tv := s.(ports.TreeVerifier)
					_, err = tv.ForwardTree(t.Context(), tokens, parents, ports.ForwardOptions{Taps: true})
					require.NoError(t, err)
					kept, err := tv.KeepPath(t.Context(), path)
					require.NoError(t, err)
					require.Equal(t, len(prompt)+len(path), s.Len())
					require.NotNil(t, kept)
					require.Equal(t, len(path), kept.Rows())
					keptRows, err := readTaps(kept)
					require.NoError(t, err)

					c, err := tg.NewSession(t.Context(), taps)
					require.NoError(t, err)
					defer c.Close()
					_, err = c.Forward(t.Context(), prompt, ports.ForwardOptions{})
					require.NoError(t, err)
					if len(path) > 0 {
						cr, err := c.Forward(t.Context(), tokensOf(tokens, path), ports.ForwardOptions{Taps: true})
						require.NoError(t, err)
						chainRows, err := readTaps(cr.Taps)
						require.NoError(t, err)
						for k := range path {
							assert.LessOrEqual(t, maxGap(keptRows[k], chainRows[k]), batchTolerance, "kept tap %d", k)
						}
					}
					if tg.Info().HasRecurrent() {
						sa, sb := readState(t, s.(*Session)), readState(t, c.(*Session))
						worst := 0.0
						for i := range sa {
							worst = max(worst, maxGap(sa[i], sb[i]))
						}
						assert.LessOrEqual(t, worst, batchTolerance, "recurrent state")
					}
					got, err := s.Forward(t.Context(), next, ports.ForwardOptions{Logits: true})
					require.NoError(t, err)
					want, err := c.Forward(t.Context(), next, ports.ForwardOptions{Logits: true})
					require.NoError(t, err)
					gap := maxGap(got.Logits, want.Logits)
					t.Logf("next forward max |Δlogit| %.3g", gap)
					assert.LessOrEqual(t, gap, batchTolerance)
					assert.Equal(t, want.Greedy, got.Greedy)
				})
			}
		})
	}
}

// Repeated rounds of tree, keep, tree on one session stay with a chain-fed session; a round that keeps
// nothing leaves the session as it was.
func TestTreeRoundsMatchChain(t *testing.T) {
	requireMLX(t)
	tg := treeFixtures()["qwen3_next f32"].load(t)
	V := tg.Info().VocabSize
	s, err := tg.NewSession(t.Context(), nil)
	require.NoError(t, err)
	defer s.Close()
	c, err := tg.NewSession(t.Context(), nil)
	require.NoError(t, err)
	defer c.Close()
	for _, x := range []ports.Session{s, c} {
		_, err = x.Forward(t.Context(), prompt, ports.ForwardOptions{})
		require.NoError(t, err)
	}
	parents := fullTree(2, 3)
	tv := s.(ports.TreeVerifier)
	for round, path := range [][]int{{1, 5, 12}, {}, {0, 2}, {0, 3, 8}, {1, 4, 10}} {
		tokens := treeTokens(len(parents), V)
		for i := range tokens {
			tokens[i] = (tokens[i] + ports.Token(round*13)) % ports.Token(V)
		}
		_, err := tv.ForwardTree(t.Context(), tokens, parents, ports.ForwardOptions{})
		require.NoError(t, err)
		_, err = tv.KeepPath(t.Context(), path)
		require.NoError(t, err)
		if len(path) > 0 {
			_, err = c.Forward(t.Context(), tokensOf(tokens, path), ports.ForwardOptions{})
			require.NoError(t, err)
		}
		require.Equal(t, c.Len(), s.Len(), "round %d", round)
	}
	got, err := s.Forward(t.Context(), []ports.Token{9}, ports.ForwardOptions{Logits: true})
	require.NoError(t, err)
	want, err := c.Forward(t.Context(), []ports.Token{9}, ports.ForwardOptions{Logits: true})
	require.NoError(t, err)
	assert.LessOrEqual(t, maxGap(got.Logits, want.Logits), batchTolerance)
	assert.Equal(t, want.Greedy, got.Greedy)
}

// A tree's sampling distributions are the node rows' softmax, as a Forward's.
func TestForwardTreeDists(t *testing.T) {
	requireMLX(t)
	tg := treeFixtures()["qwen3 f32"].load(t)
	V := tg.Info().VocabSize
	s, err := tg.NewSession(t.Context(), nil)
	require.NoError(t, err)
	defer s.Close()
	parents := treeShapes["mixed"]
	tokens := treeTokens(len(parents), V)
	res, err := s.(ports.TreeVerifier).ForwardTree(t.Context(), tokens, parents, ports.ForwardOptions{Sampling: &ports.SamplingParams{Temperature: 1}, Logits: true})
	require.NoError(t, err)
	require.Len(t, res.Dists, len(parents))
	for node, d := range res.Dists {
		assert.LessOrEqual(t, logitGap(res.Logits[node*V:(node+1)*V], d), 1e-5, "node %d", node)
	}
}

// Bad trees and paths are refused before any work with an error naming the fault, and the session still
// works; while a tree is pending every call but KeepPath and Close is refused.
func TestTreeRefusals(t *testing.T) {
	requireMLX(t)
	f := treeFixtures()["qwen3_next f32"].f
	f.spec.Context = 20
	tg := loadFixture(t, f)
	s, err := tg.NewSession(t.Context(), nil)
	require.NoError(t, err)
	defer s.Close()
	tv := s.(ports.TreeVerifier)
	_, err = s.Forward(t.Context(), prompt, ports.ForwardOptions{}) // 12 of 20 positions
	require.NoError(t, err)
	toks := []ports.Token{1, 2, 3}
	for _, tc := range []struct {
		name    string
		tokens  []ports.Token
		parents []int
		opts    ports.ForwardOptions
		want    string
	}{
		{"no tokens", nil, nil, ports.ForwardOptions{}, "no tokens"},
		{"length mismatch", toks, []int{-1, 0}, ports.ForwardOptions{}, "2 parents for 3 tokens"},
		{"self parent", toks, []int{-1, 1, 0}, ports.ForwardOptions{}, "node 1: parent 1 outside [-1,1)"},
		{"later parent", toks, []int{-1, 2, 0}, ports.ForwardOptions{}, "node 1: parent 2"},
		{"below -1", toks, []int{-2, 0, 0}, ports.ForwardOptions{}, "node 0: parent -2"},
		{"rows", toks, []int{-1, 0, 0}, ports.ForwardOptions{Rows: 1}, "rows must be 0"},
		{"vocab", []ports.Token{1, 96, 3}, []int{-1, 0, 0}, ports.ForwardOptions{}, "outside the vocabulary"},
		{"negative token", []ports.Token{1, -1, 3}, []int{-1, 0, 0}, ports.ForwardOptions{}, "outside the vocabulary"},
		{"bad sampling", toks, []int{-1, 0, 0}, ports.ForwardOptions{Sampling: &ports.SamplingParams{Temperature: -1}}, "temperature"},
		{"too deep", make([]ports.Token, 9), []int{-1, 0, 1, 2, 3, 4, 5, 6, 7}, ports.ForwardOptions{}, "context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tv.ForwardTree(t.Context(), tc.tokens, tc.parents, tc.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, len(prompt), s.Len())
		})
	}
	// A tree 8 deep fits the 8 free positions, however many nodes it has (the star beside the chain).
	wide := append([]int{-1, 0, 1, 2, 3, 4, 5, 6}, -1, -1, -1, -1)
	_, err = tv.ForwardTree(t.Context(), make([]ports.Token, len(wide)), wide, ports.ForwardOptions{})
	require.NoError(t, err)
	_, err = tv.KeepPath(t.Context(), nil)
	require.NoError(t, err)

	_, err = tv.KeepPath(t.Context(), nil)
	assert.ErrorContains(t, err, "no tree is pending")

	parents := []int{-1, 0, 0, -1}
	_, err = tv.ForwardTree(t.Context(), []ports.Token{4, 5, 6, 7}, parents, ports.ForwardOptions{})
	require.NoError(t, err)
	// Every other call is refused while the tree is pending.
	_, err = s.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	assert.ErrorIs(t, err, errTreePending)
	_, err = tv.ForwardTree(t.Context(), []ports.Token{1}, []int{-1}, ports.ForwardOptions{})
	assert.ErrorIs(t, err, errTreePending)
	assert.ErrorIs(t, s.TrimKV(1), errTreePending)
	_, err = s.Snapshot()
	assert.ErrorIs(t, err, errTreePending)
	_, err = s.(ports.PrefixExporter).ExportPrefix(len(prompt))
	assert.ErrorIs(t, err, errTreePending)
	br, err := tg.ForwardBatch(t.Context(), []ports.BatchItem{{Session: s, Tokens: []ports.Token{1}}})
	require.NoError(t, err)
	assert.ErrorIs(t, br[0].Err, errTreePending)
	// Bad paths are refused and leave the tree pending.
	for _, tc := range []struct {
		path []int
		want string
	}{
		{[]int{1}, "path[0] = 1 is not a root"},
		{[]int{0, 3}, "path[1] = 3 is not a child of path[0] = 0"},
		{[]int{0, 1, 2}, "path[2] = 2 is not a child of path[1] = 1"},
		{[]int{4}, "path[0] = 4 is not a node of the tree of 4 nodes"},
		{[]int{-1}, "path[0] = -1 is not a node"},
	} {
		_, err := tv.KeepPath(t.Context(), tc.path)
		assert.ErrorContains(t, err, tc.want)
	}
	kept, err := tv.KeepPath(t.Context(), []int{0, 2})
	require.NoError(t, err)
	assert.Nil(t, kept, "no taps were asked for")
	assert.Equal(t, len(prompt)+2, s.Len())
	_, err = s.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	require.NoError(t, err)

	// A closed session refuses both calls; a session holding a tree closes cleanly.
	_, err = tv.ForwardTree(t.Context(), []ports.Token{1}, []int{-1}, ports.ForwardOptions{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = tv.ForwardTree(t.Context(), []ports.Token{1}, []int{-1}, ports.ForwardOptions{})
	assert.True(t, errors.Is(err, errClosed))
	_, err = tv.KeepPath(t.Context(), nil)
	assert.True(t, errors.Is(err, errClosed))
}

// Tree rounds free what they do not keep: memory grows by the kept positions' KV only, and closing a
// session (one with a tree still pending included) frees everything.
func TestTreeNoArrayLeaks(t *testing.T) {
	requireMLX(t)
	tg := loadFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 31, Layers: 4, Vocab: 96}})
	base := activeMemory(t, tg)
	s, err := tg.NewSession(t.Context(), []int{0, 3})
	require.NoError(t, err)
	_, err = s.Forward(t.Context(), prompt, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	tv := s.(ports.TreeVerifier)
	parents := fullTree(2, 3)
	tokens := treeTokens(len(parents), 96)
	var mid uint64
	for round := range 30 {
		_, err := tv.ForwardTree(t.Context(), tokens, parents, ports.ForwardOptions{Taps: true, Logits: true})
		require.NoError(t, err)
		path := [][]int{{1, 4}, {0, 3}, {}}[round%3]
		_, err = tv.KeepPath(t.Context(), path)
		require.NoError(t, err)
		if round%3 == 2 {
			_, err = s.Forward(t.Context(), []ports.Token{7}, ports.ForwardOptions{Taps: true})
			require.NoError(t, err)
		}
		if round == 9 {
			mid = activeMemory(t, tg)
		}
	}
	end := activeMemory(t, tg)
	t.Logf("active memory: base %d, after 10 rounds %d, after 30 rounds %d", base, mid, end)
	// 20 more rounds keep about 35 positions of KV for one attention layer (tiny), nothing per round else.
	assert.Less(t, int64(end)-int64(mid), int64(64<<10), "memory grows by more than the KV cache: %d → %d", mid, end)
	_, err = tv.ForwardTree(t.Context(), tokens, parents, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.Equal(t, base, activeMemory(t, tg), "closing a session with a pending tree frees everything")
}

// The tree suite on dense, hybrid (gated attention with partial rotary included) and quantized hybrid MoE
// targets, with float and 8-bit KV caches, within the batch tolerance: every node equals the chain forward
// of its path, KeepPath leaves the chain's state, and the refusals hold.
func TestTreeConformance(t *testing.T) {
	requireMLX(t)
	specs := map[string]testmodel.TargetSpec{
		"qwen3":             {Family: "qwen3", Seed: 84, Layers: 2, Tied: true},
		"qwen3_5 hybrid":    {Family: "qwen3_5", Seed: 85, Layers: 4, OutputGate: true, PartialRotary: 0.25},
		"qwen3_next":        {Family: "qwen3_next", Seed: 86, Layers: 4},
		"qwen3_next moe q4": {Family: "qwen3_next", Seed: 88, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: &quant.Spec{Bits: 4, GroupSize: 32}},
	}
	for name, f := range specs {
		f.Context = 24
		dir := testmodel.Target(t, f)
		for _, bits := range []int{0, 8} {
			t.Run(fmt.Sprintf("%s/kv%d", name, bits), func(t *testing.T) {
				tg, err := Load(t.Context(), dir, LoadOptions{KVBits: bits})
				require.NoError(t, err)
				t.Cleanup(func() { _ = tg.Close() })
				porttest.TreeSuite{
					Open:          porttest.Sessions(tg),
					Vocab:         testmodel.Vocab,
					TapLayers:     []int{f.Layers - 1, 0},
					ReadTaps:      readTaps,
					Tolerance:     batchTolerance,
					ContextLength: 24,
				}.Run(t)
			})
		}
	}
}
