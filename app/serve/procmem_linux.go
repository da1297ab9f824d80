package serve

import "os"

// processMemory returns the process's resident set now and its peak, in bytes, from /proc/self/status
// (VmRSS, VmHWM); 0 for what cannot be read.
func processMemory() (rss, peak int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	rss, peak, _ = parseProcStatus(string(b))
	return rss, peak
}
