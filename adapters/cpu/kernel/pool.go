package kernel

import (
	"runtime"
	"sync"
)

// Pool splits loops over output rows between a fixed number of goroutines. The partition of [0,n) depends only
// on n and the worker count, and callers compute each output element inside exactly one chunk, so results never
// depend on the worker count. A Pool is safe for concurrent use; it holds no goroutines between calls.
type Pool struct {
	threads int
}

// NewPool returns a pool of the given number of workers; threads ≤ 0 means runtime.GOMAXPROCS(0).
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &Pool{threads: threads}
}

// Threads returns the number of workers.
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return p.threads
}

// For calls fn on disjoint chunks [lo,hi) covering [0,n). grain is the smallest chunk worth a goroutine (≥ 1).
// A nil pool runs serially.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	workers := p.Threads()
	if maxW := (n + grain - 1) / grain; workers > maxW {
		workers = maxW
	}
	if workers <= 1 {
		fn(0, n)
		return
	}
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	fn(0, min(chunk, n))
	wg.Wait()
}
