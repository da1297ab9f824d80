// Package prefixcache is the reuse policy of the prefix cache: which cached prefix a request starts from,
// where state is exported, what is evicted. Entries are kept in a radix tree over token ids; each holds the
// opaque backend states (ports.PrefixState) of one prefix: the target's (attention KV, recurrent state at the
// entry's end) and optionally the drafter's context. The cache never looks inside a state: copying state in
// and out is the backends' job. It is safe for concurrent use.
//
// Every lookup and insert goes through a Partition, one per tenant: a tree of its own, so that a hit (and the
// time it saves) only ever reflects the same tenant's earlier prompts. The partitions share one byte budget
// and one least-recently-used order.
//
// With a disk tier (Open) entries evicted from memory, and on Flush the ones still in memory, are encoded
// (ports.PrefixCodec) and written to a ports.PrefixStore under a byte budget of their own; a lookup that
// finds a longer prefix on disk than in memory reads it back, and the disk's index is rebuilt from the store
// when the cache opens, so cached prefixes outlive the process.
package prefixcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/higgs-go/higgs/ports"
)

// tokenBytes is what one token id of an entry's key costs (int32).
const tokenBytes = 4

// Config tunes a Cache.
type Config struct {
	// Budget is the most bytes the entries may hold together (their states' Bytes plus their keys); > 0.
	Budget int64
	// Every is the interval, in tokens, of the prompt's intermediate boundaries (0: only the prompt's end and
	// the generation's end).
	Every int
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Budget <= 0 {
		errs = append(errs, fmt.Errorf("prefix cache budget %d bytes must be > 0", c.Budget))
	}
	if c.Every < 0 {
		errs = append(errs, fmt.Errorf("prefix cache interval %d tokens must be ≥ 0", c.Every))
	}
	return errors.Join(errs...)
}

// Stats are the cache's counters since it was made, and its current size.
type Stats struct {
	Hits, Misses int64
	// CachedTokens is the sum of the reused lengths of every hit.
	CachedTokens int64
	Inserts      int64
	// Rejected counts inserts refused because the budget was taken by entries in use (or the entry alone
	// exceeds it).
	Rejected  int64
	Evictions int64
	Entries   int
	Bytes     int64
	// The disk tier's account (zero without one): hits served from disk (also counted in Hits), records
	// written, records evicted from disk to keep its budget, records refused (larger than the budget, or only
	// younger ones to evict), problems reported to DiskConfig.OnError, and the records and bytes on disk now.
	DiskHits, DiskWrites, DiskEvictions, DiskRejected, DiskErrors int64
	DiskEntries                                                   int
	DiskBytes                                                     int64
}

// Cache is the prefix cache. The zero value is not usable; call New.
type Cache struct {
	cfg   Config
	clock ports.Clock

	mu sync.Mutex
	// roots holds each tenant's tree; a tenant whose last entry goes loses its root.
	roots map[ports.Tenant]*node
	seq   uint64 // insertion/use counter: breaks ties between equal clock readings in LRU order
	stats Stats
	// disk is the second tier (nil: memory only).
	disk *disk
}

// node is a radix tree node: edge is the token run from its parent to it (empty only at a root, whose parent
// is nil).
type node struct {
	edge     []ports.Token
	parent   *node
	children map[ports.Token]*node // by the first token of the child's edge
	entry    *entry
	depth    int // tokens from the root to this node
}

// entry is one cached prefix (its key is the path to its node).
type entry struct {
	tenant ports.Tenant
	key    []ports.Token // the prefix (the node's path, kept for the disk tier's records)
	node   *node
	target ports.PrefixState
	draft  ports.PrefixState
	bytes  int64
	refs   int
	used   time.Time
	seq    uint64
	// stored: the disk tier holds a record of this entry (it was read from there, or written), so evicting
	// it writes nothing.
	stored bool
}

// New returns an empty cache.
func New(cfg Config, clock ports.Clock) (*Cache, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if clock == nil {
		errs = append(errs, errors.New("prefix cache: nil clock"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("prefix cache: %w", err)
	}
	return &Cache{cfg: cfg, clock: clock, roots: map[ports.Tenant]*node{}}, nil
}

// Partition is one tenant's share of a Cache: its lookups find only what was inserted through a partition of
// the same tenant, whatever other tenants cached. A nil *Partition (of a nil Cache) caches nothing.
type Partition struct {
	c      *Cache
	tenant ports.Tenant
}

// Partition returns tenant's share of the cache; nil for a nil cache (the cache turned off).
func (c *Cache) Partition(tenant ports.Tenant) *Partition {
	if c == nil {
		return nil
	}
	return &Partition{c: c, tenant: tenant}
}

// Every returns the cache's boundary interval.
func (p *Partition) Every() int { return p.c.cfg.Every }

// Lookup finds the longest prefix of tokens this tenant cached that q allows, and counts a hit or a miss.
// Every hit is a true prefix of token ids: a prompt that differs from a cached one at position i reuses at
// most i tokens of it. A nil Lease is a miss.
// With a disk tier, a longer prefix found there is read back (ctx bounds the read); a record that cannot be
// used is dropped and reported (DiskConfig.OnError), and the lookup answers from memory.
func (p *Partition) Lookup(ctx context.Context, tokens []ports.Token, q Query) *Lease {
	return p.c.lookup(ctx, p.tenant, tokens, q)
}

// Insert caches the states of the prefix tokens for this tenant (len(tokens) == target.Len(); draft, when
// not nil, covers the same positions). It reports whether the entry is now cached. An entry the tenant
// already cached for the same tokens is kept (and counts as used) unless the new one adds a drafter state the
// old one lacks. To make room it evicts the least recently used entries not in use, of any tenant; when those
// do not free enough it refuses, so the cache never holds more than its budget. With a disk tier the entries
// evicted are written there before Insert returns (ctx bounds the writes).
func (p *Partition) Insert(ctx context.Context, tokens []ports.Token, target, draft ports.PrefixState) (bool, error) {
	ok, victims, err := p.c.insert(p.tenant, tokens, target, draft)
	p.c.spill(ctx, victims)
	return ok, err
}

// Every returns the configured boundary interval.
func (c *Cache) Every() int { return c.cfg.Every }

// Budget returns the byte budget.
func (c *Cache) Budget() int64 { return c.cfg.Budget }

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Lease is an entry in use by one request: while it is held the entry is never evicted. Release it once the
// request has imported its states (or gave up). A Lease is used by one goroutine.
type Lease struct {
	c *Cache
	e *entry
	n int
}

// Len returns the number of prompt tokens to reuse: the entry's length, or less for a truncated hit
// (Query.Truncate), whose states the caller cuts to Len after importing them.
func (l *Lease) Len() int { return l.n }

// Target returns the target session's state of the entry's prefix (it covers at least Len positions).
func (l *Lease) Target() ports.PrefixState { return l.e.target }

// Draft returns the draft session's state of the entry's prefix (nil when the entry holds none).
func (l *Lease) Draft() ports.PrefixState { return l.e.draft }

// Release gives the entry back to the cache; later calls do nothing.
func (l *Lease) Release() {
	if l == nil || l.c == nil {
		return
	}
	c := l.c
	l.c = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	l.e.refs--
	if l.e.refs < 0 {
		panic("prefixcache: lease released twice")
	}
}

// Query says what a request can reuse.
type Query struct {
	// Limit is the most prompt tokens to reuse (a prompt's last token must run to give the first output's
	// distribution, so the prompt's length minus one).
	Limit int
	// NeedDraft asks for entries that hold the drafter's context.
	NeedDraft bool
	// Truncate allows reusing the first part of a longer entry, for states that can be cut after import:
	// an attention-only target's KV (TrimKV) and the drafter's context (Crop). A hybrid model's recurrent
	// state exists only at its entry's end, so hybrid requests never set it.
	Truncate bool
}

// lookup is Partition.Lookup in tenant's tree, then in the disk tier's index.
func (c *Cache) lookup(ctx context.Context, tenant ports.Tenant, tokens []ports.Token, q Query) *Lease {
	c.mu.Lock()
	best, bestN := c.ramBest(tenant, tokens, q)
	var item *diskItem
	itemN := 0
	if c.disk != nil {
		item, itemN = c.disk.best(TenantDigest(tenant), tokens, q)
	}
	if item == nil || itemN <= bestN {
		defer c.mu.Unlock()
		return c.hit(best, bestN)
	}
	// Read the record without the lock: its item cannot be evicted meanwhile (loading), and other lookups
	// go on.
	item.loading++
	c.touchDisk(item)
	c.mu.Unlock()
	e, err := c.disk.load(ctx, tenant, item)
	c.mu.Lock()
	defer c.mu.Unlock()
	item.loading--
	if err != nil {
		c.diskFailed(item, fmt.Errorf("read %d tokens: %w", len(item.tokens), err))
		best, bestN = c.ramBest(tenant, tokens, q)
		return c.hit(best, bestN)
	}
	// The entry is the request's alone (it joins no tree): what the request computes enters memory as
	// usual, so the next turn finds a longer prefix there.
	c.stats.DiskHits++
	return c.hit(e, itemN)
}

// hit counts a lookup's result and leases best (nil: a miss). c.mu is held.
func (c *Cache) hit(best *entry, n int) *Lease {
	if best == nil {
		c.stats.Misses++
		return nil
	}
	c.stats.Hits++
	c.stats.CachedTokens += int64(n)
	best.refs++
	c.touch(best)
	return &Lease{c: c, e: best, n: n}
}

// ramBest returns the memory tier's longest usable entry for tokens and the length it gives, or nil, 0.
// c.mu is held.
func (c *Cache) ramBest(tenant ports.Tenant, tokens []ports.Token, q Query) (*entry, int) {
	limit := min(q.Limit, len(tokens))
	usable := func(e *entry) bool { return e != nil && (!q.NeedDraft || e.draft != nil) }
	var best *entry
	bestN := 0
	n, i := c.roots[tenant], 0
	for n != nil {
		if e := n.entry; usable(e) && n.depth <= limit {
			best, bestN = e, n.depth
		}
		if i >= limit {
			break
		}
		child := n.children[tokens[i]]
		if child == nil {
			break
		}
		k := 0
		for k < len(child.edge) && i+k < len(tokens) && child.edge[k] == tokens[i+k] {
			k++
		}
		if k < len(child.edge) || child.depth > limit {
			// The prompt leaves the tree (or the limit ends) inside child's edge: every entry below child
			// shares the first min(i+k, limit) tokens with the prompt.
			if m := min(i+k, limit); q.Truncate && m > bestN {
				if e := shortestBelow(child, usable); e != nil {
					best, bestN = e, m
				}
			}
			break
		}
		i += k
		n = child
	}
	return best, bestN
}

// shortestBelow returns the usable entry of least length at or below n (the least to import and cut), or nil.
func shortestBelow(n *node, usable func(*entry) bool) *entry {
	var best *entry
	var walk func(n *node)
	walk = func(n *node) {
		if best != nil && n.depth >= best.node.depth {
			return
		}
		if usable(n.entry) {
			best = n.entry
			return
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	walk(n)
	return best
}

func (c *Cache) touch(e *entry) {
	c.seq++
	e.used, e.seq = c.clock.Now(), c.seq
}

// insert is Partition.Insert into tenant's tree; it returns the entries it evicted that the disk tier
// should keep (none without one).
func (c *Cache) insert(tenant ports.Tenant, tokens []ports.Token, target, draft ports.PrefixState) (bool, []*entry, error) {
	switch {
	case len(tokens) == 0:
		return false, nil, errors.New("prefix cache insert: empty prefix")
	case target == nil:
		return false, nil, errors.New("prefix cache insert: nil target state")
	case target.Len() != len(tokens):
		return false, nil, fmt.Errorf("prefix cache insert: target state covers %d positions, the prefix has %d tokens", target.Len(), len(tokens))
	case draft != nil && draft.Len() != len(tokens):
		return false, nil, fmt.Errorf("prefix cache insert: drafter state covers %d positions, the prefix has %d tokens", draft.Len(), len(tokens))
	}
	bytes := target.Bytes() + int64(len(tokens))*tokenBytes
	if draft != nil {
		bytes += draft.Bytes()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := find(c.roots[tenant], tokens); old != nil && old.entry != nil {
		e := old.entry
		// Keep the entry unless the new one adds the drafter's context and can be held at all (an entry
		// replaced by one the budget then refuses would be lost).
		if e.draft != nil || draft == nil || e.refs > 0 || bytes > c.cfg.Budget {
			c.touch(e)
			return true, nil, nil
		}
		c.remove(e)
	}
	if bytes > c.cfg.Budget {
		c.stats.Rejected++
		return false, nil, nil
	}
	var victims []*entry
	for c.stats.Bytes+bytes > c.cfg.Budget {
		victim := c.lru()
		if victim == nil {
			c.stats.Rejected++
			return false, victims, nil
		}
		c.remove(victim)
		c.stats.Evictions++
		if c.disk != nil && !victim.stored {
			victims = append(victims, victim)
		}
	}
	root := c.roots[tenant]
	if root == nil {
		// Made after the evictions, which may have removed this tenant's last entry and its root.
		root = &node{children: map[ports.Token]*node{}}
		c.roots[tenant] = root
	}
	n := grow(root, tokens)
	e := &entry{tenant: tenant, node: n, target: target, draft: draft, bytes: bytes}
	if c.disk != nil {
		e.key = slices.Clone(tokens) // what the disk tier writes the entry under when it spills
	}
	n.entry = e
	c.touch(e)
	c.stats.Bytes += bytes
	c.stats.Entries++
	c.stats.Inserts++
	return true, victims, nil
}

// find returns the node below root (nil: an empty tree) whose path is exactly tokens, or nil.
func find(root *node, tokens []ports.Token) *node {
	n, i := root, 0
	for n != nil && i < len(tokens) {
		child := n.children[tokens[i]]
		if child == nil || i+len(child.edge) > len(tokens) || !slices.Equal(child.edge, tokens[i:i+len(child.edge)]) {
			return nil
		}
		i += len(child.edge)
		n = child
	}
	return n
}

// grow returns the node for tokens below root, splitting an edge or adding a leaf as needed.
func grow(root *node, tokens []ports.Token) *node {
	n, i := root, 0
	for i < len(tokens) {
		child := n.children[tokens[i]]
		if child == nil {
			leaf := &node{edge: slices.Clone(tokens[i:]), parent: n, children: map[ports.Token]*node{}, depth: len(tokens)}
			n.children[tokens[i]] = leaf
			return leaf
		}
		// The common run of child's edge and the rest of tokens.
		k := 0
		for k < len(child.edge) && i+k < len(tokens) && child.edge[k] == tokens[i+k] {
			k++
		}
		if k < len(child.edge) {
			// Split child's edge at k: mid takes the first k tokens.
			mid := &node{edge: child.edge[:k:k], parent: n, children: map[ports.Token]*node{}, depth: n.depth + k}
			child.edge = child.edge[k:]
			child.parent = mid
			mid.children[child.edge[0]] = child
			n.children[mid.edge[0]] = mid
			child = mid
		}
		i += k
		n = child
	}
	return n
}

// lru returns the least recently used entry not in use, of any tenant, or nil.
func (c *Cache) lru() *entry {
	var best *entry
	var walk func(n *node)
	walk = func(n *node) {
		if e := n.entry; e != nil && e.refs == 0 {
			if best == nil || e.used.Before(best.used) || (e.used.Equal(best.used) && e.seq < best.seq) {
				best = e
			}
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, root := range c.roots {
		walk(root)
	}
	return best
}

// remove drops e and prunes its tenant's tree: a node with no entry and no children goes, one with no entry
// and a single child merges into it, and a root left with no children goes with its tenant's tree.
func (c *Cache) remove(e *entry) {
	n := e.node
	n.entry = nil
	c.stats.Bytes -= e.bytes
	c.stats.Entries--
	defer func() {
		if root := c.roots[e.tenant]; root != nil && len(root.children) == 0 {
			delete(c.roots, e.tenant)
		}
	}()
	for n.parent != nil && n.entry == nil {
		p := n.parent
		switch len(n.children) {
		case 0:
			delete(p.children, n.edge[0])
		case 1:
			for _, ch := range n.children {
				ch.edge = slices.Concat(n.edge, ch.edge)
				ch.parent = p
				p.children[ch.edge[0]] = ch
			}
			return
		default:
			return
		}
		n = p
	}
}

// Boundaries returns the positions in (from, to] where a prefill from position from to position to stops to
// export state: every multiple of every (when every > 0) and to itself.
func Boundaries(from, to, every int) []int {
	var out []int
	if every > 0 {
		for b := (from/every + 1) * every; b < to; b += every {
			out = append(out, b)
		}
	}
	if to > from {
		out = append(out, to)
	}
	return out
}
