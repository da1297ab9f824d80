//go:build !linux

package kernel

import "time"

// threadCPU is wall time where the thread's CPU clock is not read (BenchmarkGocoderShapes' cpu-GMAC/s then
// counts time the thread waited).
func threadCPU() time.Duration { return time.Duration(time.Now().UnixNano()) }
