package cpu

// arena recycles one sequence's activation buffers from pass to pass: the n-th buffer a pass asks for is
// the n-th of the previous pass when that one is large enough, so steady decoding and verify rounds allocate
// (and leave the garbage collector) almost nothing. Buffers over maxArena values are allocated afresh, and
// the arena never holds more than arenaBudget values in all (a MoE model's routing changes which ops land in
// which slot from pass to pass, so slots could otherwise each grow to the largest request seen). A nil arena
// allocates every buffer. Values from a pass stay valid until the next reset: nothing a Forward returns to
// its caller may live in it.
type arena struct {
	bufs [][]float32
	next int
	held int // Σ cap(bufs)
}

const (
	maxArena    = 1 << 18 // values (1 MiB: a 16-row verify block's fused projections fit, and its logits up to a vocabulary of 16,384)
	arenaBudget = 1 << 23 // values (32 MiB)
)

// reset starts a pass: every buffer may be handed out again.
func (a *arena) reset() {
	if a != nil {
		a.next = 0
	}
}

// get returns n zeroed values.
func (a *arena) get(n int) []float32 {
	if a == nil || n > maxArena {
		return make([]float32, n)
	}
	if a.next < len(a.bufs) && cap(a.bufs[a.next]) >= n {
		b := a.bufs[a.next][:n]
		clear(b)
		a.next++
		return b
	}
	b := make([]float32, n)
	old := 0
	if a.next < len(a.bufs) {
		old = cap(a.bufs[a.next])
	}
	if a.held-old+n > arenaBudget {
		return b // over budget: this one is not kept
	}
	a.held += n - old
	if a.next < len(a.bufs) {
		a.bufs[a.next] = b
	} else {
		a.bufs = append(a.bufs, b)
	}
	a.next++
	return b
}
