package serve

import (
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/ports"
)

// newPrefixCache makes the engine's cache, or nil when the configuration turns it off.
func newPrefixCache(cfg ServeConfig, clock ports.Clock) (*prefixcache.Cache, error) {
	if cfg.PrefixCacheBytes == 0 {
		return nil, nil
	}
	return prefixcache.New(prefixcache.Config{Budget: cfg.PrefixCacheBytes, Every: cfg.PrefixCacheEvery}, clock)
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
		Evictions: st.Evictions, Entries: st.Entries, Bytes: st.Bytes, Budget: l.prefix.Budget()}
}
