//go:build !linux

package cpu

import "time"

// threadCPU is wall time where the thread's CPU clock is not read (BenchmarkGocoder's 1-thread figures then
// include time the thread waited).
func threadCPU() time.Duration { return time.Duration(time.Now().UnixNano()) }
