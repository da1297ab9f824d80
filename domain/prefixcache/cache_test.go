package prefixcache

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// state is a fake ports.PrefixState: a length and a size.
type state struct {
	n     int
	bytes int64
	tag   string
}

func (s *state) Len() int     { return s.n }
func (s *state) Bytes() int64 { return s.bytes }

func toks(ids ...int) []ports.Token {
	out := make([]ports.Token, len(ids))
	for i, id := range ids {
		out[i] = ports.Token(id)
	}
	return out
}

func seq(lo, hi int) []ports.Token {
	var out []ports.Token
	for i := lo; i < hi; i++ {
		out = append(out, ports.Token(i))
	}
	return out
}

func newCache(t *testing.T, budget int64) (*Cache, *portfake.Clock) {
	t.Helper()
	clock := portfake.NewClock(0)
	c, err := New(Config{Budget: budget}, clock)
	require.NoError(t, err)
	return c, clock
}

func insert(t *testing.T, c *Cache, tokens []ports.Token, bytes int64, withDraft bool) bool {
	t.Helper()
	var d ports.PrefixState
	if withDraft {
		d = &state{n: len(tokens), tag: "draft"}
	}
	ok, err := c.Partition("").Insert(t.Context(), tokens, &state{n: len(tokens), bytes: bytes}, d)
	require.NoError(t, err)
	return ok
}

func TestConfigValidate(t *testing.T) {
	_, err := New(Config{Budget: 0, Every: -1}, nil)
	require.Error(t, err)
	assert.ErrorContains(t, err, "budget 0")
	assert.ErrorContains(t, err, "interval -1")
	assert.ErrorContains(t, err, "nil clock")
}

func TestLookupLongestTruePrefix(t *testing.T) {
	c, _ := newCache(t, 1<<20)
	insert(t, c, toks(1, 2, 3), 10, false)
	insert(t, c, toks(1, 2, 3, 4, 5, 6), 10, false)
	insert(t, c, toks(1, 2, 9, 9), 10, false)
	insert(t, c, toks(7), 10, false)
	tests := []struct {
		name   string
		prompt []ports.Token
		limit  int
		want   int // 0: miss
	}{
		{"longest entry", toks(1, 2, 3, 4, 5, 6, 7, 8), 7, 6},
		{"limit excludes the longer entry", toks(1, 2, 3, 4, 5, 6, 7), 5, 3},
		{"diverges inside an edge", toks(1, 2, 3, 4, 0, 6, 7), 6, 3},
		{"diverges before every entry", toks(1, 2, 8), 2, 0},
		{"sibling branch", toks(1, 2, 9, 9, 1), 4, 4},
		{"sibling branch cut short", toks(1, 2, 9, 8), 3, 0},
		{"prompt shorter than the entry", toks(1, 2), 2, 0},
		{"single-token entry", toks(7, 7), 1, 1},
		{"no common token", toks(5), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := c.Partition("").Lookup(t.Context(), tt.prompt, Query{Limit: tt.limit})
			if tt.want == 0 {
				assert.Nil(t, l)
				return
			}
			require.NotNil(t, l)
			defer l.Release()
			assert.Equal(t, tt.want, l.Len())
			assert.Equal(t, tt.want, l.Target().Len())
		})
	}
	st := c.Stats()
	assert.Equal(t, int64(5), st.Hits)
	assert.Equal(t, int64(4), st.Misses)
	assert.Equal(t, int64(6+3+3+4+1), st.CachedTokens)
	assert.Equal(t, 4, st.Entries)
}

func TestLookupNeedsDraft(t *testing.T) {
	c, _ := newCache(t, 1<<20)
	insert(t, c, toks(1, 2), 10, true)
	insert(t, c, toks(1, 2, 3, 4), 10, false)
	l := c.Partition("").Lookup(t.Context(), toks(1, 2, 3, 4, 5), Query{Limit: 4, NeedDraft: true})
	require.NotNil(t, l)
	assert.Equal(t, 2, l.Len())
	assert.NotNil(t, l.Draft())
	l.Release()
	l = c.Partition("").Lookup(t.Context(), toks(1, 2, 3, 4, 5), Query{Limit: 4})
	require.NotNil(t, l)
	assert.Equal(t, 4, l.Len())
	assert.Nil(t, l.Draft())
	l.Release()
	// An entry with the drafter's state replaces one without for the same tokens.
	insert(t, c, toks(1, 2, 3, 4), 10, true)
	l = c.Partition("").Lookup(t.Context(), toks(1, 2, 3, 4, 5), Query{Limit: 4, NeedDraft: true})
	require.NotNil(t, l)
	assert.Equal(t, 4, l.Len())
	l.Release()
	assert.Equal(t, 2, c.Stats().Entries)
}

func TestInsertRejectsBadStates(t *testing.T) {
	c, _ := newCache(t, 100)
	_, err := c.Partition("").Insert(t.Context(), nil, &state{}, nil)
	assert.ErrorContains(t, err, "empty prefix")
	_, err = c.Partition("").Insert(t.Context(), toks(1), nil, nil)
	assert.ErrorContains(t, err, "nil target")
	_, err = c.Partition("").Insert(t.Context(), toks(1, 2), &state{n: 1}, nil)
	assert.ErrorContains(t, err, "covers 1 positions")
	_, err = c.Partition("").Insert(t.Context(), toks(1, 2), &state{n: 2}, &state{n: 1})
	assert.ErrorContains(t, err, "drafter state covers 1")
	ok, err := c.Partition("").Insert(t.Context(), toks(1, 2), &state{n: 2, bytes: 200}, nil)
	require.NoError(t, err)
	assert.False(t, ok, "an entry over the whole budget is refused")
	assert.Equal(t, int64(1), c.Stats().Rejected)
}

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	// Each entry costs 100 bytes of state + 4 per token.
	c, clock := newCache(t, 3*(100+4*2))
	a, b, d := toks(1, 1), toks(2, 2), toks(3, 3)
	require.True(t, insert(t, c, a, 100, false))
	clock.Advance(time.Second)
	require.True(t, insert(t, c, b, 100, false))
	clock.Advance(time.Second)
	require.True(t, insert(t, c, d, 100, false))
	clock.Advance(time.Second)
	// Using a makes b the least recently used.
	l := c.Partition("").Lookup(t.Context(), slices3(a), Query{Limit: 2})
	require.NotNil(t, l)
	l.Release()
	clock.Advance(time.Second)
	require.True(t, insert(t, c, toks(4, 4), 100, false))
	assert.Nil(t, c.Partition("").Lookup(t.Context(), slices3(b), Query{Limit: 2}), "b was evicted")
	for _, p := range [][]ports.Token{a, d, toks(4, 4)} {
		l := c.Partition("").Lookup(t.Context(), slices3(p), Query{Limit: 2})
		if assert.NotNil(t, l, "%v stays", p) {
			l.Release()
		}
	}
	st := c.Stats()
	assert.Equal(t, int64(1), st.Evictions)
	assert.Equal(t, 3, st.Entries)
	assert.Equal(t, int64(3*108), st.Bytes)
}

// slices3 is p followed by one more token, so that a lookup limited to len(p) can hit p.
func slices3(p []ports.Token) []ports.Token { return append(append([]ports.Token{}, p...), 99) }

func TestEntriesInUseAreNeverEvicted(t *testing.T) {
	c, _ := newCache(t, 2*(100+4))
	require.True(t, insert(t, c, toks(1), 100, false))
	require.True(t, insert(t, c, toks(2), 100, false))
	l1 := c.Partition("").Lookup(t.Context(), toks(1, 0), Query{Limit: 1})
	l2 := c.Partition("").Lookup(t.Context(), toks(2, 0), Query{Limit: 1})
	require.NotNil(t, l1)
	require.NotNil(t, l2)
	assert.False(t, insert(t, c, toks(3), 100, false), "no room while both are in use")
	assert.Equal(t, int64(1), c.Stats().Rejected)
	l1.Release()
	l1.Release() // a second release does nothing
	assert.True(t, insert(t, c, toks(3), 100, false))
	assert.Nil(t, c.Partition("").Lookup(t.Context(), toks(1, 0), Query{Limit: 1}))
	l := c.Partition("").Lookup(t.Context(), toks(2, 0), Query{Limit: 1})
	require.NotNil(t, l)
	l.Release()
	l2.Release()
}

func TestRadixTreePrunes(t *testing.T) {
	c, _ := newCache(t, 1<<20)
	insert(t, c, toks(1, 2, 3, 4), 1, false)
	insert(t, c, toks(1, 2, 5, 6), 1, false)
	insert(t, c, toks(1, 2), 1, false)
	require.Len(t, c.roots[""].children, 1)
	mid := c.roots[""].children[1]
	assert.Equal(t, toks(1, 2), mid.edge)
	assert.Len(t, mid.children, 2)
	// Removing the middle entry keeps the split node (two children); removing one branch merges the rest.
	c.mu.Lock()
	c.remove(mid.entry)
	c.remove(find(c.roots[""], toks(1, 2, 3, 4)).entry)
	c.mu.Unlock()
	require.Len(t, c.roots[""].children, 1)
	assert.Equal(t, toks(1, 2, 5, 6), c.roots[""].children[1].edge)
	assert.Equal(t, 4, c.roots[""].children[1].depth)
	l := c.Partition("").Lookup(t.Context(), toks(1, 2, 5, 6, 7), Query{Limit: 4})
	require.NotNil(t, l)
	assert.Equal(t, 4, l.Len())
	l.Release()
	c.mu.Lock()
	c.remove(find(c.roots[""], toks(1, 2, 5, 6)).entry)
	c.mu.Unlock()
	assert.Empty(t, c.roots, "the tenant's empty tree goes")
	assert.Equal(t, Stats{Hits: 1, CachedTokens: 4, Inserts: 3}, c.Stats())
}

func TestBoundaries(t *testing.T) {
	tests := []struct {
		from, to, every int
		want            []int
	}{
		{0, 10, 0, []int{10}},
		{0, 10, 4, []int{4, 8, 10}},
		{0, 8, 4, []int{4, 8}},
		{5, 13, 4, []int{8, 12, 13}},
		{8, 9, 4, []int{9}},
		{9, 9, 4, nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Boundaries(tt.from, tt.to, tt.every), "%d..%d every %d", tt.from, tt.to, tt.every)
	}
}

// TestConcurrentUseStaysWithinBudget runs lookups and inserts from many goroutines and checks, after every
// operation, that the cache holds at most its budget and that every hit is a true prefix of the prompt.
func TestConcurrentUseStaysWithinBudget(t *testing.T) {
	const budget = 5000
	c, clock := newCache(t, budget)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 400 {
				n := 1 + r.IntN(40)
				prompt := make([]ports.Token, n)
				for i := range prompt {
					prompt[i] = ports.Token(r.IntN(3)) // few distinct tokens: many shared prefixes
				}
				if l := c.Partition("").Lookup(t.Context(), prompt, Query{Limit: n}); l != nil {
					assert.LessOrEqual(t, l.Len(), n)
					clock.Advance(time.Millisecond)
					l.Release()
				}
				cut := 1 + r.IntN(n)
				_, err := c.Partition("").Insert(t.Context(), prompt[:cut], &state{n: cut, bytes: int64(100 + r.IntN(900))}, nil)
				assert.NoError(t, err)
				assert.LessOrEqual(t, c.Stats().Bytes, int64(budget))
			}
		}()
	}
	wg.Wait()
	st := c.Stats()
	assert.LessOrEqual(t, st.Bytes, int64(budget))
	assert.Positive(t, st.Evictions)
	assert.Positive(t, st.Hits)
	// The byte count matches the entries still in the tree, and every entry is reachable by its own key.
	var sum int64
	var count int
	var walk func(n *node, path []ports.Token)
	walk = func(n *node, path []ports.Token) {
		path = append(append([]ports.Token{}, path...), n.edge...)
		assert.Equal(t, len(path), n.depth)
		if n.entry != nil {
			sum += n.entry.bytes
			count++
			assert.Equal(t, 0, n.entry.refs)
			assert.Equal(t, len(path), n.entry.target.Len())
		}
		for k, ch := range n.children {
			assert.Equal(t, k, ch.edge[0])
			assert.Same(t, n, ch.parent)
			walk(ch, path)
		}
	}
	if root := c.roots[""]; root != nil {
		walk(root, nil)
	}
	assert.Equal(t, st.Bytes, sum)
	assert.Equal(t, st.Entries, count)
}

func TestLookupTruncate(t *testing.T) {
	c, _ := newCache(t, 1<<20)
	insert(t, c, toks(1, 2, 3, 4, 5, 6), 10, false)
	insert(t, c, toks(1, 2, 3, 4, 5, 6, 7, 8, 9), 10, true)
	insert(t, c, toks(1, 2), 10, false)
	tests := []struct {
		name      string
		prompt    []ports.Token
		q         Query
		want      int // 0: miss
		entry     int // the entry's length
		wantDraft bool
	}{
		{"whole entries only", toks(1, 2, 3, 4, 9), Query{Limit: 4}, 2, 2, false},
		{"diverges inside an edge", toks(1, 2, 3, 4, 9), Query{Limit: 4, Truncate: true}, 4, 6, false},
		{"the limit cuts an entry", toks(1, 2, 3, 4, 5, 6), Query{Limit: 5, Truncate: true}, 5, 6, false},
		{"the shortest entry below is used", toks(1, 2, 3, 4, 5, 6, 7, 0), Query{Limit: 7, Truncate: true}, 7, 9, true},
		{"with the drafter's state", toks(1, 2, 3, 0), Query{Limit: 3, Truncate: true, NeedDraft: true}, 3, 9, true},
		{"a whole entry beats a cut one of the same length", toks(1, 2, 3, 4, 5, 6, 0), Query{Limit: 6, Truncate: true}, 6, 6, false},
		{"no common token", toks(9), Query{Limit: 1, Truncate: true}, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := c.Partition("").Lookup(t.Context(), tt.prompt, tt.q)
			if tt.want == 0 {
				assert.Nil(t, l)
				return
			}
			require.NotNil(t, l)
			defer l.Release()
			assert.Equal(t, tt.want, l.Len())
			assert.Equal(t, tt.entry, l.Target().Len())
			assert.Equal(t, tt.wantDraft, l.Draft() != nil)
		})
	}
}

// TestPartitionsAreIsolated: a tenant never hits what another cached, however the prompts agree, not even a
// truncated hit; the same prefix cached by both is two entries; the tenants share one budget and one LRU
// order, and the cache's account covers them all.
func TestPartitionsAreIsolated(t *testing.T) {
	c, clock := newCache(t, 300)
	a, b := c.Partition("a"), c.Partition("b")
	ins := func(p *Partition, tokens []ports.Token) bool {
		t.Helper()
		ok, err := p.Insert(t.Context(), tokens, &state{n: len(tokens), bytes: 80}, nil)
		require.NoError(t, err)
		clock.Advance(time.Millisecond)
		return ok
	}
	require.True(t, ins(a, toks(1, 2, 3, 4)))
	for _, q := range []Query{{Limit: 4}, {Limit: 3, Truncate: true}, {Limit: 1, Truncate: true}} {
		assert.Nil(t, b.Lookup(t.Context(), toks(1, 2, 3, 4, 5), q), "b sees nothing of a's entries (%+v)", q)
		assert.Nil(t, c.Partition("").Lookup(t.Context(), toks(1, 2, 3, 4, 5), q), "nor does the keyless tenant")
	}
	l := a.Lookup(t.Context(), toks(1, 2, 3, 4, 5), Query{Limit: 4})
	require.NotNil(t, l, "a hits its own entry")
	assert.Equal(t, 4, l.Len())
	l.Release()

	require.True(t, ins(b, toks(1, 2, 3, 4)), "b caches the same prefix as an entry of its own")
	assert.Equal(t, 2, c.Stats().Entries)
	la := a.Lookup(t.Context(), toks(1, 2, 3, 4, 5), Query{Limit: 4})
	require.NotNil(t, la)
	clock.Advance(time.Millisecond)
	l = b.Lookup(t.Context(), toks(1, 2, 3, 4, 5), Query{Limit: 4})
	require.NotNil(t, l)
	assert.NotSame(t, la.Target(), l.Target(), "each tenant restores its own state")
	la.Release()
	l.Release()

	// One budget: b's new entries evict the least recently used entry, a's.
	require.True(t, ins(b, toks(7, 7, 7, 7)))
	require.True(t, ins(b, toks(8, 8, 8, 8)))
	st := c.Stats()
	assert.LessOrEqual(t, st.Bytes, int64(300))
	assert.Equal(t, int64(1), st.Evictions)
	assert.Nil(t, a.Lookup(t.Context(), toks(1, 2, 3, 4, 5), Query{Limit: 4}), "a's entry was evicted")
	c.mu.Lock()
	_, hasA := c.roots["a"]
	c.mu.Unlock()
	assert.False(t, hasA, "a tenant without entries keeps no tree")
	l = b.Lookup(t.Context(), toks(1, 2, 3, 4, 5), Query{Limit: 4})
	assert.NotNil(t, l, "b's copy stays")
	l.Release()
}

func TestNilCacheHasNoPartition(t *testing.T) {
	var c *Cache
	assert.Nil(t, c.Partition("a"))
}
