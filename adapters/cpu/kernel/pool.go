package kernel

import (
	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/cpu/kernel/workers"
)

// Pool runs the kernels' loops over output rows on a fixed number of workers (a workers.Pool: its partition
// of [0,n) depends only on n, the grain and the worker count, and the kernels compute each output element
// inside exactly one chunk, so results never depend on the worker count or on which goroutine runs a chunk),
// and selects the kernel mode of the Linears that use it. A Pool is safe for concurrent use; a nil Pool runs
// serially in ModeExact.
type Pool struct {
	w    *workers.Pool
	mode Mode
}

// NewPool returns a pool of the given number of workers; threads ≤ 0 means runtime.GOMAXPROCS(0).
func NewPool(threads int) *Pool { return &Pool{w: workers.New(threads)} }

// NewPoolMode is NewPool running the Linears that use it with the given kernel mode.
func NewPoolMode(threads int, mode Mode) *Pool {
	p := NewPool(threads)
	p.mode = mode
	return p
}

// Mode returns the kernel mode (ModeExact for a nil pool).
func (p *Pool) Mode() Mode {
	if p == nil {
		return ModeExact
	}
	return p.mode
}

// workers returns the worker pool (nil, which runs serially, for a nil Pool).
func (p *Pool) workers() *workers.Pool {
	if p == nil {
		return nil
	}
	return p.w
}

// Threads returns the number of workers (1 for a nil pool).
func (p *Pool) Threads() int { return p.workers().Threads() }

// For calls fn on disjoint chunks [lo,hi) covering [0,n), as workers.Pool.For. grain is the smallest chunk
// worth a goroutine (≥ 1). A nil pool runs serially.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) { p.workers().For(n, grain, fn) }

// ForThen is For over [0,n1) with fn1, then over [0,n2) with fn2, in one hand-off (workers.Pool.ForThen):
// every chunk of the first loop returns before any chunk of the second starts.
func (p *Pool) ForThen(n1, grain1 int, fn1 func(lo, hi int), n2, grain2 int, fn2 func(lo, hi int)) {
	p.workers().ForThen(n1, grain1, fn1, n2, grain2, fn2)
}

// SwiGLU is vecmath.SwiGLU split between the pool's workers (the float64 exp per element is costly for verify
// blocks), vecmath.SwiGLUFast in ModeFast; every element is computed alone, so the bits do not depend on the split.
func (p *Pool) SwiGLU(dst, gate, up []float32) {
	f := vecmath.SwiGLU
	if p.Mode() == ModeFast {
		f = vecmath.SwiGLUFast
	}
	p.For(len(dst), 4096, func(lo, hi int) { f(dst[lo:hi], gate[lo:hi], up[lo:hi]) })
}

// GatedRMSNorm is vecmath.GatedRMSNorm with rows split between the pool's workers (rows are independent); in
// ModeFast, vecmath.GatedRMSNormFast.
func (p *Pool) GatedRMSNorm(dst, x, z, w []float32, eps float32) {
	n := len(w)
	f := vecmath.GatedRMSNorm
	if p.Mode() == ModeFast {
		f = vecmath.GatedRMSNormFast
	}
	p.For(len(x)/n, max(1, 4096/n), func(lo, hi int) {
		f(dst[lo*n:hi*n], x[lo*n:hi*n], z[lo*n:hi*n], w, eps)
	})
}
