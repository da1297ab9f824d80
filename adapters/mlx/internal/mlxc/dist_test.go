package mlxc

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bareRuntime is a Runtime's executor without MLX (its jobs here call no MLX function).
func bareRuntime(t *testing.T) *Runtime {
	r := &Runtime{work: make(chan func()), broken: make(chan struct{})}
	go func() {
		for f := range r.work {
			f()
		}
	}()
	t.Cleanup(func() { close(r.work) })
	return r
}

func TestDoWithin(t *testing.T) {
	errLost := errors.New("peer lost")
	lost := func() error { return errLost }
	t.Run("in time", func(t *testing.T) {
		r := bareRuntime(t)
		require.NoError(t, r.DoWithin(time.Second, lost, func() error { return nil }))
		assert.NoError(t, r.Err())
	})
	t.Run("waiting behind other work does not count", func(t *testing.T) {
		r := bareRuntime(t)
		release, running, blocked := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() { blocked <- r.Do(func() error { close(running); <-release; return nil }) }()
		<-running
		time.AfterFunc(150*time.Millisecond, func() { close(release) })
		require.NoError(t, r.DoWithin(100*time.Millisecond, lost, func() error { return nil }))
		assert.NoError(t, r.Err())
		require.NoError(t, <-blocked)
	})
	t.Run("a stuck job fails the runtime", func(t *testing.T) {
		r := bareRuntime(t)
		stuck := make(chan struct{})
		t.Cleanup(func() { close(stuck) })
		err := r.DoWithin(50*time.Millisecond, lost, func() error { <-stuck; return nil })
		require.ErrorIs(t, err, errLost)
		require.ErrorIs(t, r.Err(), errLost)
		// Every later call answers at once with the same error instead of queueing behind the stuck job.
		done := make(chan error, 1)
		go func() { done <- r.Do(func() error { return nil }) }()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, errLost)
		case <-time.After(5 * time.Second):
			t.Fatal("Do on a failed runtime blocked")
		}
	})
}

// The contract the pipeline's heartbeats rely on: Fail from another goroutine (a heartbeat that lost a
// rank) ends a Do whose job is stuck in a receive at once, with Fail's error, and every Do after it.
func TestFailEndsRunningDo(t *testing.T) {
	errLost := errors.New("rank 1 lost")
	r := bareRuntime(t)
	stuck, running := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	done := make(chan error, 1)
	go func() { done <- r.Do(func() error { close(running); <-stuck; return nil }) }()
	<-running
	r.Fail(errLost)
	select {
	case err := <-done:
		require.ErrorIs(t, err, errLost)
	case <-time.After(5 * time.Second):
		t.Fatal("a failed runtime's running Do did not return")
	}
	assert.ErrorIs(t, r.Do(func() error { return nil }), errLost)
	assert.ErrorIs(t, r.Err(), errLost)
}
