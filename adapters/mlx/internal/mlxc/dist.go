package mlxc

import (
	"fmt"
	"time"
)

// DistributedAvailable reports whether the loaded MLX has the distributed backend bk ("ring", "jaccl",
// "mpi", or "" for any) compiled in. Call it on the MLX thread.
func DistributedAvailable(bk string) bool {
	var p *byte
	if bk != "" {
		p = CString(bk)
	}
	return DistributedIsAvailable(p)
}

// CPUStream is the stream for distributed ops (MLX implements send and recv on its CPU backend only); it is
// the default stream when that is the CPU's. Call it on the MLX thread.
func (r *Runtime) CPUStream() Stream {
	if !r.gpu {
		return r.stream
	}
	if r.cpu == 0 {
		r.cpu = DefaultCpuStreamNew()
	}
	return r.cpu
}

// Fail marks the runtime unusable with err (the first call wins): every Do from then on, and every Do
// waiting now, returns err. It is how a distributed peer that stopped answering surfaces: MLX's send and
// recv cannot time out, so the MLX thread stays blocked in them, and the process must be restarted to use
// MLX again.
func (r *Runtime) Fail(err error) {
	r.brokenOnce.Do(func() {
		r.brokenErr = err
		close(r.broken)
	})
}

// Err is the error Fail recorded, or nil.
func (r *Runtime) Err() error {
	select {
	case <-r.broken:
		return r.brokenErr
	default:
		return nil
	}
}

// DoWithin is Do bounded by d, counted from when f starts on the MLX thread (not while it waits behind
// other work): when f has not returned after d, the runtime is failed with timeout()'s error (f is most
// likely blocked in a distributed receive that will never complete) and that error is returned. d ≤ 0
// means no bound.
func (r *Runtime) DoWithin(d time.Duration, timeout func() error, f func() error) error {
	if d <= 0 {
		return r.Do(f)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Do(func() error {
			close(started)
			return f()
		})
	}()
	select {
	case err := <-done:
		return err
	case <-started:
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case err := <-done:
		return err
	case <-tm.C:
		err := timeout()
		if err == nil {
			err = fmt.Errorf("mlx: no answer within %v", d)
		}
		r.Fail(err)
		return r.brokenErr
	}
}
