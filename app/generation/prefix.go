package generation

import (
	"context"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// prefixUse is one request's use of the prefix cache: what it restored, and the target states it exported
// during its prefill, inserted into the cache only once the generation has finished (so a request that
// fails or is cancelled half-way leaves no entry behind).
type prefixUse struct {
	cache  *prefixcache.Partition
	target ports.PrefixExporter
	draft  ports.PrefixExporter // nil without speculation
	prompt []ports.Token
	reused int
	states map[int]ports.PrefixState // target states by prefix length, from the prefill's checkpoints
	breaks []int                     // the client's breakpoints this prefill stops at
}

// startPrefix restores the longest cached prefix of the prompt into the fresh sessions (sess, and draft when
// speculating) and sets the decoder's prefill stops and checkpoint. It returns nil, touching nothing, when
// the cache is off (nil) or the backend cannot export state. Only a prefix shorter than the prompt is
// restored: the last prompt position must run to give the first token's distribution. The prefill stops at
// the cache's interval boundaries and at the client's breakpoints (breaks) past the restored prefix.
func startPrefix(ctx context.Context, cache *prefixcache.Partition, prompt []ports.Token, breaks []int, cfg *speculative.Config, sess ports.Session, draft ports.DraftSession) (*prefixUse, error) {
	if cache == nil {
		return nil, nil
	}
	te, ok := sess.(ports.PrefixExporter)
	if !ok {
		return nil, nil
	}
	u := &prefixUse{cache: cache, target: te, prompt: prompt, states: map[int]ports.PrefixState{}}
	if draft != nil {
		de, ok := draft.(ports.PrefixExporter)
		if !ok {
			return nil, nil
		}
		u.draft = de
	}
	// An attention-only target's KV can be cut after import (TrimKV), so a hit may stop inside a longer entry;
	// a recurrent layer's state exists only at its entry's end.
	attentionOnly := len(cfg.LayerKinds) > 0 && !slices.Contains(cfg.LayerKinds, ports.LayerRecurrent)
	q := prefixcache.Query{Limit: len(prompt) - 1, NeedDraft: draft != nil, Truncate: attentionOnly}
	if lease := cache.Lookup(ctx, prompt, q); lease != nil {
		// The lease only keeps the entry from being evicted while its states are imported: an import copies
		// (CPU) or takes its own handles (MLX), and the states never change.
		u.reused = lease.Len()
		err := te.ImportPrefix(lease.Target())
		if err == nil && sess.Len() > u.reused {
			err = sess.TrimKV(u.reused)
		}
		if err == nil && u.draft != nil {
			err = u.draft.ImportPrefix(lease.Draft())
			if err == nil && draft.Len() > u.reused {
				err = draft.Crop(u.reused)
			}
		}
		lease.Release()
		if err != nil {
			return nil, fmt.Errorf("prefix cache: restore %d tokens: %w", u.reused, err)
		}
	}
	stops := prefixcache.Boundaries(u.reused, len(prompt), cache.Every())
	for _, b := range breaks {
		if b > u.reused && b < len(prompt) {
			u.breaks = append(u.breaks, b)
		}
	}
	// The prompt's end (the last of stops) is a checkpoint of its own, never a prefill stop.
	stops = slices.Concat(stops[:len(stops)-1], u.breaks)
	slices.Sort(stops)
	cfg.PrefillStops = slices.Compact(stops)
	cfg.SyncDrafter = draft != nil
	cfg.Checkpoint = func(n int) error {
		st, err := te.ExportPrefix(n)
		if err != nil {
			return fmt.Errorf("prefix cache: export %d tokens: %w", n, err)
		}
		u.states[n] = st
		return nil
	}
	return u, nil
}

// finish caches the prefill's checkpoints and the generation's end (the session then holds the prompt and
// every generated token but the last), each with the drafter's context of the same positions when the
// request speculated. generated are the committed output tokens. Entries the budget has no room for are
// skipped; a failed export skips its entry (the cache stays consistent) and is returned for the log.
// written is the prompt tokens cached up to the last client breakpoint that got its entry, counted from the
// restored prefix's end (0 without such a breakpoint).
func (u *prefixUse) finish(ctx context.Context, sess ports.Session, draft ports.DraftSession, generated []ports.Token) (written int, err error) {
	seq := slices.Concat(u.prompt, generated)
	end := sess.Len()
	var errs []error
	if end > len(u.prompt) && end <= len(seq) {
		st, err := u.target.ExportPrefix(end)
		if err != nil {
			errs = append(errs, fmt.Errorf("export the generation's end (%d tokens): %w", end, err))
		} else {
			u.states[end] = st
		}
	}
	lengths := make([]int, 0, len(u.states))
	for n := range u.states {
		lengths = append(lengths, n)
	}
	slices.Sort(lengths)
	for _, n := range lengths {
		var ds ports.PrefixState
		if u.draft != nil {
			if n > draft.Len() {
				continue
			}
			var err error
			if ds, err = u.draft.ExportPrefix(n); err != nil {
				errs = append(errs, fmt.Errorf("export the drafter's context of %d tokens: %w", n, err))
				continue
			}
		}
		ok, err := u.cache.Insert(ctx, seq[:n], u.states[n], ds)
		if err != nil {
			errs = append(errs, err)
		}
		if ok && slices.Contains(u.breaks, n) {
			written = n - u.reused
		}
	}
	if len(errs) > 0 {
		return written, fmt.Errorf("prefix cache: %w", errs[0])
	}
	return written, nil
}
