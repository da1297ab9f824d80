package workers

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coverOnce runs p.For over n and reports whether every index was visited exactly once.
func coverOnce(p *Pool, n, grain int) bool {
	seen := make([]atomic.Int32, n)
	p.For(n, grain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			seen[i].Add(1)
		}
	})
	for i := range seen {
		if seen[i].Load() != 1 {
			return false
		}
	}
	return true
}

// Back-to-back calls reuse the lingering helpers; calls from several goroutines at once, and calls nested in
// a chunk, find the helpers busy and use fresh goroutines. Every call still covers its range exactly once.
func TestPoolHelpers(t *testing.T) {
	for _, threads := range []int{2, 3, 9} {
		p := New(threads)
		for i := range 200 {
			require.True(t, coverOnce(p, 1+i%37, 1), "threads %d call %d", threads, i)
		}
		var wg sync.WaitGroup
		var bad atomic.Int32
		for g := range 4 {
			wg.Go(func() {
				for i := range 100 {
					if !coverOnce(p, 5+(g+i)%50, 2) {
						bad.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.Zero(t, bad.Load(), "threads %d concurrent", threads)
		var nestedBad atomic.Int32
		p.For(threads, 1, func(lo, hi int) {
			if !coverOnce(p, 64, 1) {
				nestedBad.Add(1)
			}
		})
		assert.Zero(t, nestedBad.Load(), "threads %d nested", threads)
	}
}

// An idle pool's helpers exit after helperLinger, so a pool holds no goroutines between bursts of work.
func TestPoolHelpersExit(t *testing.T) {
	// Let helpers of earlier tests exit first (they linger for 200µs).
	settle := func(limit int) int {
		n := runtime.NumGoroutine()
		for deadline := time.Now().Add(5 * time.Second); n > limit && time.Now().Before(deadline); n = runtime.NumGoroutine() {
			time.Sleep(time.Millisecond)
		}
		return n
	}
	time.Sleep(20 * time.Millisecond)
	before := runtime.NumGoroutine()
	p := New(4)
	require.True(t, coverOnce(p, 100, 1))
	assert.LessOrEqual(t, settle(before), before)
	// A pool whose helpers have exited starts new ones.
	require.True(t, coverOnce(p, 100, 1))
	assert.LessOrEqual(t, settle(before), before)
}
