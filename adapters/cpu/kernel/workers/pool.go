// Package workers is the fixed-partition worker pool the CPU kernels split their loops over: a loop's
// partition depends only on its length, its grain and the worker count, never on which goroutine runs a chunk,
// so the kernels' results do not depend on the worker count.
package workers

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool splits loops over output rows between a fixed number of goroutines. The partition of [0,n) depends only
// on n, the grain and the worker count, and callers compute each output element inside exactly one chunk, so
// results never depend on the worker count or on which goroutine runs a chunk. A Pool is safe for concurrent use.
//
// Handing a chunk to a fresh goroutine is slow on small machines: `go` puts it in the spawning P's runnext slot,
// which other Ps steal only after sleeping, so on the 2-core development VM a second chunk of up to tens of
// microseconds ran only after the first had finished (measured: a 2-chunk For of 2 × 27 µs took 56 µs). A Pool
// therefore keeps one helper goroutine per extra worker that, after a call, polls (yielding the P) for the next
// one for helperLinger, then exits; a decode step's stream of products keeps them hot, and an idle Pool holds no
// goroutines. When no helper is waiting, the caller starts one and yields its P so the helper starts at once.
// The caller and the helpers claim chunks (several per worker) as they go, and a caller waiting for a helper's
// last chunk blocks after a short poll, so a core taken by another process slows a call down instead of
// stalling it.
type Pool struct {
	threads int
	// busy is held by the For call that owns the helpers; concurrent (or nested) calls fall back to fresh
	// goroutines, one chunk per worker.
	busy    sync.Mutex
	helpers []helper
	work    work
}

// helperLinger is how long an idle helper polls for its next chunk before exiting.
const helperLinger = 200 * time.Microsecond

// helper is one persistent worker slot. t is the slot's chunk, rewritten only by the For call holding busy
// after the previous chunk is done.
type helper struct {
	job   atomic.Pointer[task]
	alive atomic.Bool
	t     task
	_     [64]byte // keep slots on separate cache lines
}

// task hands a helper the current call's work; done is set when the helper has run out of chunks, right after
// it puts a token in wake (buffered, drained by the caller after every call).
type task struct {
	w    *work
	done atomic.Bool
	wake chan struct{}
}

// New returns a pool of the given number of workers; threads ≤ 0 means runtime.GOMAXPROCS(0).
func New(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &Pool{threads: threads, helpers: make([]helper, threads-1)}
}

// Threads returns the number of workers.
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return p.threads
}

// chunksPerWorker is how many chunks For makes per worker (when grain allows): workers claim chunks as they
// go, so a worker whose core is taken by another process leaves its share to the others instead of holding up
// the call. Which goroutine runs a chunk never changes a result (each element is computed inside one chunk).
const chunksPerWorker = 4

// For calls fn on disjoint chunks [lo,hi) covering [0,n). grain is the smallest chunk worth a goroutine (≥ 1).
// The partition depends only on n, grain and the worker count; the caller and the helpers claim chunks in
// order until none is left. A nil pool runs serially.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) { p.forThen(0, 1, nil, n, grain, fn, false) }

// ForThen is For over [0,n1) with fn1, then For over [0,n2) with fn2, in one hand-off: no chunk of the second
// loop starts before every chunk of the first has returned, and the workers that finish the first loop early
// go straight on to the second. A product whose inputs are prepared row by row (the fast kernels' activation
// quantization) so runs both parts on every worker for the price of one call, instead of one serial part and
// one parallel call. The first loop is partitioned as For partitions it; the second in guided chunks that
// shrink as the loop goes (guided), so the workers finish it closer together than For's equal chunks let
// them. Both partitions depend only on the lengths, the grains and the worker count.
func (p *Pool) ForThen(n1, grain1 int, fn1 func(lo, hi int), n2, grain2 int, fn2 func(lo, hi int)) {
	p.forThen(n1, grain1, fn1, n2, grain2, fn2, true)
}

// guidedChunks bounds a guided partition's chunk count: no chunk is shorter than 1/guidedChunks of a
// worker's share (nor than the grain).
const guidedChunks = 16

// guided appends to b[:0] the bounds of a guided partition of [0,n) for the given worker count and grain:
// each chunk is 1/(2·workers) of what is left, at least the minimum length, so the last chunks, which decide
// when the loop ends, are short, while the chunk count stays near 2·workers·ln(guidedChunks/2) + a few.
func guided(n, grain, workers int, b []int) []int {
	least := max(grain, (n+workers*guidedChunks-1)/(workers*guidedChunks))
	b = append(b[:0], 0)
	for lo := 0; lo < n; {
		lo = min(n, lo+max(least, (n-lo+2*workers-1)/(2*workers)))
		b = append(b, lo)
	}
	return b
}

func (p *Pool) forThen(n1, grain1 int, fn1 func(lo, hi int), n2, grain2 int, fn2 func(lo, hi int), guide bool) {
	n1, n2 = max(n1, 0), max(n2, 0)
	if n1 == 0 && n2 == 0 {
		return
	}
	w1, c1 := p.partition(n1, grain1)
	w2, c2 := p.partition(n2, grain2)
	workers := max(w1, w2)
	if workers <= 1 {
		if n1 > 0 {
			fn1(0, n1)
		}
		if n2 > 0 {
			fn2(0, n2)
		}
		return
	}
	if !p.busy.TryLock() {
		if n1 > 0 {
			p.forSpawn(n1, (n1+w1-1)/w1, fn1)
		}
		if n2 > 0 {
			p.forSpawn(n2, (n2+w2-1)/w2, fn2)
		}
		return
	}
	defer p.busy.Unlock()
	w := &p.work
	w.fn1, w.n1, w.chunk1 = fn1, n1, c1
	w.chunks1 = 0
	if n1 > 0 {
		w.chunks1 = (n1 + c1 - 1) / c1
	}
	w.fn, w.n, w.chunk = fn2, n2, c2
	w.bounds = w.bounds[:0]
	if guide && n2 > 0 {
		w.bounds = guided(n2, grain2, workers, w.bounds)
	}
	w.next.Store(0)
	w.done1.Store(0)
	w.ready1 = nil
	if w.chunks1 > 0 {
		w.ready1 = make(chan struct{})
	}
	started := false
	for i := range workers - 1 {
		h := &p.helpers[i]
		h.t.w = w
		h.t.done.Store(false)
		if h.t.wake == nil {
			h.t.wake = make(chan struct{}, 1)
		}
		h.job.Store(&h.t)
		if h.alive.CompareAndSwap(false, true) {
			go h.run()
			started = true
		}
	}
	if started {
		// The new helpers sit in this P's runnext slot; yielding runs them here while another P takes the caller.
		runtime.Gosched()
	}
	w.run()
	for i := range workers - 1 {
		h := &p.helpers[i]
		// A helper that has not taken its job yet never will need to: withdraw it instead of waiting.
		if !h.job.CompareAndSwap(&h.t, nil) {
			h.t.wait()
		}
		h.t.w = nil
	}
	w.fn, w.fn1 = nil, nil // do not keep the caller's closures alive
}

// partition returns how many workers a loop of n elements at this grain uses and its chunk length (the
// partition For uses: chunksPerWorker chunks per worker where the grain allows).
func (p *Pool) partition(n, grain int) (workers, chunk int) {
	if n <= 0 {
		return 0, 1
	}
	grain = max(grain, 1)
	workers = p.Threads()
	maxChunks := (n + grain - 1) / grain
	workers = min(workers, maxChunks)
	if workers <= 1 {
		return 1, n
	}
	chunks := min(maxChunks, workers*chunksPerWorker)
	return workers, (n + chunks - 1) / chunks
}

// work is one call's chunks, claimed in order by the caller and the helpers: first the chunks1 chunks of the
// first loop (fn1, none for a plain For), then those of the second (fn).
type work struct {
	fn1        func(lo, hi int)
	n1, chunk1 int
	chunks1    int
	fn         func(lo, hi int)
	n, chunk   int
	bounds     []int // the second loop's chunk bounds when guided (else chunks of chunk)
	next       atomic.Int64
	done1      atomic.Int64  // chunks of the first loop that have returned
	ready1     chan struct{} // closed when the first loop's last chunk returns
	_          [48]byte      // done1 is written by every worker of the first loop: keep it off next's line
}

// run claims and runs chunks until none is left. A worker that claims a chunk of the second loop while the
// first still runs elsewhere waits for it (polling, then yielding its P).
func (w *work) run() {
	for {
		i := int(w.next.Add(1) - 1)
		if i < w.chunks1 {
			lo := i * w.chunk1
			w.fn1(lo, min(lo+w.chunk1, w.n1))
			if w.done1.Add(1) == int64(w.chunks1) {
				close(w.ready1)
			}
			continue
		}
		lo, hi := (i-w.chunks1)*w.chunk, 0
		if len(w.bounds) > 0 {
			k := i - w.chunks1
			if k+1 >= len(w.bounds) {
				return
			}
			lo, hi = w.bounds[k], w.bounds[k+1]
		} else {
			if lo >= w.n {
				return
			}
			hi = min(lo+w.chunk, w.n)
		}
		w.waitFirst()
		w.fn(lo, hi)
	}
}

// forSpawn is For with fresh goroutines, for calls that find the helpers in use.
func (p *Pool) forSpawn(n, chunk int, fn func(lo, hi int)) {
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	runtime.Gosched()
	fn(0, min(chunk, n))
	wg.Wait()
}

// run executes the slot's chunks until none arrives for helperLinger. A chunk posted while it decides to exit
// is either seen by its final check (it stays) or finds alive false and starts a new helper.
func (h *helper) run() {
	idle := time.Now()
	for spins := 0; ; spins++ {
		if t := h.job.Swap(nil); t != nil {
			t.w.run()
			select {
			case t.wake <- struct{}{}:
			default:
			}
			t.done.Store(true)
			idle, spins = time.Now(), 0
			continue
		}
		if h.job.Load() == nil && pollForJob(&h.job) {
			continue
		}
		if spins%64 == 63 && time.Since(idle) > helperLinger {
			h.alive.Store(false)
			if h.job.Load() == nil || !h.alive.CompareAndSwap(false, true) {
				return
			}
			idle = time.Now()
		}
		runtime.Gosched()
	}
}

// waitSpin is how long a caller polls for a helper's last chunk before blocking. Chunks are short, so on a
// quiet machine the poll ends first; when another process has taken the helper's core, blocking lets the OS
// run the helper on this one instead of spending the time slice polling.
const waitSpin = 50 * time.Microsecond

// wait returns once the helper has finished the task, then drains its wake token.
func (t *task) wait() {
	start := time.Now()
	for !t.done.Load() {
		if pollFor(&t.done) {
			break
		}
		if time.Since(start) > waitSpin {
			<-t.wake
			for !t.done.Load() {
				// The token is sent just before done is set; yield in case the helper was preempted in between
				// (with more workers than Ps it may need this P to finish).
				runtime.Gosched()
			}
			return
		}
		runtime.Gosched()
	}
	<-t.wake // sent before done was set
}

// pollSpins is how many times a waiting goroutine re-reads a flag before yielding its P (yielding costs about
// a microsecond of latency; reading keeps it to the cache line transfer).
const pollSpins = 200

// pollFor reads f up to pollSpins times and reports whether it became true.
func pollFor(f *atomic.Bool) bool {
	for range pollSpins {
		if f.Load() {
			return true
		}
	}
	return false
}

// waitFirst returns once every chunk of the first loop has returned: it polls for waitSpin, then blocks, so
// that a worker whose core another process has taken can finish its chunk on this one (as task.wait).
func (w *work) waitFirst() {
	start := time.Now()
	for w.done1.Load() < int64(w.chunks1) {
		if pollForCount(&w.done1, int64(w.chunks1)) {
			return
		}
		if time.Since(start) > waitSpin {
			<-w.ready1
			return
		}
		runtime.Gosched()
	}
}

// pollForCount reads c up to pollSpins times and reports whether it reached want.
func pollForCount(c *atomic.Int64, want int64) bool {
	for range pollSpins {
		if c.Load() >= want {
			return true
		}
	}
	return false
}

// pollForJob reads j up to pollSpins times and reports whether a job arrived.
func pollForJob(j *atomic.Pointer[task]) bool {
	for range pollSpins {
		if j.Load() != nil {
			return true
		}
	}
	return false
}
