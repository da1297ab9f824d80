package prefixcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// codec is a fake ports.PrefixCodec of the test's states: "n bytes tag".
type codec struct{ kind string }

func (c codec) EncodePrefix(p ports.PrefixState) ([]byte, error) {
	s, ok := p.(*state)
	if !ok {
		return nil, fmt.Errorf("state %T", p)
	}
	return fmt.Appendf(nil, "%s %d %d %q", c.kind, s.n, s.bytes, s.tag), nil
}

func (c codec) DecodePrefix(b []byte) (ports.PrefixState, error) {
	s := &state{}
	var kind string
	if _, err := fmt.Sscanf(string(b), "%s %d %d %q", &kind, &s.n, &s.bytes, &s.tag); err != nil || kind != c.kind {
		return nil, fmt.Errorf("%q: %w", b, ports.ErrPrefixRecordInvalid)
	}
	return s, nil
}

// store is a fake ports.PrefixStore in memory: records by key, a clock for their write times, failures to
// inject, and a count of reads.
type store struct {
	mu      sync.Mutex
	clock   ports.Clock
	recs    map[string]storedRec
	corrupt map[string]bool // keys whose next Get fails as invalid
	putErr  error
	gets    int
}

type storedRec struct {
	rec     ports.PrefixRecord
	written time.Time
}

func newStore(clock ports.Clock) *store {
	return &store{clock: clock, recs: map[string]storedRec{}, corrupt: map[string]bool{}}
}

func recKey(tenant string, tokens []ports.Token) string { return tenant + "/" + tokenKey(tokens) }

func (s *store) Put(ctx context.Context, r ports.PrefixRecord) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.putErr != nil {
		return 0, s.putErr
	}
	r.Tokens = slices.Clone(r.Tokens)
	s.recs[recKey(r.Tenant, r.Tokens)] = storedRec{r, s.clock.Now()}
	return int64(len(r.Target) + len(r.Draft) + 4*len(r.Tokens) + recordOverhead), nil
}

func (s *store) Get(ctx context.Context, tenant string, tokens []ports.Token) (ports.PrefixRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	k := recKey(tenant, tokens)
	if s.corrupt[k] {
		delete(s.recs, k)
		return ports.PrefixRecord{}, fmt.Errorf("checksum: %w", ports.ErrPrefixRecordInvalid)
	}
	r, ok := s.recs[k]
	if !ok {
		return ports.PrefixRecord{}, ports.ErrPrefixRecordMissing
	}
	return r.rec, nil
}

func (s *store) Delete(tenant string, tokens []ports.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, recKey(tenant, tokens))
	return nil
}

func (s *store) List(ctx context.Context) ([]ports.PrefixRecordInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ports.PrefixRecordInfo
	for _, r := range s.recs {
		out = append(out, ports.PrefixRecordInfo{Tenant: r.rec.Tenant, Tokens: r.rec.Tokens, Draft: r.rec.Draft != nil,
			Bytes: int64(len(r.rec.Target) + len(r.rec.Draft) + 4*len(r.rec.Tokens) + recordOverhead), Written: r.written})
	}
	return out, nil
}

func (s *store) has(tenant ports.Tenant, tokens []ports.Token) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.recs[recKey(TenantDigest(tenant), tokens)]
	return ok
}

func (s *store) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// errs collects OnError's reports.
type errs struct {
	mu   sync.Mutex
	list []error
}

func (e *errs) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, err)
}

func (e *errs) all() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// diskCache opens a cache of budget bytes in memory over st, with diskBudget bytes on it.
func diskCache(t *testing.T, st *store, clock ports.Clock, budget, diskBudget int64) (*Cache, *errs) {
	t.Helper()
	e := &errs{}
	c, err := Open(t.Context(), Config{Budget: budget}, clock, DiskConfig{Store: st, Target: codec{"T"}, Draft: codec{"D"}, Budget: diskBudget, OnError: e.add})
	require.NoError(t, err)
	return c, e
}

func put(t *testing.T, p *Partition, tokens []ports.Token, bytes int64, draft bool) {
	t.Helper()
	var d ports.PrefixState
	if draft {
		d = &state{n: len(tokens), tag: "draft"}
	}
	ok, err := p.Insert(t.Context(), tokens, &state{n: len(tokens), bytes: bytes, tag: "t"}, d)
	require.NoError(t, err)
	require.True(t, ok)
}

func TestDiskConfigValidate(t *testing.T) {
	err := DiskConfig{}.Validate()
	require.Error(t, err)
	for _, want := range []string{"no store", "cannot encode", "budget 0"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = Open(t.Context(), Config{Budget: 10}, portfake.NewClock(0), DiskConfig{Store: newStore(portfake.NewClock(0))})
	assert.Error(t, err)
}

// TestEvictedEntriesSpillAndHit: an entry evicted from memory is written to disk and a later lookup that finds
// nothing as long in memory reads it back, exactly.
func TestEvictedEntriesSpillAndHit(t *testing.T) {
	clock := portfake.NewClock(time.Second)
	st := newStore(clock)
	c, reported := diskCache(t, st, clock, 150, 1<<20)
	p := c.Partition("a")
	a, b := seq(0, 10), seq(100, 110)
	put(t, p, a, 100, true)
	assert.False(t, st.has("a", a), "nothing spills while memory has room")
	put(t, p, b, 100, true)
	require.True(t, st.has("a", a), "a was evicted to disk")
	s := c.Stats()
	assert.Equal(t, int64(1), s.Evictions)
	assert.Equal(t, int64(1), s.DiskWrites)
	assert.Equal(t, 1, s.DiskEntries)
	assert.Positive(t, s.DiskBytes)

	l := p.Lookup(t.Context(), append(slices.Clone(a), 1, 2), Query{Limit: 11, NeedDraft: true})
	require.NotNil(t, l)
	assert.Equal(t, 10, l.Len())
	assert.Equal(t, &state{n: 10, bytes: 100, tag: "t"}, l.Target())
	assert.Equal(t, &state{n: 10, tag: "draft"}, l.Draft())
	l.Release()
	s = c.Stats()
	assert.Equal(t, int64(1), s.Hits)
	assert.Equal(t, int64(1), s.DiskHits)
	assert.Equal(t, int64(10), s.CachedTokens)

	// A memory hit as long as the disk's is served from memory.
	l = p.Lookup(t.Context(), append(slices.Clone(b), 1), Query{Limit: 10})
	require.NotNil(t, l)
	l.Release()
	assert.Equal(t, int64(1), c.Stats().DiskHits)
	assert.Empty(t, reported.all())
}

// TestDiskTierAcrossRestarts: Flush writes the hot set, and a cache opened over the same store finds it.
func TestDiskTierAcrossRestarts(t *testing.T) {
	clock := portfake.NewClock(time.Second)
	st := newStore(clock)
	c, _ := diskCache(t, st, clock, 1<<20, 1<<20)
	put(t, c.Partition("a"), seq(0, 8), 10, false)
	put(t, c.Partition("b"), seq(0, 12), 10, true)
	n, err := c.Flush(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = c.Flush(t.Context())
	require.NoError(t, err)
	assert.Zero(t, n, "what is on disk is not written again")

	c2, _ := diskCache(t, st, clock, 1<<20, 1<<20)
	assert.Equal(t, 2, c2.Stats().DiskEntries)
	l := c2.Partition("b").Lookup(t.Context(), seq(0, 20), Query{Limit: 19, NeedDraft: true})
	require.NotNil(t, l)
	assert.Equal(t, 12, l.Len())
	l.Release()
	// Tenant a's record is a's alone; b's needs a drafter a's lacks.
	assert.Nil(t, c2.Partition("c").Lookup(t.Context(), seq(0, 20), Query{Limit: 19}), "another tenant")
	assert.Nil(t, c2.Partition("a").Lookup(t.Context(), seq(0, 20), Query{Limit: 19, NeedDraft: true}), "no drafter context")
	l = c2.Partition("a").Lookup(t.Context(), seq(0, 20), Query{Limit: 19})
	require.NotNil(t, l)
	assert.Equal(t, 8, l.Len())
	l.Release()
}

// TestDiskLookupTruncates: an attention-only request may use the first part of a longer record.
func TestDiskLookupTruncates(t *testing.T) {
	clock := portfake.NewClock(time.Second)
	st := newStore(clock)
	c, _ := diskCache(t, st, clock, 1<<20, 1<<20)
	put(t, c.Partition(""), seq(0, 10), 10, false)
	_, err := c.Flush(t.Context())
	require.NoError(t, err)
	c2, _ := diskCache(t, st, clock, 1<<20, 1<<20)
	prompt := append(seq(0, 6), 99, 98)
	assert.Nil(t, c2.Partition("").Lookup(t.Context(), prompt, Query{Limit: 7}), "a hybrid request cannot cut")
	l := c2.Partition("").Lookup(t.Context(), prompt, Query{Limit: 7, Truncate: true})
	require.NotNil(t, l)
	assert.Equal(t, 6, l.Len())
	assert.Equal(t, 10, l.Target().Len())
	l.Release()
}

// TestDiskBudget: records beyond the disk budget go, least recently used first; a budget lowered across a
// restart is kept at Open; an entry too large for the disk is refused.
func TestDiskBudget(t *testing.T) {
	clock := portfake.NewClock(time.Second)
	st := newStore(clock)
	one := int64(len(`T 10 100 "t"`) + 40 + recordOverhead) // a record's reservation
	c, _ := diskCache(t, st, clock, 150, 2*one)
	p := c.Partition("")
	keys := [][]ports.Token{seq(0, 10), seq(10, 20), seq(20, 30), seq(30, 40)}
	for _, k := range keys {
		put(t, p, k, 100, false)
	}
	// keys[0..2] were evicted in turn; the disk holds the two most recent of them.
	assert.False(t, st.has("", keys[0]))
	assert.True(t, st.has("", keys[1]))
	assert.True(t, st.has("", keys[2]))
	s := c.Stats()
	assert.Equal(t, int64(1), s.DiskEvictions)
	assert.Equal(t, 2, s.DiskEntries)
	assert.LessOrEqual(t, s.DiskBytes, 2*one)

	// Reading keys[1] makes it the most recent: the next spill evicts keys[2].
	l := p.Lookup(t.Context(), append(slices.Clone(keys[1]), 0), Query{Limit: 10})
	require.NotNil(t, l)
	l.Release()
	put(t, p, seq(40, 50), 100, false) // evicts keys[3] to disk
	assert.True(t, st.has("", keys[1]))
	assert.False(t, st.has("", keys[2]))
	assert.True(t, st.has("", keys[3]))

	// Reopened with room for one: the older record goes.
	c2, _ := diskCache(t, st, clock, 150, one)
	assert.Equal(t, 1, c2.Stats().DiskEntries)
	assert.Equal(t, 1, st.len())
	assert.True(t, st.has("", keys[3]))

	// An entry larger than the whole disk budget is refused, and nothing is evicted for it.
	c3, _ := diskCache(t, st, clock, 1<<20, 10)
	put(t, c3.Partition(""), seq(0, 5), 10, false)
	n, err := c3.Flush(t.Context())
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, int64(1), c3.Stats().DiskRejected)
}

// TestFlushKeepsTheHotSet: with room for one record, Flush keeps the most recently used entry.
func TestFlushKeepsTheHotSet(t *testing.T) {
	clock := portfake.NewClock(time.Second)
	st := newStore(clock)
	one := int64(len(`T 10 100 "t"`) + 40 + recordOverhead)
	c, _ := diskCache(t, st, clock, 1<<20, one)
	p := c.Partition("")
	put(t, p, seq(0, 10), 100, false)
	put(t, p, seq(10, 20), 100, false)
	put(t, p, seq(20, 30), 100, false)
	l := p.Lookup(t.Context(), seq(10, 21), Query{Limit: 10})
	require.NotNil(t, l)
	l.Release()
	n, err := c.Flush(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.True(t, st.has("", seq(10, 20)), "the most recently used")
	assert.Equal(t, 1, st.len())
}

// TestUnusableRecordsAreDropped: a record the store finds corrupt, one it lost, and one the codec refuses are
// reported, dropped from the index, and the lookup answers from memory.
func TestUnusableRecordsAreDropped(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spoil func(st *store, k []ports.Token)
		want  error
	}{
		{"corrupt", func(st *store, k []ports.Token) { st.corrupt[recKey(TenantDigest(""), k)] = true }, ports.ErrPrefixRecordInvalid},
		{"missing", func(st *store, k []ports.Token) { delete(st.recs, recKey(TenantDigest(""), k)) }, ports.ErrPrefixRecordMissing},
		{"foreign state", func(st *store, k []ports.Token) {
			r := st.recs[recKey(TenantDigest(""), k)]
			r.rec.Target = []byte("X 1 2 y")
			st.recs[recKey(TenantDigest(""), k)] = r
		}, ports.ErrPrefixRecordInvalid},
		{"wrong length", func(st *store, k []ports.Token) {
			r := st.recs[recKey(TenantDigest(""), k)]
			r.rec.Target = []byte("T 3 100 \"t\"")
			st.recs[recKey(TenantDigest(""), k)] = r
		}, ports.ErrPrefixRecordInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := portfake.NewClock(time.Second)
			st := newStore(clock)
			c, _ := diskCache(t, st, clock, 1<<20, 1<<20)
			p := c.Partition("")
			put(t, p, seq(0, 10), 10, false)
			_, err := c.Flush(t.Context())
			require.NoError(t, err)
			c2, reported := diskCache(t, st, clock, 1<<20, 1<<20)
			put(t, c2.Partition(""), seq(0, 4), 10, false)
			tt.spoil(st, seq(0, 10))
			l := c2.Partition("").Lookup(t.Context(), seq(0, 12), Query{Limit: 11})
			require.NotNil(t, l, "memory's shorter prefix answers")
			assert.Equal(t, 4, l.Len())
			l.Release()
			require.Len(t, reported.all(), 1)
			assert.ErrorIs(t, reported.all()[0], tt.want)
			s := c2.Stats()
			assert.Equal(t, int64(1), s.DiskErrors)
			assert.Zero(t, s.DiskEntries, "dropped from the index")
			assert.Zero(t, s.DiskHits)
			// Never offered again.
			st.gets = 0
			l = c2.Partition("").Lookup(t.Context(), seq(0, 12), Query{Limit: 11})
			require.NotNil(t, l)
			l.Release()
			assert.Zero(t, st.gets)
		})
	}
}

// TestFailedWritesAreReported: a store that cannot write leaves no index entry and reports why.
func TestFailedWritesAreReported(t *testing.T) {
	clock := portfake.NewClock(time.Second)
	st := newStore(clock)
	st.putErr = errors.New("disk full")
	c, reported := diskCache(t, st, clock, 1<<20, 1<<20)
	put(t, c.Partition(""), seq(0, 10), 10, false)
	n, err := c.Flush(t.Context())
	require.NoError(t, err)
	assert.Zero(t, n)
	require.Len(t, reported.all(), 1)
	assert.True(t, strings.Contains(reported.all()[0].Error(), "disk full"))
	s := c.Stats()
	assert.Zero(t, s.DiskEntries)
	assert.Zero(t, s.DiskBytes)
	assert.Equal(t, int64(1), s.DiskErrors)
}

// TestConcurrentDiskLookups: many requests reading the same and different records at once, while others insert
// and spill, each get exactly their prefix; the budgets hold throughout.
func TestConcurrentDiskLookups(t *testing.T) {
	clock := portfake.NewClock(time.Millisecond)
	st := newStore(clock)
	c, _ := diskCache(t, st, clock, 1<<20, 1<<20)
	for k := range 4 {
		put(t, c.Partition(""), seq(k*100, k*100+20), 10, true)
	}
	_, err := c.Flush(t.Context())
	require.NoError(t, err)
	c2, reported := diskCache(t, st, clock, 300, 1<<20)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := c2.Partition("")
			for i := range 30 {
				k := (g + i) % 4
				prompt := append(seq(k*100, k*100+20), 7, 8)
				l := p.Lookup(t.Context(), prompt, Query{Limit: 20, NeedDraft: true})
				if assert.NotNil(t, l) {
					assert.Equal(t, 20, l.Len())
					assert.Equal(t, 20, l.Target().Len())
					assert.Equal(t, 20, l.Draft().Len())
					l.Release()
				}
				// Inserts of longer prefixes fill memory and spill to disk meanwhile.
				_, err := p.Insert(t.Context(), prompt[:21+i%2], &state{n: 21 + i%2, bytes: 100}, &state{n: 21 + i%2})
				assert.NoError(t, err)
				s := c2.Stats()
				assert.LessOrEqual(t, s.Bytes, int64(300))
			}
		}()
	}
	wg.Wait()
	assert.Empty(t, reported.all())
	assert.Positive(t, c2.Stats().DiskHits)
}
