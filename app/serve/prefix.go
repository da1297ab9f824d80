package serve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/higgs-go/higgs/adapters/prefixstore"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/ports"
)

// newPrefixCache makes the engine's cache, or nil when the configuration turns it off; with a directory, its
// disk tier over the records e's model wrote there before.
func (s *Serve) newPrefixCache(e Engine) (*prefixcache.Cache, error) {
	cfg := s.cfg
	if cfg.PrefixCacheBytes == 0 {
		return nil, nil
	}
	pc := prefixcache.Config{Budget: cfg.PrefixCacheBytes, Every: cfg.PrefixCacheEvery}
	if cfg.PrefixCacheDir == "" {
		return prefixcache.New(pc, s.clock)
	}
	dc, err := s.diskTier(e)
	if err != nil {
		return nil, fmt.Errorf("--prefix-cache-dir: %w", err)
	}
	// Listing the directory's headers at start is bounded by the disk budget's files; it runs before the
	// engine serves, under no request's context.
	start := time.Now()
	c, err := prefixcache.Open(context.Background(), pc, s.clock, dc)
	if err != nil {
		return nil, fmt.Errorf("--prefix-cache-dir: %w", err)
	}
	st := c.Stats()
	s.log.Info().Str("dir", cfg.PrefixCacheDir).Int("records", st.DiskEntries).Int64("bytes", st.DiskBytes).
		Int64("evicted", st.DiskEvictions).Dur("took", time.Since(start)).Msg("prefix cache: disk tier open")
	return c, nil
}

// diskTier checks that e's model can write its states and opens its store.
func (s *Serve) diskTier(e Engine) (prefixcache.DiskConfig, error) {
	var errs []error
	tc, ok := e.Target.(ports.PrefixCodec)
	if !ok {
		errs = append(errs, fmt.Errorf("the %s backend cannot write its prefix states to disk (the cpu backend can); drop --prefix-cache-dir", backendOr(e.Backend)))
	}
	var dc ports.PrefixCodec
	if e.Drafter != nil {
		if dc, ok = e.Drafter.(ports.PrefixCodec); !ok {
			errs = append(errs, fmt.Errorf("the %s backend's drafter cannot write its context to disk; drop --prefix-cache-dir", backendOr(e.Backend)))
		}
	}
	if e.Identity == "" {
		errs = append(errs, errors.New("the model's identity is unknown (no model directory to take the weights' digest from), so records could not be told from another model's"))
	}
	if err := errors.Join(errs...); err != nil {
		return prefixcache.DiskConfig{}, err
	}
	store, err := prefixstore.Open(s.cfg.PrefixCacheDir, e.Identity, s.log, prefixstore.Options{})
	if err != nil {
		return prefixcache.DiskConfig{}, err
	}
	log := s.log
	return prefixcache.DiskConfig{Store: store, Target: tc, Draft: dc, Budget: s.cfg.PrefixCacheDiskBytes,
		OnError: func(err error) { log.Warn().Err(err).Msg("prefix cache: disk tier") }}, nil
}

func backendOr(b string) string {
	if b == "" {
		return "model's"
	}
	return b
}

// FlushPrefixCache writes the prefix cache's entries still only in memory to its disk tier, the most
// recently used first, so that the next start finds them: the loaded engine's cache and those of engines
// unloaded since the last call (the fleet calls it after unloading a model, before closing its backend,
// whose states the encoding reads). It returns the records written; without a disk tier it does nothing.
func (s *Serve) FlushPrefixCache(ctx context.Context) (int, error) {
	s.unflushedMu.Lock()
	caches := s.unflushed
	s.unflushed = nil
	s.unflushedMu.Unlock()
	if l := s.engine.Load(); l != nil && l.prefix.DiskBudget() > 0 {
		caches = append(caches, l.prefix)
	}
	total := 0
	var errs []error
	for _, c := range caches {
		start := time.Now()
		n, err := c.Flush(ctx)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
		st := c.Stats()
		s.log.Info().Int("written", n).Int("records", st.DiskEntries).Int64("bytes", st.DiskBytes).
			Dur("took", time.Since(start)).Msg("prefix cache: flushed to disk")
	}
	return total, errors.Join(errs...)
}

// sharedTenant is the one partition of a shared cache (--prefix-cache-shared).
const sharedTenant ports.Tenant = ""

// prefixPartition is the share of l's prefix cache a request of tenant may reuse and fill: the tenant's own,
// unless the operator shares the cache between tenants; nil while the cache is off.
func (s *Serve) prefixPartition(l *loaded, tenant ports.Tenant) *prefixcache.Partition {
	if s.cfg.PrefixCacheShared {
		tenant = sharedTenant
	}
	return l.prefix.Partition(tenant)
}

// PrefixCacheStats reports the prefix cache's account (httpapi.PrefixCacheReporter); zero while the cache is
// off or no engine is loaded.
func (s *Serve) PrefixCacheStats() ports.PrefixCacheStats {
	l := s.engine.Load()
	if l == nil || l.prefix == nil {
		return ports.PrefixCacheStats{}
	}
	st := l.prefix.Stats()
	return ports.PrefixCacheStats{Hits: st.Hits, Misses: st.Misses, CachedTokens: st.CachedTokens,
		Evictions: st.Evictions, Entries: st.Entries, Bytes: st.Bytes, Budget: l.prefix.Budget(),
		DiskHits: st.DiskHits, DiskEntries: st.DiskEntries, DiskBytes: st.DiskBytes, DiskBudget: l.prefix.DiskBudget()}
}
