//go:build unix && !linux

package serve

import (
	"runtime"
	"syscall"
)

// processMemory returns 0 for the resident set now (no portable call gives it without cgo) and the peak from
// getrusage, whose ru_maxrss is in bytes on Darwin and in kilobytes on the BSDs.
func processMemory() (rss, peak int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	peak = int64(ru.Maxrss)
	if runtime.GOOS != "darwin" && runtime.GOOS != "ios" {
		peak <<= 10
	}
	return 0, peak
}
