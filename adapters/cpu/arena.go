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
	if a == nil || n > maxArena {
		return make([]float32, n)
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
		b := c.bufs[k][:n]
		if poisonScratch {
			for i := range b {
				b[i] = float32(math.NaN())
			}
		}
		return b
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
