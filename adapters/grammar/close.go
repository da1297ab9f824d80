package grammar

import (
	"context"
	"math"
	"math/bits"
	"slices"
)

// Closing a document before a token budget ends.
//
// Distance is the shortest completion of a state: the fewest bytes that take it to an accepting state (close
// the open strings, arrays and objects, write the required properties still missing with their shortest
// values). It is counted in bytes, not tokens: a byte-level BPE vocabulary holds every byte as a token of its
// own, so a completion of d bytes is at most d tokens, and a decoder that keeps the distance within the
// tokens it has left can always finish (Matcher.Closing checks the vocabulary has those single-byte tokens).
// Counting in bytes is conservative where a token spells several bytes of the completion: the close may
// start a few tokens earlier than it had to, never too late.

// unreachable is the distance of a part no finite value completes (the compiler refuses such schemas).
const unreachable = math.MaxInt32 / 4

// closeInfo is the shortest lengths a grammar's nodes need, computed once per Grammar.
type closeInfo struct {
	min map[*node]int
	// step bounds how much one byte can raise a state's distance.
	step int
}

func addDist(a, b int) int { return min(a+b, unreachable) }

func newCloseInfo(nodes []*node) *closeInfo {
	ci := &closeInfo{min: map[*node]int{}}
	for _, n := range nodes {
		ci.min[n] = unreachable
	}
	ml := func(n *node) int {
		if n == nil {
			return 1 // any JSON value: 0
		}
		v, ok := ci.min[n]
		if !ok {
			return unreachable
		}
		return v
	}
	shortest := func(n *node) int {
		switch n.kind {
		case kObject:
			if n.free {
				return 2
			}
			return addDist(1, ci.objectRest(n, 0, false, ml))
		case kArray:
			return addDist(1, ci.arrayRest(n, 0, ml))
		case kString:
			return 2 + n.minLen
		case kNumber:
			return numberDistance(&frame{n: n})
		case kLiteral:
			best := unreachable
			for _, l := range n.lits {
				best = min(best, len(l))
			}
			return best
		case kAlt:
			best := unreachable
			for _, a := range n.alts {
				best = min(best, ml(a))
			}
			return best
		case kRef:
			return ml(n.ref)
		case kSeq:
			return seqRest(n, 0, 0, ml)
		case kText:
			return 0
		}
		return unreachable
	}
	for changed := true; changed; {
		changed = false
		for _, n := range nodes {
			if v := shortest(n); v < ci.min[n] {
				ci.min[n], changed = v, true
			}
		}
	}
	// One byte can complete the value it ends, move its parent to a phase that needs a new item or property
	// (a comma), and start a value: bound each by the largest such length.
	big := 0
	for _, n := range nodes {
		if v := ci.min[n]; v < unreachable {
			big = max(big, v)
		}
		for _, p := range n.props {
			big = max(big, len(p.key)+2+ml(p.value))
		}
		if n.kind == kObject && n.free {
			big = max(big, 4+ml(n.items))
		}
		if n.kind == kSeq {
			big = max(big, len(n.repeatSep)+ci.min[n])
		}
		if n.kind == kArray {
			big = max(big, ml(n.items)+1)
		}
	}
	ci.step = 2*min(big, unreachable/4) + 2
	return ci
}

func (ci *closeInfo) ml(n *node) int {
	if n == nil {
		return 1
	}
	if v, ok := ci.min[n]; ok {
		return v
	}
	return unreachable
}

// objectRest is the shortest rest of a declared object from property i on, the closing '}' included:
// comma says a comma was just written (a property must follow); after says a property precedes (the next
// one needs a comma).
func (ci *closeInfo) objectRest(n *node, i int, comma bool, ml func(*node) int) int {
	d, cnt := 0, 0
	for _, p := range n.props[i:] {
		if p.required {
			d = addDist(d, len(p.key)+1+ml(p.value))
			cnt++
		}
	}
	if cnt == 0 && comma {
		best := unreachable
		for _, p := range n.props[i:] {
			best = min(best, len(p.key)+1+ml(p.value))
		}
		return addDist(best, 1)
	}
	if cnt > 0 {
		d = addDist(d, cnt-1)
	}
	return addDist(d, 1)
}

// arrayRest is the shortest rest of an array holding i items, the closing ']' included, at a point where the
// next item needs no comma.
func (ci *closeInfo) arrayRest(n *node, i int, ml func(*node) int) int {
	need := max(n.minItems-i, 0)
	if need == 0 {
		return 1
	}
	return addDist(need*ml(n.items), need)
}

// seqRest is the shortest rest of a sequence from part i, j bytes into it.
func seqRest(n *node, i, j int, ml func(*node) int) int {
	d := 0
	for k := i; k < len(n.parts); k++ {
		p := n.parts[k]
		off := 0
		if k == i {
			off = j
		}
		switch {
		case p.lit != "":
			d = addDist(d, len(p.lit)-off)
		case p.until != "":
			d = addDist(d, len(p.until)-off)
		case p.value != nil:
			d = addDist(d, ml(p.value))
		}
	}
	return d
}

// numberDistance is the fewest bytes that complete the number f is matching (a breadth-first search over
// the bytes a number may hold, bounded: past the bound it answers the bound, which only closes earlier).
func numberDistance(f *frame) int {
	const maxDepth, maxWidth = 24, 2048
	level := []*frame{f}
	for d := 0; d <= maxDepth; d++ {
		seen := map[string]bool{}
		var next []*frame
		for _, g := range level {
			if numberComplete(g) {
				return d
			}
			for _, b := range []byte("0123456789-.eE+") {
				nf := feedNumber(g, b)
				if nf == nil {
					continue
				}
				k := stackKey(&frame{n: nf.n, ph: nf.ph, i: nf.i, j: nf.j, lo: nf.lo, hi: nf.hi, buf: nf.buf})
				if !seen[k] && len(next) < maxWidth {
					seen[k] = true
					next = append(next, nf)
				}
			}
		}
		level = next
		if len(level) == 0 {
			break
		}
	}
	return maxDepth
}

// own is the fewest bytes that complete f's own value (f in a phase that is not waiting for a child).
func (ci *closeInfo) own(f *frame) int {
	n := f.n
	ml := ci.ml
	switch n.kind {
	case kObject:
		if n.free {
			switch f.ph {
			case oStart:
				return 2
			case oOpen, oNext:
				return 1
			case oComma:
				return 3 + ml(n.items) + 1 // "":0}
			case oColon:
				return 1 + ml(n.items) + 1
			case oValue:
				return ml(n.items) + 1
			}
			return 0
		}
		switch f.ph {
		case oStart:
			return ml(n)
		case oOpen:
			return ci.objectRest(n, int(f.i), false, ml)
		case oComma:
			return ci.objectRest(n, int(f.i), true, ml)
		case oNext:
			r := ci.objectRest(n, int(f.i), false, ml)
			if requiredLeft(n, int(f.i)) {
				r = addDist(r, 1) // the comma before the first of them
			}
			return r
		case oKey:
			best := unreachable
			for k, end := int(f.i), keyCandidates(n, int(f.i)); k < end; k++ {
				key := n.props[k].key
				if len(key) >= len(f.buf) && key[:len(f.buf)] == f.buf {
					best = min(best, addDist(len(key)-len(f.buf)+1+ml(n.props[k].value), ci.after(n, k)))
				}
			}
			return best
		case oColon:
			return addDist(1+ml(n.props[f.i].value), ci.after(n, int(f.i)))
		case oValue:
			return addDist(ml(n.props[f.i].value), ci.after(n, int(f.i)))
		}
		return 0
	case kArray:
		switch f.ph {
		case aStart:
			return ml(n)
		case aOpen:
			return ci.arrayRest(n, 0, ml)
		case aComma:
			need := max(n.minItems-int(f.i), 1)
			return addDist(need*ml(n.items), need)
		case aNext:
			need := max(n.minItems-int(f.i), 0)
			return addDist(need*(ml(n.items)+1), 1)
		}
		return 0
	case kString:
		rest := max(n.minLen-int(f.i), 0)
		switch f.ph {
		case sStart:
			return ml(n)
		case sBody:
			return rest + 1
		case sEsc:
			return 1 + rest + 1
		case sHex, sUTF:
			return int(f.j) + rest + 1
		}
		return 0
	case kNumber:
		return numberDistance(f)
	case kLiteral:
		best := unreachable
		for _, l := range n.lits {
			if len(l) >= len(f.buf) && l[:len(f.buf)] == f.buf {
				best = min(best, len(l)-len(f.buf))
			}
		}
		return best
	case kSeq:
		switch f.ph {
		case qPart:
			return seqRest(n, int(f.i), int(f.j), ml)
		case qSep:
			return addDist(len(n.repeatSep)-int(f.j), ml(n))
		}
		return 0
	case kText:
		return 0
	}
	return unreachable
}

// after is the shortest rest of a declared object once property k's value is written.
func (ci *closeInfo) after(n *node, k int) int {
	r := ci.objectRest(n, k+1, false, ci.ml)
	if requiredLeft(n, k+1) {
		r = addDist(r, 1)
	}
	return r
}

// stackDistance is the fewest bytes that take the stack topped by f to an accepting state.
func (ci *closeInfo) stackDistance(f *frame) int {
	d := 0
	for f.up != nil {
		d = addDist(d, ci.own(f))
		if d >= unreachable {
			return unreachable
		}
		f = childDone(f.up, f)
	}
	if f.n == nil && f.ph == rootDone {
		return d
	}
	return unreachable
}

// Distance is the fewest bytes that complete the text so far into a sentence of g (0: s is accepting); a
// dead state's is -1.
func (g *Grammar) Distance(s State) int {
	if s.Dead() {
		return -1
	}
	ci := g.closeInfo()
	best := unreachable
	for _, f := range s.stacks {
		best = min(best, ci.stackDistance(f))
	}
	return best
}

// canClose reports whether v holds every printable ASCII byte, tab and newline as a token of its own, so
// that a completion of d bytes takes at most d tokens.
func (v *Vocab) canClose() bool {
	v.closeOnce.Do(func() {
		var have [256]bool
		for _, b := range v.bytes {
			if len(b) == 1 {
				have[b[0]] = true
			}
		}
		v.closable = have['\n'] && have['\t']
		for c := 0x20; c < 0x7f; c++ {
			v.closable = v.closable && have[c]
		}
	})
	return v.closable
}

// Closing returns the tokens that may follow s when left tokens remain before the budget ends (this one
// included): those of Allowed whose state can still be completed in the tokens left after them, EOS when
// s is accepting. forced reports that the budget removed a token the grammar allowed. Without the
// single-byte tokens a close needs (Vocab), or with room to spare, it is Allowed itself. With fewer tokens
// left than the completion has bytes the close is best effort: the tokens that shorten it most. left ≤ 0 means
// no budget.
func (m *Matcher) Closing(ctx context.Context, s State, left int) (mk Mask, forced bool, err error) {
	mk, err = m.Allowed(ctx, s)
	if err != nil || left <= 0 || s.Dead() || !m.v.canClose() {
		return mk, false, err
	}
	ci := m.g.closeInfo()
	d := m.g.Distance(s)
	if d >= unreachable || left-1 >= d+ci.step*m.v.longest {
		return mk, false, nil
	}
	// Tokens that keep the completion within the tokens left after them stay. With fewer tokens left than the
	// completion has bytes (a budget shorter than the document needs in single bytes) none may: then those
	// that shorten the completion most stay, the fastest close the vocabulary offers.
	dists, err := m.tokenDistances(ctx, s, mk)
	if err != nil {
		return nil, false, err
	}
	out := make(Mask, len(mk))
	kept := 0
	if dists.plain && d <= left-1 {
		for w, word := range mk {
			if p := word & m.v.plain[w]; p != 0 {
				out[w] |= p
				kept++
			}
		}
	}
	best := unreachable + 1
	if dists.plain {
		best = d
	}
	for i, id := range dists.ids {
		dd := int(dists.dist[i])
		if dd <= left-1 {
			out.set(id)
			kept++
		}
		best = min(best, dd)
	}
	if kept == 0 {
		// Fewer tokens left than the completion has bytes: the tokens that shorten it most.
		if dists.plain && best == d {
			for w, word := range mk {
				out[w] |= word & m.v.plain[w]
			}
		}
		for i, id := range dists.ids {
			if int(dists.dist[i]) == best {
				out.set(id)
			}
		}
	}
	if slices.Equal(out, mk) {
		return mk, false, nil
	}
	return out, true, nil
}

// distances is, for one state, the distance after each token its mask allows (EOS: 0); plain says the
// state is in string bodies past their minimum length, where the plain tokens (not listed) leave the
// distance as it is.
type distances struct {
	ids   []int32
	dist  []int32
	plain bool
}

// tokenDistances computes (or takes from the cache) the distances after the tokens mk allows at s.
func (m *Matcher) tokenDistances(ctx context.Context, s State, mk Mask) (*distances, error) {
	m.mu.Lock()
	if ds, ok := m.dists[s.key]; ok {
		m.mu.Unlock()
		return ds, nil
	}
	m.mu.Unlock()
	ds := &distances{plain: true}
	for _, f := range s.stacks {
		ds.plain = ds.plain && inBody(f) && int(f.i) >= f.n.minLen
	}
	for w, word := range mk {
		if ds.plain {
			word &^= m.v.plain[w]
		}
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << uint(b)
			id := int32(w*64 + b)
			dd := 0
			if !slices.Contains(m.eos, id) {
				st := m.Advance(s, id)
				if st.Dead() {
					continue
				}
				dd = m.g.Distance(st)
			}
			ds.ids = append(ds.ids, id)
			ds.dist = append(ds.dist, int32(dd))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	if m.dists == nil || len(m.dists) >= maxCached {
		m.dists = map[string]*distances{}
	}
	m.dists[s.key] = ds
	m.mu.Unlock()
	return ds, nil
}
