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

// ForThen covers both loops exactly once and starts no chunk of the second before every chunk of the first
// has returned: on the helpers, on fresh goroutines (calls that find the helpers busy) and serially.
func TestPoolForThen(t *testing.T) {
	check := func(p *Pool, n1, g1, n2, g2 int) string {
		seen1, seen2 := make([]atomic.Int32, n1), make([]atomic.Int32, n2)
		var running1, finished1 atomic.Int32
		var early atomic.Int32
		chunks1 := 0
		var mu sync.Mutex
		p.ForThen(n1, g1, func(lo, hi int) {
			running1.Add(1)
			mu.Lock()
			chunks1++
			mu.Unlock()
			for i := lo; i < hi; i++ {
				seen1[i].Add(1)
			}
			d := time.Duration(lo%3) * 10 * time.Microsecond // uneven chunks
			if lo == 0 && n1 >= 13 {
				d = 3 * waitSpin // long enough that a worker waiting for the first loop blocks
			}
			time.Sleep(d)
			finished1.Add(1)
		}, n2, g2, func(lo, hi int) {
			if finished1.Load() != running1.Load() || (n1 > 0 && finished1.Load() == 0) {
				early.Add(1)
			}
			for i := lo; i < hi; i++ {
				seen2[i].Add(1)
			}
		})
		for i := range seen1 {
			if seen1[i].Load() != 1 {
				return "first loop not covered once"
			}
		}
		for i := range seen2 {
			if seen2[i].Load() != 1 {
				return "second loop not covered once"
			}
		}
		if int(finished1.Load()) != chunks1 {
			return "first loop chunks unfinished"
		}
		if early.Load() != 0 {
			return "a chunk of the second loop started before the first loop ended"
		}
		return ""
	}
	cases := []struct{ n1, g1, n2, g2 int }{
		{16, 1, 96, 1}, {1, 1, 40, 1}, {16, 2, 1, 1}, {0, 1, 37, 2}, {13, 1, 0, 1}, {5, 8, 3, 8}, {64, 1, 64, 1},
	}
	for _, threads := range []int{1, 2, 3, 9} {
		p := New(threads)
		for _, c := range cases {
			for range 20 {
				require.Empty(t, check(p, c.n1, c.g1, c.n2, c.g2), "threads %d case %+v", threads, c)
			}
		}
		var wg sync.WaitGroup
		var bad atomic.Int32
		for g := range 4 {
			wg.Go(func() {
				for i := range 50 {
					c := cases[(g+i)%len(cases)]
					if check(p, c.n1, c.g1, c.n2, c.g2) != "" {
						bad.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.Zero(t, bad.Load(), "threads %d concurrent", threads)
	}
	var nilPool *Pool
	require.Empty(t, check(nilPool, 7, 1, 9, 1), "nil pool")
}

// A guided partition covers [0,n) in order with chunks that never grow, none shorter than the grain but the
// last, and keeps the chunk count bounded; ForThen's second loop runs on it.
func TestGuidedPartition(t *testing.T) {
	for _, workers := range []int{2, 3, 8} {
		for _, grain := range []int{1, 3, 64} {
			for n := 1; n <= 700; n += 7 {
				b := guided(n, grain, workers, nil)
				require.Equal(t, 0, b[0])
				require.Equal(t, n, b[len(b)-1], "workers %d grain %d n %d", workers, grain, n)
				for i := 1; i < len(b); i++ {
					size := b[i] - b[i-1]
					require.Positive(t, size)
					if i+1 < len(b) {
						require.GreaterOrEqual(t, size, min(grain, n), "workers %d grain %d n %d chunk %d", workers, grain, n, i)
						if i > 1 {
							require.LessOrEqual(t, size, b[i-1]-b[i-2], "chunks shrink: workers %d grain %d n %d", workers, grain, n)
						}
					}
				}
				assert.LessOrEqual(t, len(b)-1, 2*workers*4+guidedChunks, "workers %d grain %d n %d: %d chunks", workers, grain, n, len(b)-1)
			}
		}
	}
	assert.Equal(t, []int{0, 24, 42, 56, 66, 74, 80, 84, 87, 90, 93, 96}, guided(96, 1, 2, nil))
}
