package cpu

import (
	"math"
	"math/bits"
	"sync"
)

// arena recycles one sequence's (or one batched pass's) activation buffers from pass to pass. Buffers are
// kept by size class (sizes rounded up to four significant bits, so at most 1/8 more than asked), and a
// pass's k-th request of a class gets the class's k-th buffer: steady decoding, verify rounds and batched
// rounds of a stable composition allocate (and leave the garbage collector) nothing, and passes of different
// shapes (decode, verify, a prefill chunk; MoE routing that moves rows between experts) each find their own
// classes instead of evicting each other's buffers. Classes (over keep values) that no pass of the last
// trimEvery passes used as many times as they hold are trimmed, so a long prompt's prefill buffers do not stay
// for good; buffers over maxArena values are allocated afresh, and the arena never holds more than arenaBudget
// values in all: a pass that needs room takes it from the classes it has not asked for (evictIdle), so the
// rounds after a long prefill recycle their buffers from the second pass on. A nil
// arena allocates every buffer. Values from a pass stay valid until the next reset: nothing a Forward returns
// to its caller may live in it.
type arena struct {
	classes map[int]*sizeClass
	touched []*sizeClass // the classes this pass asked for
	held    int          // Σ cap over every class's buffers
	passes  int
	// keep is the largest size class trims leave alone (0: none): a target session's arena keeps its verify
	// buffers (keepClass), which its price counts (SessionBytes: a verify block of every size up to Block).
	keep int
	// big holds the buffers over maxArena values this pass took from largeFree, given back at the next reset
	// (or release).
	big [][]float32
	// mark is where the current layer began (beginLayer), when the pass scopes its buffers by layer.
	mark layerMark
	// kept is where the last layer's output sits (endLayer), so that the next layer can give it back.
	kept keptBuffer
}

// keptBuffer locates the buffer a layer kept: slot of class c, or (c nil) index big of the pass's large ones.
type keptBuffer struct {
	ok   bool
	c    *sizeClass
	slot int
	big  int
}

// layerMark is an arena's state when a layer began: how many classes the pass had touched and each one's
// requests, and how many large buffers it held.
type layerMark struct {
	on      bool
	touched int
	used    []int // used[i]: touched[i].used at the mark
	big     int
}

// sizeClass holds the buffers of one rounded size; used counts this pass's requests (0: not asked for yet,
// so not yet in touched), peak the most requests one pass made since the last trim.
type sizeClass struct {
	bufs       [][]float32
	used, peak int
}

const (
	maxArena    = 1 << 18 // values (1 MiB: a 16-row verify block's fused projections fit, and its logits up to a vocabulary of 16,384)
	arenaBudget = 1 << 23 // values (32 MiB)
	trimEvery   = 32      // passes between trims
	// keepClass is the largest size class a target session's trims leave alone (arena.keep): a verify's
	// buffers (a 16-row block's logits up to a vocabulary of 4,096 and its projections), which the arena would
	// otherwise trim after 32 plain decode steps and allocate afresh (page faults and all) in the next
	// speculative round: on gocoder a 4-row verify after 64 plain steps took 3.0–3.3 ms with the trims and 2.2
	// without, as in a run of verifies. Larger classes (prefill chunks) are trimmed as before; the budget
	// bounds both (evictIdle). Drafters' and batched passes' arenas trim every class: their prices count one
	// block shape, and a drafter's shapes vary from round to round.
	keepClass = 1 << 16
)

// classSize rounds n up to its size class: four significant bits (eight classes per doubling).
func classSize(n int) int {
	if n <= 8 {
		return 8
	}
	step := 1 << max(bits.Len(uint(n))-4, 0)
	return (n + step - 1) &^ (step - 1)
}

// reset starts a pass: every buffer may be handed out again.
func (a *arena) reset() {
	if a == nil {
		return
	}
	a.giveBig()
	a.mark.on, a.kept = false, keptBuffer{}
	for _, c := range a.touched {
		c.peak = max(c.peak, c.used)
		c.used = 0
	}
	a.touched = a.touched[:0]
	a.passes++
	if a.passes%trimEvery != 0 {
		return
	}
	for size, c := range a.classes {
		if size <= a.keep {
			continue
		}
		for len(c.bufs) > c.peak {
			last := len(c.bufs) - 1
			a.held -= cap(c.bufs[last])
			c.bufs[last] = nil
			c.bufs = c.bufs[:last]
		}
		c.peak = 0
		if len(c.bufs) == 0 {
			delete(a.classes, size)
		}
	}
}

// get returns n zeroed values.
func (a *arena) get(n int) []float32 {
	b := a.scratch(n)
	clear(b)
	return b
}

// scratch returns n values whose contents are whatever the buffer last held, for a caller that writes every
// one of them before it reads any (an op's output). Under poisonScratch (tests) they are NaN, so a value an
// op fails to write shows in its results.
func (a *arena) scratch(n int) []float32 {
	if a == nil {
		return make([]float32, n)
	}
	if n > maxArena {
		b := largeFree.take(n)
		a.big = append(a.big, b)
		return a.poison(b)
	}
	m := classSize(n)
	c := a.classes[m]
	if c == nil {
		if a.classes == nil {
			a.classes = make(map[int]*sizeClass)
		}
		c = &sizeClass{}
		a.classes[m] = c
	}
	if c.used == 0 {
		a.touched = append(a.touched, c)
	}
	k := c.used
	c.used++
	if k < len(c.bufs) {
		return a.poison(c.bufs[k][:n])
	}
	if k == len(c.bufs) && a.held+m > arenaBudget {
		a.evictIdle(m)
	}
	if k != len(c.bufs) || a.held+m > arenaBudget {
		return make([]float32, n) // not kept: over budget, or an earlier request of the pass was not kept either
	}
	b := make([]float32, m)
	c.bufs = append(c.bufs, b)
	a.held += m
	return b[:n]
}

// beginLayer marks where a layer's requests start: endLayer gives every buffer requested after it back to the
// pass but the layer's output. A pass's k-th request of a class gets the class's k-th buffer, so without it a
// prefill chunk held every op's output of every layer at once (a 480-token gocoder prefill allocated 673 MB
// afresh, most of its buffers over maxArena); with it the layers reuse one layer's buffers.
func (a *arena) beginLayer() {
	if a == nil {
		return
	}
	m := &a.mark
	m.on, m.touched, m.big = true, len(a.touched), len(a.big)
	m.used = m.used[:0]
	for _, c := range a.touched {
		m.used = append(m.used, c.used)
	}
}

// endLayer ends the layer beginLayer began: the buffers its requests got may be handed out again, except
// keep, which must be the whole of one of them (an op's result, as the layer's output is) or none of them.
// Nothing else the layer's ops returned may be read after it. With dropIn the layer's input, when it is the
// output the layer before kept, is given back too (nothing reads it any more: no tap kept it).
func (a *arena) endLayer(keep []float32, dropIn bool) {
	if a == nil || !a.mark.on {
		return
	}
	m := &a.mark
	m.on = false
	if dropIn && a.kept.ok {
		a.dropKept()
	}
	a.kept = keptBuffer{}
	kept := false
	for i, c := range a.touched {
		from := 0
		if i < m.touched {
			from = m.used[i]
		}
		c.peak = max(c.peak, c.used)
		to := from
		for k := from; !kept && k < min(c.used, len(c.bufs)); k++ {
			if same(c.bufs[k], keep) {
				c.bufs[from], c.bufs[k] = c.bufs[k], c.bufs[from]
				kept, to = true, from+1
				a.kept = keptBuffer{ok: true, c: c, slot: from}
			}
		}
		c.used = to
	}
	// Classes the layer touched first and no longer uses leave the pass's list (scratch adds them again).
	n := m.touched
	for _, c := range a.touched[m.touched:] {
		if c.used > 0 {
			a.touched[n] = c
			n++
		}
	}
	clear(a.touched[n:])
	a.touched = a.touched[:n]
	n = m.big
	for _, b := range a.big[m.big:] {
		if !kept && same(b, keep) {
			a.big[n] = b
			a.kept = keptBuffer{ok: true, big: n}
			n++
			kept = true
			continue
		}
		largeFree.give(b)
	}
	clear(a.big[n:])
	a.big = a.big[:n]
}

// dropKept moves the mark of the layer being ended back over the output the layer before kept (a.kept), so
// that endLayer gives it back with the layer's own buffers. It sits in the last slot its class used before
// the mark, or is the last large buffer before it (the two marks are adjacent calls); otherwise it stays.
func (a *arena) dropKept() {
	m, k := &a.mark, a.kept
	if k.c == nil {
		if k.big == m.big-1 {
			m.big--
		}
		return
	}
	for i, c := range a.touched[:m.touched] {
		// Never down to no request: a class in the pass's list with none would be listed twice (scratch lists
		// it again). The embedding holds a slot of the residual's class before the first layer anyway.
		if c == k.c && m.used[i]-1 == k.slot && m.used[i] > 1 {
			m.used[i]--
			return
		}
	}
}

// same reports whether keep starts where buf does (keep is then buf, or its first values).
func same(buf, keep []float32) bool {
	return len(keep) > 0 && len(buf) > 0 && &buf[0] == &keep[0]
}

// poison fills a recycled buffer with NaN under poisonScratch (tests), so a value an op fails to write shows.
func (a *arena) poison(b []float32) []float32 {
	if poisonScratch {
		for i := range b {
			b[i] = float32(math.NaN())
		}
	}
	return b
}

// giveBig returns the buffers over maxArena values the last pass took to largeFree.
func (a *arena) giveBig() {
	for i, b := range a.big {
		largeFree.give(b)
		a.big[i] = nil
	}
	a.big = a.big[:0]
}

// release gives back every buffer the arena holds beyond its own classes (the large ones) when its owner is
// done with it (a session's Close): nothing a pass returned may live in them.
func (a *arena) release() {
	if a != nil {
		a.giveBig()
	}
}

// largeBuffers is the process's free list of buffers over maxArena values (prefill chunks' activations: a
// 480-token chunk of gocoder's MLP is 740K values), shared by every session's arena: a pass takes them
// and gives them back at its session's next pass (or its Close). Allocated afresh in every prefill, as they
// were before, Go zeroed them and the OS faulted their pages in: 9% of a gocoder prefill's CPU time in
// memclr alone. Unlike a sync.Pool it survives garbage collections; it holds at most largeBudget values,
// buffers given back beyond that go to the garbage collector. Buffers are kept by size class (classSize).
type largeBuffers struct {
	mu   sync.Mutex
	free map[int][][]float32
	held int
}

// largeBudget bounds the values largeFree keeps between passes (64 MiB).
const largeBudget = 1 << 24

var largeFree largeBuffers

// take returns n values of a kept buffer of n's size class, or of a new one; their contents are whatever
// the buffer last held.
func (l *largeBuffers) take(n int) []float32 {
	m := classSize(n)
	l.mu.Lock()
	if bufs := l.free[m]; len(bufs) > 0 {
		b := bufs[len(bufs)-1]
		bufs[len(bufs)-1] = nil
		l.free[m] = bufs[:len(bufs)-1]
		l.held -= m
		l.mu.Unlock()
		return b[:n]
	}
	l.mu.Unlock()
	return make([]float32, m)[:n]
}

// give keeps b for a later take, within largeBudget.
func (l *largeBuffers) give(b []float32) {
	m := cap(b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held+m > largeBudget {
		return
	}
	if l.free == nil {
		l.free = make(map[int][][]float32)
	}
	l.free[m] = append(l.free[m], b[:m])
	l.held += m
}

// evictIdle drops the buffers of classes this pass has not asked for, until m more values fit the budget.
// Without it a pass of another shape that follows a long prefill (whose buffers fill the budget) would
// allocate and zero its buffers afresh, pass after pass, until the next trim (up to trimEvery passes: most of
// a short generation's rounds). Classes the pass uses keep every buffer.
func (a *arena) evictIdle(m int) {
	for size, c := range a.classes {
		if a.held+m <= arenaBudget {
			return
		}
		if c.used > 0 {
			continue
		}
		for _, b := range c.bufs {
			a.held -= cap(b)
		}
		delete(a.classes, size)
	}
}

// poisonScratch makes scratch fill recycled buffers with NaN (set by tests only).
var poisonScratch = false

// scopeLayers lets passes that record no tape give each decoder layer's buffers back at its end (ops.layers);
// tests turn it off to compare.
var scopeLayers = true

// scopeRows is the fewest rows of a pass whose layers give their buffers back: below it a pass's buffers are
// small, and the marks' bookkeeping (a loop over the pass's size classes per layer) would be a decode step's
// overhead for nothing.
const scopeRows = 32

// scoped reports whether a pass of rows rows scopes its buffers by layer.
func scoped(rows int) bool { return scopeLayers && rows >= scopeRows }

// arenas is a free list of arenas for passes that own no session (batched rounds). Unlike a sync.Pool it
// is not emptied by a garbage collection, which a round's own garbage (its logits) triggers every few
// rounds: a dropped arena would make the next round allocate and zero every buffer afresh. It keeps at most
// maxFreeArenas (the scheduler runs one batched pass at a time; concurrent callers beyond that allocate).
type arenas struct {
	mu   sync.Mutex
	free []*arena
}

func (l *arenas) get() *arena {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		a := l.free[n-1]
		l.free = l.free[:n-1]
		return a
	}
	return new(arena)
}

func (l *arenas) put(a *arena) {
	l.mu.Lock()
	if len(l.free) < maxFreeArenas {
		l.free = append(l.free, a)
	}
	l.mu.Unlock()
}

const maxFreeArenas = 2
