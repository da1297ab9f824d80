package grammar

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"unicode/utf8"
)

// Vocab is a byte-level vocabulary prepared for mask computation: a trie over the tokens' byte strings.
// It is immutable and safe for concurrent use; build it once per tokenizer.
type Vocab struct {
	size  int
	bytes [][]byte // per token id; nil for tokens the grammar never allows (special tokens, unassigned ids)
	all   trie     // every token
	// plain are the tokens of whole plain string characters (no quote, backslash or control byte, complete
	// UTF-8), which inside an unbounded string are allowed whatever the context; rest is the trie of the
	// others, the only ones such a state needs to walk.
	plain Mask
	rest  trie
	// upTo[c] are the plain tokens of at most c characters (the last entry is plain itself), for strings
	// with a length bound.
	upTo []Mask

	// without[c] are the tokens whose bytes do not hold c, and with[c] the trie of the others: in free text
	// whose trigger ends with c only the latter can complete it (built on first use).
	// longest is the most bytes a token holds; closable whether every printable ASCII byte, tab and newline
	// is a token of its own (canClose, computed on first use).
	longest   int
	closeOnce sync.Once
	closable  bool

	mu      sync.Mutex
	without map[byte]Mask
	with    map[byte]*trie
}

// split returns the tokens without byte c and the trie of those with it.
func (v *Vocab) split(c byte) (Mask, *trie) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if m, ok := v.without[c]; ok {
		return m, v.with[c]
	}
	if v.without == nil {
		v.without, v.with = map[byte]Mask{}, map[byte]*trie{}
	}
	m := make(Mask, (v.size+63)/64)
	for id, b := range v.bytes {
		if len(b) > 0 && !slices.Contains(b, c) {
			m.set(int32(id))
		}
	}
	t := buildTrie(v.bytes, func(id int) bool { return !m.Has(int32(id)) })
	v.without[c], v.with[c] = m, &t
	return m, &t
}

// trie: node 0 is the root; the edges of node k are edgeByte/edgeTo[edgeStart[k]:edgeStart[k+1]].
type trie struct {
	edgeStart []int32
	edgeByte  []byte
	edgeTo    []int32
	ends      [][]int32 // token ids whose bytes end at each node
}

// NewVocab builds a vocabulary of size ids; tokenBytes[id] is the byte string token id stands for, or nil for
// a token no grammar may produce (special tokens: EOS is allowed separately, at the end of a sentence).
func NewVocab(tokenBytes [][]byte) *Vocab {
	v := &Vocab{size: len(tokenBytes), bytes: tokenBytes, plain: make(Mask, (len(tokenBytes)+63)/64)}
	v.all = buildTrie(tokenBytes, func(int) bool { return true })
	for id, b := range tokenBytes {
		v.longest = max(v.longest, len(b))
		if len(b) > 0 && plainString(b) {
			v.plain.set(int32(id))
		}
	}
	v.rest = buildTrie(tokenBytes, func(id int) bool { return !v.plain.Has(int32(id)) })
	chars := make([]int, len(tokenBytes))
	longest := 0
	for id, b := range tokenBytes {
		if v.plain.Has(int32(id)) {
			chars[id] = utf8.RuneCount(b)
			longest = max(longest, chars[id])
		}
	}
	v.upTo = make([]Mask, longest+1)
	for c := range v.upTo {
		v.upTo[c] = make(Mask, len(v.plain))
	}
	for id := range tokenBytes {
		if v.plain.Has(int32(id)) {
			for c := chars[id]; c <= longest; c++ {
				v.upTo[c].set(int32(id))
			}
		}
	}
	return v
}

// plainRoom returns the plain tokens allowed in a string body with room characters left (room < 0:
// unbounded).
func (v *Vocab) plainRoom(room int) Mask {
	if room < 0 || room >= len(v.upTo) {
		return v.plain
	}
	return v.upTo[room]
}

// plainString reports whether b is whole characters a JSON string may hold unescaped.
func plainString(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func buildTrie(tokenBytes [][]byte, keep func(id int) bool) trie {
	type tnode struct {
		kids map[byte]int32
		ends []int32
	}
	nodes := []tnode{{kids: map[byte]int32{}}}
	for id, b := range tokenBytes {
		if len(b) == 0 || !keep(id) {
			continue
		}
		k := int32(0)
		for _, c := range b {
			nk, ok := nodes[k].kids[c]
			if !ok {
				nk = int32(len(nodes))
				nodes = append(nodes, tnode{kids: map[byte]int32{}})
				nodes[k].kids[c] = nk
			}
			k = nk
		}
		nodes[k].ends = append(nodes[k].ends, int32(id))
	}
	t := trie{edgeStart: make([]int32, len(nodes)+1), ends: make([][]int32, len(nodes))}
	for k, n := range nodes {
		t.edgeStart[k] = int32(len(t.edgeByte))
		keys := make([]byte, 0, len(n.kids))
		for c := range n.kids {
			keys = append(keys, c)
		}
		slices.Sort(keys)
		for _, c := range keys {
			t.edgeByte = append(t.edgeByte, c)
			t.edgeTo = append(t.edgeTo, n.kids[c])
		}
		t.ends[k] = n.ends
	}
	t.edgeStart[len(nodes)] = int32(len(t.edgeByte))
	return t
}

// Size is the number of token ids.
func (v *Vocab) Size() int { return v.size }

// Bytes is the byte string of token id (nil for one the grammar never allows).
func (v *Vocab) Bytes(id int32) []byte {
	if id < 0 || int(id) >= len(v.bytes) {
		return nil
	}
	return v.bytes[id]
}

// Mask is a set of token ids, one bit each.
type Mask []uint64

// Has reports whether id is in the set.
func (m Mask) Has(id int32) bool {
	return id >= 0 && int(id>>6) < len(m) && m[id>>6]&(1<<(uint(id)&63)) != 0
}

// Count is the number of ids in the set.
func (m Mask) Count() int {
	n := 0
	for _, w := range m {
		n += bits.OnesCount64(w)
	}
	return n
}

func (m Mask) set(id int32) { m[id>>6] |= 1 << (uint(id) & 63) }

// Matcher computes the allowed tokens of a grammar's states over a vocabulary, caching each state's mask.
// It is safe for concurrent use.
type Matcher struct {
	g   *Grammar
	v   *Vocab
	eos []int32

	mu    sync.Mutex
	cache map[string]Mask
	// dists are the distances after each allowed token, per state (close.go), for the rows near the end
	// of a token budget.
	dists map[string]*distances
	// Computed counts masks computed (cache misses), for the bench's mask cost.
	computed int
	// walkAll turns the string shortcut off (tests compare the two).
	walkAll bool
}

// maxCached bounds the masks a Matcher keeps (a state space larger than this recomputes).
const maxCached = 4096

// NewMatcher pairs a grammar with a vocabulary; eos are the ids allowed once the text is a complete sentence.
func NewMatcher(g *Grammar, v *Vocab, eos []int32) (*Matcher, error) {
	for _, id := range eos {
		if id < 0 || int(id) >= v.size {
			return nil, fmt.Errorf("grammar: EOS id %d outside the vocabulary of %d", id, v.size)
		}
	}
	return &Matcher{g: g, v: v, eos: slices.Clone(eos), cache: map[string]Mask{}}, nil
}

// Start is the grammar's start state.
func (m *Matcher) Start() State { return m.g.Start() }

// Advance returns the state after token id (dead if the grammar forbids it; EOS leads to a dead state too:
// nothing may follow it).
func (m *Matcher) Advance(s State, id int32) State {
	b := m.v.Bytes(id)
	if b == nil {
		return State{}
	}
	return s.Advance(b)
}

// Allowed returns the tokens that may follow state s (EOS included when s is accepting). The mask is shared:
// callers must not modify it. A dead state allows nothing; one dead for a reason (State.Err) is that error.
// The walk checks ctx as it goes (a client gone stops it) and refuses, with a *StackLimitError, a prefix
// that leaves more than maxStacks stacks alive.
func (m *Matcher) Allowed(ctx context.Context, s State) (Mask, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.Dead() {
		return make(Mask, (m.v.size+63)/64), nil
	}
	m.mu.Lock()
	if mk, ok := m.cache[s.key]; ok {
		m.mu.Unlock()
		return mk, nil
	}
	m.mu.Unlock()
	mk, err := m.compute(ctx, s)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if len(m.cache) >= maxCached {
		clear(m.cache)
	}
	m.cache[s.key] = mk
	m.computed++
	m.mu.Unlock()
	return mk, nil
}

// Computed is the number of masks computed so far (the others came from the cache).
func (m *Matcher) Computed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.computed
}

// compute walks the trie depth first, carrying the stacks alive after each prefix, so a prefix that no
// stack accepts prunes every token under it. Inside a string the plain tokens that fit are allowed without
// a walk (whatever surrounds the string, they leave it a string) and only the others' trie is walked; in
// free text, likewise the tokens that cannot complete its trigger.
func (m *Matcher) compute(ctx context.Context, s State) (Mask, error) {
	mk := make(Mask, (m.v.size+63)/64)
	if s.Accepting() {
		for _, id := range m.eos {
			mk.set(id)
		}
	}
	t := &m.v.all
	switch {
	case m.walkAll:
	case !slices.ContainsFunc(s.stacks, func(f *frame) bool { return !inBody(f) }):
		for _, f := range s.stacks {
			for i, w := range m.v.plainRoom(bodyRoom(f)) {
				mk[i] |= w
			}
		}
		t = &m.v.rest
	case len(s.stacks) == 1 && inText(s.stacks[0]):
		// Free text takes every token that cannot complete the trigger, i.e. that lacks its last byte.
		trig := s.stacks[0].n.trigger
		without, with := m.v.split(trig[len(trig)-1])
		for i, w := range without {
			mk[i] |= w
		}
		t = with
	}
	var (
		err  error
		work int
	)
	var walk func(k int32, stacks []*frame)
	walk = func(k int32, stacks []*frame) {
		for e := t.edgeStart[k]; e < t.edgeStart[k+1] && err == nil; e++ {
			// The work of an edge is a byte fed to each stack: count that, so a walk carrying many stacks
			// looks at ctx as often in time as one carrying a few.
			if work += len(stacks); work >= ctxEvery {
				work = 0
				if err = ctx.Err(); err != nil {
					return
				}
			}
			b := t.edgeByte[e]
			var next []*frame
			for _, f := range stacks {
				next = feed(f, b, next)
			}
			if len(next) == 0 {
				continue
			}
			if len(next) > maxStacks {
				err = &StackLimitError{Stacks: len(next)}
				return
			}
			to := t.edgeTo[e]
			for _, id := range t.ends[to] {
				mk.set(id)
			}
			if t.edgeStart[to] < t.edgeStart[to+1] {
				walk(to, next)
			}
		}
	}
	walk(0, s.stacks)
	if err != nil {
		return nil, fmt.Errorf("grammar: allowed tokens: %w", err)
	}
	return mk, nil
}

// ctxEvery is how many stack steps (a trie edge's byte fed to one stack) the walk takes between looks at its
// context.
const ctxEvery = 1024
