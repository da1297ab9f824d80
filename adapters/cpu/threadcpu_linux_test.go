package cpu

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time (the caller locks its goroutine to the thread).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err) // every Linux kernel the project runs on has the clock
	}
	return time.Duration(ts.Nano())
}
