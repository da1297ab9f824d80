package prefixcache

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/higgs-go/higgs/ports"
)

// DiskConfig is the cache's disk tier.
type DiskConfig struct {
	// Store keeps the records (one model's: the store is opened for the model's identity).
	Store ports.PrefixStore
	// Target encodes and decodes the target's states; Draft the drafter's (nil: records keep no drafter
	// context, so requests that speculate never hit them).
	Target, Draft ports.PrefixCodec
	// Budget is the most bytes the records may take on the store; > 0.
	Budget int64
	// OnError receives every problem of the disk tier (a record that could not be written, read or
	// decoded); the cache goes on without that record. It may be called with the cache's lock held, so it
	// must not call back into the cache (a log line is what it is for). Nil: dropped.
	OnError func(error)
}

// Validate reports every problem at once.
func (d DiskConfig) Validate() error {
	var errs []error
	if d.Store == nil {
		errs = append(errs, errors.New("prefix cache disk tier: no store"))
	}
	if d.Target == nil {
		errs = append(errs, errors.New("prefix cache disk tier: the target cannot encode its states"))
	}
	if d.Budget <= 0 {
		errs = append(errs, fmt.Errorf("prefix cache disk budget %d bytes must be > 0", d.Budget))
	}
	return errors.Join(errs...)
}

// recordOverhead is what a record takes beyond its states and tokens, for the budget's reservation before the
// store says the true size.
const recordOverhead = 256

// TenantDigest is the name the disk tier gives tenant's records: a hash of the label, so that neither the
// label nor anything a client sent is written to disk.
func TenantDigest(tenant ports.Tenant) string {
	h := sha256.Sum256([]byte("higgs prefix cache tenant\x00" + string(tenant)))
	return hex.EncodeToString(h[:16])
}

// disk is the disk tier's index: what the store holds, by tenant digest and key.
type disk struct {
	cfg   DiskConfig
	items map[string]map[string]*diskItem
}

// diskItem is one record on the store.
type diskItem struct {
	tenant  string
	tokens  []ports.Token
	draft   bool
	bytes   int64
	used    time.Time
	seq     uint64
	loading int  // lookups reading it now: it is not evicted meanwhile
	writing bool // being written: no lookup reads it yet, and no other write replaces it
}

// tokenKey is the index's map key of a token sequence.
func tokenKey(tokens []ports.Token) string {
	b := make([]byte, 0, 4*len(tokens))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return string(b)
}

// Open returns a cache with a disk tier whose index is rebuilt from the store's records (the newest written
// are the most recently used); records beyond the budget are removed, the least recent first.
func Open(ctx context.Context, cfg Config, clock ports.Clock, dc DiskConfig) (*Cache, error) {
	c, err := New(cfg, clock)
	if err != nil {
		return nil, err
	}
	if err := dc.Validate(); err != nil {
		return nil, fmt.Errorf("prefix cache: %w", err)
	}
	infos, err := dc.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("prefix cache: list the disk tier: %w", err)
	}
	// Oldest first, so the sequence numbers follow the write times.
	slices.SortStableFunc(infos, func(a, b ports.PrefixRecordInfo) int { return a.Written.Compare(b.Written) })
	c.disk = &disk{cfg: dc, items: map[string]map[string]*diskItem{}}
	for _, in := range infos {
		c.seq++
		c.disk.put(&diskItem{tenant: in.Tenant, tokens: slices.Clone(in.Tokens), draft: in.Draft, bytes: in.Bytes, used: in.Written, seq: c.seq})
		c.stats.DiskEntries++
		c.stats.DiskBytes += in.Bytes
	}
	var drop []*diskItem
	for c.stats.DiskBytes > dc.Budget {
		v := c.diskLRU(time.Time{}, 0, false)
		if v == nil {
			break
		}
		c.dropItem(v)
		c.stats.DiskEvictions++
		drop = append(drop, v)
	}
	c.deleteRecords(drop)
	return c, nil
}

func (d *disk) put(it *diskItem) {
	m := d.items[it.tenant]
	if m == nil {
		m = map[string]*diskItem{}
		d.items[it.tenant] = m
	}
	m[tokenKey(it.tokens)] = it
}

func (d *disk) find(tenant string, tokens []ports.Token) *diskItem {
	return d.items[tenant][tokenKey(tokens)]
}

// best returns the tenant's record giving the longest usable prefix of tokens under q, and that length.
func (d *disk) best(tenant string, tokens []ports.Token, q Query) (*diskItem, int) {
	limit := min(q.Limit, len(tokens))
	var best *diskItem
	bestN := 0
	for _, it := range d.items[tenant] {
		if it.writing || (q.NeedDraft && !it.draft) {
			continue
		}
		common := 0
		for common < len(it.tokens) && common < len(tokens) && it.tokens[common] == tokens[common] {
			common++
		}
		n := len(it.tokens)
		if common < n || n > limit {
			// Only part of the record matches (or fits): usable when the states can be cut after import.
			if !q.Truncate {
				continue
			}
			n = min(common, limit)
		}
		// Equal lengths: the shorter record is less to read and cut.
		if n > bestN || (n == bestN && n > 0 && best != nil && len(it.tokens) < len(best.tokens)) {
			best, bestN = it, n
		}
	}
	if bestN == 0 {
		return nil, 0
	}
	return best, bestN
}

// load reads and decodes it's record into an entry of its own, leased once.
func (d *disk) load(ctx context.Context, tenant ports.Tenant, it *diskItem) (*entry, error) {
	rec, err := d.cfg.Store.Get(ctx, it.tenant, it.tokens)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(rec.Tokens, it.tokens) || rec.Tenant != it.tenant {
		return nil, fmt.Errorf("the store answered another record: %w", ports.ErrPrefixRecordInvalid)
	}
	target, err := d.cfg.Target.DecodePrefix(rec.Target)
	if err != nil {
		return nil, fmt.Errorf("decode the target's state: %w", err)
	}
	if target.Len() != len(it.tokens) {
		return nil, fmt.Errorf("the target's state covers %d positions, the record %d tokens: %w", target.Len(), len(it.tokens), ports.ErrPrefixRecordInvalid)
	}
	var draft ports.PrefixState
	if rec.Draft != nil && d.cfg.Draft != nil {
		if draft, err = d.cfg.Draft.DecodePrefix(rec.Draft); err != nil {
			return nil, fmt.Errorf("decode the drafter's state: %w", err)
		}
		if draft.Len() != len(it.tokens) {
			return nil, fmt.Errorf("the drafter's state covers %d positions, the record %d tokens: %w", draft.Len(), len(it.tokens), ports.ErrPrefixRecordInvalid)
		}
	}
	if it.draft && draft == nil {
		return nil, fmt.Errorf("the record lost its drafter context: %w", ports.ErrPrefixRecordInvalid)
	}
	e := &entry{tenant: tenant, key: it.tokens, target: target, draft: draft, stored: true}
	e.bytes = target.Bytes() + int64(len(it.tokens))*tokenBytes
	if draft != nil {
		e.bytes += draft.Bytes()
	}
	return e, nil
}

// touchDisk moves it to the front of the disk tier's LRU order. c.mu is held.
func (c *Cache) touchDisk(it *diskItem) {
	c.seq++
	it.used, it.seq = c.clock.Now(), c.seq
}

// diskLRU returns the least recently used record that may go now (not being read or written), or nil. With
// bounded, only a record used before (used, seq) qualifies. c.mu is held.
func (c *Cache) diskLRU(used time.Time, seq uint64, bounded bool) *diskItem {
	var best *diskItem
	older := func(a, b *diskItem) bool { return a.used.Before(b.used) || (a.used.Equal(b.used) && a.seq < b.seq) }
	for _, m := range c.disk.items {
		for _, it := range m {
			if it.loading > 0 || it.writing {
				continue
			}
			if best == nil || older(it, best) {
				best = it
			}
		}
	}
	if best != nil && bounded && !older(best, &diskItem{used: used, seq: seq}) {
		return nil
	}
	return best
}

// dropItem takes it out of the index. c.mu is held.
func (c *Cache) dropItem(it *diskItem) {
	m := c.disk.items[it.tenant]
	k := tokenKey(it.tokens)
	if m[k] != it {
		return
	}
	delete(m, k)
	if len(m) == 0 {
		delete(c.disk.items, it.tenant)
	}
	c.stats.DiskEntries--
	c.stats.DiskBytes -= it.bytes
}

// deleteRecords removes the records of items no longer in the index from the store (without c.mu).
func (c *Cache) deleteRecords(items []*diskItem) {
	for _, it := range items {
		if err := c.disk.cfg.Store.Delete(it.tenant, it.tokens); err != nil {
			c.report(fmt.Errorf("prefix cache disk tier: remove a record of %d tokens: %w", len(it.tokens), err))
		}
	}
}

// diskFailed drops an unusable record from the index and reports err. c.mu is held.
func (c *Cache) diskFailed(it *diskItem, err error) {
	c.stats.DiskErrors++
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		// Missing, corrupt or foreign: never offered again (the store removed what it found unusable).
		c.dropItem(it)
	}
	c.report(fmt.Errorf("prefix cache disk tier: %w", err))
}

// report passes err to OnError.
func (c *Cache) report(err error) {
	if c.disk.cfg.OnError != nil {
		c.disk.cfg.OnError(err)
	}
}

// spill writes the entries insert evicted to the disk tier.
func (c *Cache) spill(ctx context.Context, victims []*entry) {
	for _, e := range victims {
		c.write(ctx, e)
	}
}

// write encodes e and stores it, evicting older records to make room; it reports whether e is now on disk.
// A record whose entry is younger than every record that could make room is refused: the disk keeps the most
// recently used prefixes.
func (c *Cache) write(ctx context.Context, e *entry) bool {
	d := c.disk
	tb, err := d.cfg.Target.EncodePrefix(e.target)
	if err != nil {
		c.mu.Lock()
		c.stats.DiskErrors++
		c.mu.Unlock()
		c.report(fmt.Errorf("prefix cache disk tier: encode the target's state of %d tokens: %w", len(e.key), err))
		return false
	}
	var db []byte
	if e.draft != nil && d.cfg.Draft != nil {
		if db, err = d.cfg.Draft.EncodePrefix(e.draft); err != nil {
			c.mu.Lock()
			c.stats.DiskErrors++
			c.mu.Unlock()
			c.report(fmt.Errorf("prefix cache disk tier: encode the drafter's state of %d tokens: %w", len(e.key), err))
			return false
		}
	}
	tenant := TenantDigest(e.tenant)
	est := int64(len(tb)+len(db)+len(e.key)*tokenBytes) + recordOverhead

	c.mu.Lock()
	if est > d.cfg.Budget {
		c.stats.DiskRejected++
		c.mu.Unlock()
		return false
	}
	if old := d.find(tenant, e.key); old != nil {
		if old.writing || old.loading > 0 || (old.draft && db == nil) {
			// Another write of this key is under way, a lookup reads it, or it holds more than e.
			c.mu.Unlock()
			return false
		}
		c.dropItem(old)
	}
	var victims []*diskItem
	for c.stats.DiskBytes+est > d.cfg.Budget {
		v := c.diskLRU(e.used, e.seq, true)
		if v == nil {
			break
		}
		c.dropItem(v)
		c.stats.DiskEvictions++
		victims = append(victims, v)
	}
	if c.stats.DiskBytes+est > d.cfg.Budget {
		c.stats.DiskRejected++
		c.mu.Unlock()
		c.deleteRecords(victims)
		return false
	}
	it := &diskItem{tenant: tenant, tokens: e.key, draft: db != nil, bytes: est, used: e.used, seq: e.seq, writing: true}
	d.put(it)
	c.stats.DiskEntries++
	c.stats.DiskBytes += est
	c.mu.Unlock()

	c.deleteRecords(victims)
	n, err := d.cfg.Store.Put(ctx, ports.PrefixRecord{Tenant: tenant, Tokens: e.key, Target: tb, Draft: db})

	c.mu.Lock()
	it.writing = false
	if err != nil {
		c.dropItem(it)
		c.stats.DiskErrors++
		c.mu.Unlock()
		c.report(fmt.Errorf("prefix cache disk tier: write %d tokens: %w", len(e.key), err))
		return false
	}
	c.stats.DiskBytes += n - it.bytes
	it.bytes = n
	c.stats.DiskWrites++
	e.stored = true
	c.mu.Unlock()
	return true
}

// Flush writes every entry in memory the disk tier lacks, the most recently used first, so that a restart
// finds the hot set (higgsd calls it at shutdown). It returns the number written; ctx ends it early. A cache
// without a disk tier writes nothing.
func (c *Cache) Flush(ctx context.Context) (int, error) {
	if c == nil || c.disk == nil {
		return 0, nil
	}
	c.mu.Lock()
	var todo []*entry
	var walk func(n *node)
	walk = func(n *node) {
		if e := n.entry; e != nil && !e.stored {
			todo = append(todo, e)
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, root := range c.roots {
		walk(root)
	}
	c.mu.Unlock()
	slices.SortFunc(todo, func(a, b *entry) int {
		if r := b.used.Compare(a.used); r != 0 {
			return r
		}
		return cmp.Compare(b.seq, a.seq)
	})
	written := 0
	for _, e := range todo {
		if err := ctx.Err(); err != nil {
			return written, fmt.Errorf("prefix cache flush: %w", err)
		}
		if c.write(ctx, e) {
			written++
		}
	}
	return written, nil
}

// DiskBudget returns the disk tier's byte budget (0 without one).
func (c *Cache) DiskBudget() int64 {
	if c == nil || c.disk == nil {
		return 0
	}
	return c.disk.cfg.Budget
}
