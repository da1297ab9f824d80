//go:build !linux && !darwin

package serve

// physicalMemory returns 0 (unknown) where no system call for it is wired.
func physicalMemory() int64 { return 0 }
