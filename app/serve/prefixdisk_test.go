package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// newDiskServe is a Serve over e with a prefix cache of 64 MiB in memory and a disk tier in dir.
func newDiskServe(t *testing.T, e Engine, dir string) *Serve {
	t.Helper()
	s, err := NewServe(ServeConfig{MaxConcurrency: 2, QueueSize: 8, PrefixCacheBytes: 64 << 20, PrefixCacheEvery: 8,
		PrefixCacheDir: dir, PrefixCacheDiskBytes: 64 << 20}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(e))
	return s
}

// TestPrefixCacheDiskExact: after a simulated restart (a new Serve over the same directory, its memory tier
// empty) a disk hit gives the same output as no cache, token for token: dense and hybrid CPU targets, greedy
// and seeded, with and without the drafter. A partial write and a corrupt record left in the directory are
// ignored; another model's identity and another tenant find nothing.
func TestPrefixCacheDiskExact(t *testing.T) {
	families := []string{"qwen3", "qwen3_next"}
	if testing.Short() {
		families = families[1:]
	}
	seed := uint64(17)
	for _, fam := range families {
		for _, bs := range []int{1, 4} {
			for _, temp := range []float64{0, 0.9} {
				t.Run(fmt.Sprintf("%s/bs%d/T%g", fam, bs, temp), func(t *testing.T) {
					e := cpuEngine(t, fam, srvTemplate{})
					e.Identity = "test-weights:" + fam
					dir := t.TempDir()
					off := newServeWith(t, e, 0, 0)
					req := func(tenant ports.Tenant, msgs ...ports.ChatMessage) ports.GenerateRequest {
						return ports.GenerateRequest{Messages: msgs, MaxTokens: 10, BlockSize: bs, Seed: &seed,
							Sampling: ports.SamplingParams{Temperature: temp}, Tenant: tenant}
					}
					check := func(s *Serve, r ports.GenerateRequest) ports.GenerateResult {
						want, got := gen(t, off, r), gen(t, s, r)
						require.Equal(t, want.Content, got.Content, "the disk tier changes nothing")
						require.Equal(t, want.CompletionTokens, got.CompletionTokens)
						return got
					}
					sys := ports.ChatMessage{Role: "system", Content: "You are a terse helper for the disk tier test, answer briefly"}
					u1 := ports.ChatMessage{Role: "user", Content: "hello there"}

					first := newDiskServe(t, e, dir)
					r1 := check(first, req("a", sys, u1))
					assert.Zero(t, r1.CachedTokens)
					n, err := first.FlushPrefixCache(t.Context())
					require.NoError(t, err)
					require.Positive(t, n, "the hot set is written at shutdown")

					// Leave a partial write (as a killed process would) and damage one record.
					names, err := filepath.Glob(filepath.Join(dir, "*.hpc"))
					require.NoError(t, err)
					require.NotEmpty(t, names)
					b, err := os.ReadFile(names[0])
					require.NoError(t, err)
					require.NoError(t, os.WriteFile(names[0]+".tmp12345", b[:len(b)/2], 0o600))
					if len(names) > 1 {
						b, err := os.ReadFile(names[1])
						require.NoError(t, err)
						b[len(b)-1] ^= 0x40
						require.NoError(t, os.WriteFile(names[1], b, 0o600))
					}

					// The restart.
					second := newDiskServe(t, e, dir)
					again := check(second, req("a", sys, u1))
					assert.Positive(t, again.CachedTokens, "the same prompt hits the disk tier")
					st := second.PrefixCacheStats()
					assert.Equal(t, int64(1), st.DiskHits)
					a1 := ports.ChatMessage{Role: "assistant", Content: r1.Content}
					u2 := ports.ChatMessage{Role: "user", Content: "and once more"}
					next := check(second, req("a", sys, u1, a1, u2))
					assert.Positive(t, next.CachedTokens, "the next turn reuses the conversation")
					// Another tenant finds nothing of a's.
					other := check(second, req("b", sys, u1))
					assert.Zero(t, other.CachedTokens, "another tenant")
					for _, n := range mustGlob(t, filepath.Join(dir, "*")) {
						assert.NotContains(t, n, ".tmp", "the partial write is gone")
					}

					// Another model's identity over the same directory reads none of these records.
					foreign := e
					foreign.Identity = "test-weights:other"
					third := newDiskServe(t, foreign, dir)
					assert.Zero(t, check(third, req("a", sys, u1)).CachedTokens, "a foreign model")
				})
			}
		}
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := filepath.Glob(pattern)
	require.NoError(t, err)
	return out
}

// TestPrefixCacheDiskEviction: with room in memory for little, entries evicted from memory are written to disk
// as requests run and read back by later ones, which still answer exactly.
func TestPrefixCacheDiskEviction(t *testing.T) {
	e := cpuEngine(t, "qwen3_next", srvTemplate{})
	e.Identity = "test-weights:evict"
	off := newServeWith(t, e, 0, 0)
	s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 8, PrefixCacheBytes: 1, PrefixCacheEvery: 0,
		PrefixCacheDir: t.TempDir(), PrefixCacheDiskBytes: 64 << 20}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(e))
	// Size the memory tier to one entry of this model.
	probe := newServeWith(t, e, 64<<20, 0)
	mk := func(topic string) ports.GenerateRequest {
		return ports.GenerateRequest{MaxTokens: 6, BlockSize: 4, Messages: []ports.ChatMessage{
			{Role: "system", Content: "shared system prompt of the eviction test"}, {Role: "user", Content: topic}}}
	}
	gen(t, probe, mk("first topic"))
	one := probe.PrefixCacheStats().Bytes / int64(probe.PrefixCacheStats().Entries)
	s.cfg.PrefixCacheBytes = one + one/2
	require.NoError(t, s.SetEngine(e))

	topics := []string{"first topic", "second topic", "third topic"}
	answers := map[string]string{}
	for _, tp := range topics {
		want := gen(t, off, mk(tp)).Content
		assert.Equal(t, want, gen(t, s, mk(tp)).Content)
		answers[tp] = want
	}
	st := s.PrefixCacheStats()
	assert.Positive(t, st.Evictions)
	assert.Positive(t, st.DiskEntries, "evicted entries went to disk")
	// The first conversation's next turn starts with its generation's end, now on disk only.
	turn := mk(topics[0])
	turn.Messages = append(turn.Messages, ports.ChatMessage{Role: "assistant", Content: answers[topics[0]]},
		ports.ChatMessage{Role: "user", Content: "go on"})
	res := gen(t, s, turn)
	assert.Equal(t, gen(t, off, turn).Content, res.Content)
	assert.Positive(t, res.CachedTokens)
	assert.Positive(t, s.PrefixCacheStats().DiskHits, "the first topic came back from disk")
}

// TestPrefixCacheDiskRefused: a backend that cannot write its states, or a model without an identity, refuses
// a disk tier at start, saying why.
func TestPrefixCacheDiskRefused(t *testing.T) {
	fake, _ := srvEngine(256, 0, false)
	s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 1, PrefixCacheBytes: 1 << 20, PrefixCacheDir: t.TempDir(), PrefixCacheDiskBytes: 1 << 20}, zerolog.Nop())
	require.NoError(t, err)
	fake.Backend = "mlx"
	err = s.SetEngine(fake)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the mlx backend cannot write its prefix states to disk")

	e := cpuEngine(t, "qwen3", srvTemplate{})
	err = s.SetEngine(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "identity is unknown")

	for _, cfg := range []ServeConfig{
		{MaxConcurrency: 1, PrefixCacheBytes: 1, PrefixCacheDir: "x"},
		{MaxConcurrency: 1, PrefixCacheDir: "x", PrefixCacheDiskBytes: 1},
		{MaxConcurrency: 1, PrefixCacheDiskBytes: -1},
	} {
		assert.Error(t, cfg.Validate(), "%+v", cfg)
	}
}

// TestPrefixCacheDiskUnload: an engine unloaded (the fleet's keep-alive or eviction) keeps its cache's entries
// for the next FlushPrefixCache, which writes them; loading the model again finds them on disk.
func TestPrefixCacheDiskUnload(t *testing.T) {
	e := cpuEngine(t, "qwen3", srvTemplate{})
	e.Identity = "test-weights:unload"
	dir := t.TempDir()
	s := newDiskServe(t, e, dir)
	r := ports.GenerateRequest{MaxTokens: 6, BlockSize: 4, Tenant: "a", Messages: []ports.ChatMessage{
		{Role: "system", Content: "a system prompt kept across an unload"}, {Role: "user", Content: "hi"}}}
	first := gen(t, s, r)
	require.NoError(t, s.Unload())
	assert.Empty(t, mustGlob(t, filepath.Join(dir, "*.hpc")), "nothing written yet")
	n, err := s.FlushPrefixCache(t.Context())
	require.NoError(t, err)
	assert.Positive(t, n)
	assert.NotEmpty(t, mustGlob(t, filepath.Join(dir, "*.hpc")))
	n, err = s.FlushPrefixCache(t.Context())
	require.NoError(t, err)
	assert.Zero(t, n, "flushed once")

	require.NoError(t, s.SetEngine(e))
	again := gen(t, s, r)
	assert.Equal(t, first.Content, again.Content)
	assert.Positive(t, again.CachedTokens)
	assert.Equal(t, int64(1), s.PrefixCacheStats().DiskHits)
}
