package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// merge is what a pair of adjacent symbols becomes, and how early it applies.
type merge struct {
	rank  int32
	newID int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe is the byte-pair-encoding model of tokenizer.json.
type bpe struct {
	vocab  map[string]int32 // token string (byte-level characters when byteLevel) → id
	merges map[uint64]merge
	// byteLevel: words are raw bytes and each byte starts as the id of its byte-level character.
	byteLevel    bool
	byteID       [256]int32 // -1 when the byte's character is not in the vocabulary
	unk          int32      // -1 without unk_token
	fuseUnk      bool
	ignoreMerges bool
	cache        *wordCache
}

func newBPE(m *modelJSON, byteLevel bool) (*bpe, error) {
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("model type %q: %w (only BPE)", m.Type, ErrUnsupported)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return nil, fmt.Errorf("BPE dropout %v: %w", *m.Dropout, ErrUnsupported)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("BPE continuing_subword_prefix %q: %w", *m.ContinuingSubwordPrefix, ErrUnsupported)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("BPE end_of_word_suffix %q: %w", *m.EndOfWordSuffix, ErrUnsupported)
	}
	if m.ByteFallback {
		return nil, fmt.Errorf("BPE byte_fallback: %w", ErrUnsupported)
	}
	if len(m.Vocab) == 0 {
		return nil, fmt.Errorf("BPE model has an empty vocab")
	}
	b := &bpe{vocab: m.Vocab, byteLevel: byteLevel, unk: -1, fuseUnk: m.FuseUnk, ignoreMerges: m.IgnoreMerges,
		cache: newWordCache(1 << 16)}
	for tok, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("vocab token %q has negative id %d", tok, id)
		}
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocab", *m.UnkToken)
		}
		b.unk = id
	}
	for i := range b.byteID {
		b.byteID[i] = -1
		if id, ok := m.Vocab[string(byteToRune[i])]; ok {
			b.byteID[i] = id
		}
	}
	pairs, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	b.merges = make(map[uint64]merge, len(pairs))
	for rank, p := range pairs {
		a, okA := m.Vocab[p[0]]
		c, okC := m.Vocab[p[1]]
		n, okN := m.Vocab[p[0]+p[1]]
		if !okA || !okC || !okN {
			return nil, fmt.Errorf("merge %d (%q %q) uses a token missing from the vocab", rank, p[0], p[1])
		}
		k := pairKey(a, c)
		if _, dup := b.merges[k]; !dup {
			b.merges[k] = merge{rank: int32(rank), newID: n}
		}
	}
	return b, nil
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	gone       bool
}

type candidate struct {
	pos   int32
	rank  int32
	newID int32
}

// candidates is a binary min-heap ordered by (rank, pos), written out instead of container/heap to avoid
// boxing every element in an interface.
type candidates []candidate

func (h candidates) less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a.less(i, p) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *candidates) pop() candidate {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && a.less(l, m) {
			m = l
		}
		if r < n && a.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

// maxCachedWord bounds the words kept in the cache (tokenizers uses the same 256 limit, in characters).
const maxCachedWord = 256

// tokenize appends the ids of one pre-tokenized word to dst.
func (b *bpe) tokenize(word string, dst []int32) []int32 {
	if word == "" {
		return dst
	}
	if b.ignoreMerges {
		key := word
		if b.byteLevel {
			key = byteLevelEncode(word)
		}
		if id, ok := b.vocab[key]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(word) <= maxCachedWord
	if cacheable {
		if ids, ok := b.cache.get(word); ok {
			return append(dst, ids...)
		}
	}
	ids := b.mergeWord(word)
	if cacheable {
		// word is a substring of the caller's text; keying the cache by it would keep whole prompts alive.
		b.cache.put(strings.Clone(word), ids)
	}
	return append(dst, ids...)
}

// mergeWord is tokenizers' Word::merge_all: a min-heap of candidate merges ordered by (rank, position),
// skipping stale entries, which applies the lowest-ranked merge first and the leftmost one on ties.
func (b *bpe) mergeWord(word string) []int32 {
	syms := make([]symbol, 0, len(word))
	pendingUnk := false
	add := func(id int32, known bool) {
		if !known {
			if b.unk < 0 {
				return // tokenizers drops characters it cannot represent when there is no unk_token
			}
			if b.fuseUnk && pendingUnk {
				return
			}
			pendingUnk = true
			id = b.unk
		} else {
			pendingUnk = false
		}
		syms = append(syms, symbol{id: id})
	}
	if b.byteLevel {
		for i := 0; i < len(word); i++ {
			id := b.byteID[word[i]]
			add(id, id >= 0)
		}
	} else {
		for _, r := range word {
			var buf [utf8.UTFMax]byte
			id, ok := b.vocab[string(utf8.AppendRune(buf[:0], r))]
			add(id, ok)
		}
	}
	n := int32(len(syms))
	for i := range syms {
		syms[i].prev = int32(i) - 1
		syms[i].next = int32(i) + 1
	}
	if n > 0 {
		syms[n-1].next = -1
	}
	h := make(candidates, 0, n)
	for i := int32(0); i+1 < n; i++ {
		if m, ok := b.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(candidate{pos: i, rank: m.rank, newID: m.newID})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		if m, ok := b.merges[pairKey(cur.id, right.id)]; !ok || m.newID != top.newID {
			continue // stale: one side changed since this candidate was queued
		}
		cur.id = top.newID
		syms[cur.next].gone = true
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if m, ok := b.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				h.push(candidate{pos: cur.prev, rank: m.rank, newID: m.newID})
			}
		}
		if cur.next >= 0 {
			if m, ok := b.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				h.push(candidate{pos: top.pos, rank: m.rank, newID: m.newID})
			}
		}
	}
	out := make([]int32, 0, n)
	for i := int32(0); i >= 0 && i < n; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// wordCache is a bounded, concurrency-safe word → ids cache. When full it is emptied and refilled: simple,
// and it keeps adapting to the text being encoded.
type wordCache struct {
	mu    sync.RWMutex
	m     map[string][]int32
	limit int
}

func newWordCache(limit int) *wordCache {
	return &wordCache{m: make(map[string][]int32), limit: limit}
}

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	c.mu.Lock()
	if len(c.m) >= c.limit {
		clear(c.m)
	}
	c.m[w] = ids
	c.mu.Unlock()
}
