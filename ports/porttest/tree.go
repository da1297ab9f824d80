package porttest

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// TreeSuite configures the conformance suite of ports.TreeVerifier: every node of a verified tree must give
// the row a plain Forward of its path (root … node) gives on a session holding the same prefix (greedy
// token, logits, distribution, taps), and after KeepPath the session must continue exactly as one that was
// fed the path as a chain — for chains, stars, several roots, a top-2-per-slot tree, a deep-and-wide mix in
// a non-breadth-first node order and a single root. Malformed trees and paths are refused with the session
// left as it was, every other method waits for KeepPath, and a tree deeper than the context is refused
// before any work.
type TreeSuite struct {
	// Open returns a new empty session tapping tapLayers (possibly none); it must implement
	// ports.TreeVerifier. Required. The suite closes it.
	Open func(t *testing.T, tapLayers []int) ports.Session
	// Vocab is the vocabulary size. Required.
	Vocab int
	// TapLayers are tapped in the checks (nil: none).
	TapLayers []int
	// ReadTaps reads a Taps handle's values (rows × features); nil compares row counts only.
	ReadTaps func(ports.Taps) ([][]float32, error)
	// Tolerance is the largest absolute difference allowed between a node's logits, taps and probabilities
	// and its chain's; 0 means bit-identical. With a tolerance a greedy token may differ only where the
	// chain's logits of the two tokens are that close.
	Tolerance float64
	// ContextLength, when > 0, is the sessions' context length; the suite then checks a tree too deep for
	// the room left, and a tree with more nodes than the room that fits by depth. Keep it small.
	ContextLength int
	// Prompt is the committed prefix the trees hang from; nil means a fixed 6-token prompt.
	Prompt []ports.Token

	worst *float64
}

// treeShape is a named tree (parents per node, parents before children).
type treeShape struct {
	name    string
	parents []int
}

// treeShapes are the trees every check runs.
func treeShapes() []treeShape {
	// top2 is the tree of the two best candidates per slot, four slots deep, breadth first: 2+4+8+16 nodes.
	top2 := []int{-1, -1}
	for lo, hi := 0, 2; hi-lo < 16; lo, hi = hi, len(top2) {
		for p := lo; p < hi; p++ {
			top2 = append(top2, p, p)
		}
	}
	return []treeShape{
		{"single root", []int{-1}},
		{"chain", []int{-1, 0, 1, 2, 3}},
		{"star", []int{-1, 0, 0, 0, 0}},
		{"roots", []int{-1, -1, -1, -1}},
		{"top-2 per slot depth 4", top2},
		// A deep branch, a wide fan, a second root and nodes whose parents come well before them, in an
		// order that is neither breadth- nor depth-first.
		{"deep and wide", []int{-1, 0, 1, -1, 0, 2, 3, 5, 1, 6, 7, 0, 9, 10, 4, 3}},
	}
}

// nodePath returns node i's ancestry, root first.
func nodePath(parents []int, i int) []int {
	var p []int
	for n := i; n >= 0; n = parents[n] {
		p = append([]int{n}, p...)
	}
	return p
}

// leaves returns the nodes without children.
func leaves(parents []int) []int {
	has := make([]bool, len(parents))
	for _, p := range parents {
		if p >= 0 {
			has[p] = true
		}
	}
	var out []int
	for i, h := range has {
		if !h {
			out = append(out, i)
		}
	}
	return out
}

// Run runs every check as a subtest.
func (s TreeSuite) Run(t *testing.T) {
	require.NotNil(t, s.Open, "TreeSuite.Open")
	require.GreaterOrEqual(t, s.Vocab, 2, "TreeSuite.Vocab")
	if s.Prompt == nil {
		s.Prompt = make([]ports.Token, 6)
		for i := range s.Prompt {
			s.Prompt[i] = ports.Token((i*11 + 3) % s.Vocab)
		}
	}
	s.worst = new(float64)
	if s.Tolerance > 0 {
		defer func() { t.Logf("largest tree-vs-chain difference: %g (tolerance %g)", *s.worst, s.Tolerance) }()
	}
	for _, sh := range treeShapes() {
		t.Run("NodesEqualChains/"+sh.name, func(t *testing.T) { s.testNodes(t, sh) })
		t.Run("KeepPath/"+sh.name, func(t *testing.T) { s.testKeepPath(t, sh) })
	}
	t.Run("BadTrees", s.testBadTrees)
	t.Run("BadPaths", s.testBadPaths)
	t.Run("PendingTree", s.testPending)
	if s.ContextLength > 0 {
		t.Run("ContextLength", s.testContext)
	}
}

// treeSampling is the sampling the checks ask distributions for.
var treeSampling = ports.SamplingParams{Temperature: 0.8, TopK: 20, TopP: 0.95}

// opts asks for everything a node's row carries.
func (s TreeSuite) opts() ports.ForwardOptions {
	return ports.ForwardOptions{Logits: true, Taps: len(s.TapLayers) > 0, Sampling: &treeSampling}
}

// open returns a new session holding the prompt.
func (s TreeSuite) open(t *testing.T) ports.Session {
	t.Helper()
	sess := s.Open(t, s.TapLayers)
	require.NotNil(t, sess)
	t.Cleanup(func() { _ = sess.Close() })
	if _, ok := sess.(ports.TreeVerifier); !ok {
		require.FailNow(t, fmt.Sprintf("%T does not implement ports.TreeVerifier", sess))
	}
	_, err := sess.Forward(t.Context(), s.Prompt, ports.ForwardOptions{})
	require.NoError(t, err)
	return sess
}

// tokens returns the tokens of a tree's nodes (siblings differ).
func (s TreeSuite) tokens(parents []int, salt int) []ports.Token {
	out := make([]ports.Token, len(parents))
	for i := range out {
		out[i] = ports.Token((i*13 + salt*5 + 7) % s.Vocab)
	}
	return out
}

func pick(tokens []ports.Token, nodes []int) []ports.Token {
	out := make([]ports.Token, len(nodes))
	for k, n := range nodes {
		out[k] = tokens[n]
	}
	return out
}

// forwardTree runs a tree on sess and checks the result's shape.
func (s TreeSuite) forwardTree(t *testing.T, sess ports.Session, tokens []ports.Token, parents []int, opts ports.ForwardOptions) ports.ForwardResult {
	t.Helper()
	fr, err := sess.(ports.TreeVerifier).ForwardTree(t.Context(), tokens, parents, opts)
	require.NoError(t, err)
	require.Len(t, fr.Greedy, len(tokens), "one greedy token per node")
	if opts.Logits {
		require.Len(t, fr.Logits, len(tokens)*s.Vocab, "one logits row per node")
	}
	if opts.Sampling != nil {
		require.Len(t, fr.Dists, len(tokens), "one distribution per node")
	}
	if opts.Taps {
		require.NotNil(t, fr.Taps)
		require.Equal(t, len(tokens), fr.Taps.Rows(), "taps cover every node")
	}
	return fr
}

// testNodes: every node's row equals the row of a chain Forward of its path, on a session holding the same
// prompt (one chain per leaf covers every node on its path).
func (s TreeSuite) testNodes(t *testing.T, sh treeShape) {
	tokens := s.tokens(sh.parents, 1)
	sess := s.open(t)
	tree := s.forwardTree(t, sess, tokens, sh.parents, s.opts())
	treeTaps := s.read(t, tree.Taps)
	for _, leaf := range leaves(sh.parents) {
		path := nodePath(sh.parents, leaf)
		chain := s.open(t)
		fr, err := chain.Forward(t.Context(), pick(tokens, path), s.opts())
		require.NoError(t, err)
		chainTaps := s.read(t, fr.Taps)
		for k, n := range path {
			msg := fmt.Sprintf("node %d (depth %d, path to leaf %d)", n, k, leaf)
			s.equalRow(t, fr, k, tree, n, msg)
			if chainTaps != nil {
				s.close(t, chainTaps[k], treeTaps[n], "taps: "+msg)
			}
		}
	}
}

// equalRow compares row k of a chain result with row n of a tree result.
func (s TreeSuite) equalRow(t *testing.T, chain ports.ForwardResult, k int, tree ports.ForwardResult, n int, msg string) {
	t.Helper()
	V := s.Vocab
	want, got := chain.Logits[k*V:(k+1)*V], tree.Logits[n*V:(n+1)*V]
	s.close(t, want, got, "logits: "+msg)
	if a, b := chain.Greedy[k], tree.Greedy[n]; a != b {
		if s.Tolerance == 0 {
			assert.Equal(t, a, b, "greedy: "+msg)
		} else {
			assert.LessOrEqual(t, math.Abs(float64(want[a]-want[b])), 2*s.Tolerance, "greedy differs beyond a near-tie: "+msg)
		}
	}
	for tok := range V {
		w, g := chain.Dists[k].Prob(ports.Token(tok)), tree.Dists[n].Prob(ports.Token(tok))
		if d := math.Abs(w - g); w != g && d > s.Tolerance {
			assert.Failf(t, "probabilities differ", "token %d: %v vs %v over a tolerance of %g: %s", tok, w, g, s.Tolerance, msg)
			return
		} else if d > *s.worst {
			*s.worst = d
		}
	}
}

func (s TreeSuite) close(t *testing.T, want, got []float32, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	worst := 0.0
	for i := range want {
		if math.Float32bits(want[i]) == math.Float32bits(got[i]) || (want[i] != want[i] && got[i] != got[i]) {
			continue
		}
		worst = max(worst, math.Abs(float64(want[i]-got[i])))
		if math.IsNaN(worst) || s.Tolerance == 0 {
			assert.Failf(t, "values differ", "index %d: %v vs %v: %s", i, want[i], got[i], msg)
			return
		}
	}
	if worst > *s.worst {
		*s.worst = worst
	}
	if worst > s.Tolerance {
		assert.Failf(t, "values differ", "largest difference %g over a tolerance of %g: %s", worst, s.Tolerance, msg)
	}
}

func (s TreeSuite) read(t *testing.T, taps ports.Taps) [][]float32 {
	t.Helper()
	if s.ReadTaps == nil || taps == nil {
		return nil
	}
	v, err := s.ReadTaps(taps)
	require.NoError(t, err)
	return v
}

// keepPaths are the paths KeepPath is checked with on a tree: empty, a single root, the deepest leaf's path,
// the path to an inner node, and the last leaf's.
func keepPaths(parents []int) [][]int {
	deepest := 0
	for _, l := range leaves(parents) {
		if len(nodePath(parents, l)) > len(nodePath(parents, deepest)) {
			deepest = l
		}
	}
	paths := [][]int{{}, {0}, nodePath(parents, deepest)}
	if d := nodePath(parents, deepest); len(d) > 2 {
		paths = append(paths, d[:len(d)-1])
	}
	ls := leaves(parents)
	if last := ls[len(ls)-1]; last != deepest {
		paths = append(paths, nodePath(parents, last))
	}
	return paths
}

// testKeepPath: after KeepPath the session holds exactly what a chain Forward of the path leaves (its next
// Forward's rows, greedy tokens and taps equal those of a session fed the path as a chain), and KeepPath
// returns the path's taps.
func (s TreeSuite) testKeepPath(t *testing.T, sh treeShape) {
	tokens := s.tokens(sh.parents, 2)
	next := []ports.Token{ports.Token(5 % s.Vocab), ports.Token(17 % s.Vocab), ports.Token(2 % s.Vocab)}
	for _, path := range keepPaths(sh.parents) {
		t.Run(fmt.Sprintf("path%v", path), func(t *testing.T) {
			sess := s.open(t)
			n := sess.Len()
			s.forwardTree(t, sess, tokens, sh.parents, ports.ForwardOptions{Taps: len(s.TapLayers) > 0})
			kept, err := sess.(ports.TreeVerifier).KeepPath(t.Context(), path)
			require.NoError(t, err)
			require.Equal(t, n+len(path), sess.Len(), "Len after KeepPath")
			chain := s.open(t)
			var chainTaps [][]float32
			if len(path) > 0 {
				fr, err := chain.Forward(t.Context(), pick(tokens, path), ports.ForwardOptions{Taps: len(s.TapLayers) > 0})
				require.NoError(t, err)
				chainTaps = s.read(t, fr.Taps)
			}
			if len(s.TapLayers) > 0 {
				require.NotNil(t, kept, "KeepPath returns the kept nodes' taps when the tree asked for taps")
				require.Equal(t, len(path), kept.Rows(), "one tap row per kept node")
				keptTaps := s.read(t, kept)
				for k := range chainTaps {
					s.close(t, chainTaps[k], keptTaps[k], fmt.Sprintf("taps of kept node %d", path[k]))
				}
			}
			want, err := chain.Forward(t.Context(), next, s.opts())
			require.NoError(t, err)
			got, err := sess.Forward(t.Context(), next, s.opts())
			require.NoError(t, err)
			wantTaps, gotTaps := s.read(t, want.Taps), s.read(t, got.Taps)
			for k := range next {
				msg := fmt.Sprintf("next forward row %d after keeping %v", k, path)
				s.equalRow(t, want, k, got, k, msg)
				if wantTaps != nil {
					s.close(t, wantTaps[k], gotTaps[k], "taps: "+msg)
				}
			}
		})
	}
	t.Run("no taps asked", func(t *testing.T) {
		sess := s.open(t)
		s.forwardTree(t, sess, tokens, sh.parents, ports.ForwardOptions{})
		kept, err := sess.(ports.TreeVerifier).KeepPath(t.Context(), nodePath(sh.parents, 0))
		require.NoError(t, err)
		assert.Nil(t, kept, "no taps unless ForwardTree asked for them")
	})
}

// stillPrompt checks that sess still holds the prompt alone: its next Forward equals a fresh session's.
func (s TreeSuite) stillPrompt(t *testing.T, sess ports.Session, msg string) {
	t.Helper()
	require.Equal(t, len(s.Prompt), sess.Len(), "Len: "+msg)
	probe := []ports.Token{ports.Token(9 % s.Vocab), ports.Token(4 % s.Vocab)}
	want, err := s.open(t).Forward(t.Context(), probe, ports.ForwardOptions{Logits: true})
	require.NoError(t, err)
	got, err := sess.Forward(t.Context(), probe, ports.ForwardOptions{Logits: true})
	require.NoError(t, err, msg)
	s.close(t, want.Logits, got.Logits, "a refused tree leaves the session as it was: "+msg)
}

// testBadTrees: malformed trees are refused before any work, the session usable as it was.
func (s TreeSuite) testBadTrees(t *testing.T) {
	v := ports.Token(s.Vocab)
	for _, c := range []struct {
		name    string
		tokens  []ports.Token
		parents []int
		opts    ports.ForwardOptions
	}{
		{"empty", nil, nil, ports.ForwardOptions{}},
		{"more parents than tokens", []ports.Token{1, 2}, []int{-1, 0, 0}, ports.ForwardOptions{}},
		{"fewer parents than tokens", []ports.Token{1, 2}, []int{-1}, ports.ForwardOptions{}},
		{"parent after its child", []ports.Token{1, 2, 3}, []int{-1, 2, 0}, ports.ForwardOptions{}},
		{"own parent", []ports.Token{1, 2}, []int{-1, 1}, ports.ForwardOptions{}},
		{"parent below -1", []ports.Token{1, 2}, []int{-1, -2}, ports.ForwardOptions{}},
		{"first node with a parent", []ports.Token{1}, []int{0}, ports.ForwardOptions{}},
		{"token outside the vocabulary", []ports.Token{1, v}, []int{-1, 0}, ports.ForwardOptions{}},
		{"negative token", []ports.Token{-1}, []int{-1}, ports.ForwardOptions{}},
		{"rows", []ports.Token{1, 2}, []int{-1, 0}, ports.ForwardOptions{Rows: 1}},
		{"bad sampling", []ports.Token{1}, []int{-1}, ports.ForwardOptions{Sampling: &ports.SamplingParams{Temperature: -1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sess := s.open(t)
			_, err := sess.(ports.TreeVerifier).ForwardTree(t.Context(), c.tokens, c.parents, c.opts)
			require.Error(t, err)
			s.stillPrompt(t, sess, c.name)
		})
	}
}

// testBadPaths: paths that are not a root's chain of children are refused and the tree stays pending, so a
// valid KeepPath still follows; KeepPath without a pending tree is refused.
func (s TreeSuite) testBadPaths(t *testing.T) {
	parents := []int{-1, 0, 0, 1, -1, 4}
	tokens := s.tokens(parents, 3)
	sess := s.open(t)
	tv := sess.(ports.TreeVerifier)
	_, err := tv.KeepPath(t.Context(), []int{0})
	require.Error(t, err, "KeepPath without a pending tree")
	s.forwardTree(t, sess, tokens, parents, ports.ForwardOptions{})
	for _, p := range [][]int{{1}, {0, 3}, {0, 2, 3}, {4, 1}, {6}, {-1}, {0, 1, 3, 3}} {
		_, err := tv.KeepPath(t.Context(), p)
		assert.Error(t, err, "path %v", p)
	}
	_, err = tv.KeepPath(t.Context(), []int{0, 1, 3})
	require.NoError(t, err, "a valid path after refused ones")
	require.Equal(t, len(s.Prompt)+3, sess.Len())
	_, err = tv.KeepPath(t.Context(), []int{0})
	require.Error(t, err, "a second KeepPath")
	_, err = sess.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	require.NoError(t, err, "Forward after KeepPath")
}

// testPending: while a tree is pending, Forward, TrimKV, Snapshot, Restore, ReplayTape, ExportPrefix and a
// second tree are refused; KeepPath then works.
func (s TreeSuite) testPending(t *testing.T) {
	sess := s.open(t)
	snap, snapErr := sess.Snapshot()
	fr, err := sess.Forward(t.Context(), []ports.Token{1, 2}, ports.ForwardOptions{RecordTape: true})
	require.NoError(t, err)
	tv := sess.(ports.TreeVerifier)
	parents := []int{-1, 0, 0}
	s.forwardTree(t, sess, s.tokens(parents, 4), parents, ports.ForwardOptions{})
	_, err = sess.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	assert.Error(t, err, "Forward while a tree is pending")
	_, err = tv.ForwardTree(t.Context(), []ports.Token{1}, []int{-1}, ports.ForwardOptions{})
	assert.Error(t, err, "ForwardTree while a tree is pending")
	assert.Error(t, sess.TrimKV(len(s.Prompt)), "TrimKV while a tree is pending")
	_, err = sess.Snapshot()
	assert.Error(t, err, "Snapshot while a tree is pending")
	if snapErr == nil {
		assert.Error(t, sess.Restore(snap), "Restore while a tree is pending")
	}
	if rp, ok := sess.(ports.TapeReplayer); ok && fr.Tape != nil {
		assert.Error(t, rp.ReplayTape(t.Context(), fr.Tape, 1), "ReplayTape while a tree is pending")
	}
	if pe, ok := sess.(ports.PrefixExporter); ok {
		_, err := pe.ExportPrefix(len(s.Prompt) + 2)
		assert.Error(t, err, "ExportPrefix while a tree is pending")
	}
	_, err = tv.KeepPath(t.Context(), []int{0, 2})
	require.NoError(t, err)
	require.Equal(t, len(s.Prompt)+4, sess.Len())
	_, err = sess.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	require.NoError(t, err)
}

// testContext: a tree whose deepest node passes the context is refused with ErrContextFull before any work;
// one with more nodes than the room left but shallow enough runs.
func (s TreeSuite) testContext(t *testing.T) {
	room := s.ContextLength - len(s.Prompt)
	require.Greater(t, room, 1, "the context must leave room after the prompt")
	chain := func(n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = i - 1
		}
		return p
	}
	sess := s.open(t)
	deep := chain(room + 1)
	_, err := sess.(ports.TreeVerifier).ForwardTree(t.Context(), s.tokens(deep, 5), deep, ports.ForwardOptions{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ports.ErrContextFull), "a tree deeper than the room: %v", err)
	s.stillPrompt(t, sess, "too deep")

	// As deep as the room, plus a wide fan: more nodes than the room.
	sess = s.open(t)
	wide := chain(room)
	for range room + 2 {
		wide = append(wide, 0)
	}
	s.forwardTree(t, sess, s.tokens(wide, 6), wide, ports.ForwardOptions{})
	path := make([]int, room)
	for i := range path {
		path[i] = i
	}
	_, err = sess.(ports.TreeVerifier).KeepPath(t.Context(), path[1:])
	require.Error(t, err, "a path that does not start at a root")
	_, err = sess.(ports.TreeVerifier).KeepPath(t.Context(), path)
	require.NoError(t, err, "keeping a leaf at the context's end")
	require.Equal(t, s.ContextLength, sess.Len())
	_, err = sess.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	assert.ErrorIs(t, err, ports.ErrContextFull, "the kept path fills the context")
}
