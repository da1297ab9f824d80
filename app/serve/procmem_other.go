//go:build !unix

package serve

// processMemory returns 0 (unknown) where no system call for it is wired.
func processMemory() (rss, peak int64) { return 0, 0 }
