//go:build !linux && !darwin

package app

// physicalMemory returns 0 (unknown) where no system call for it is wired.
func physicalMemory() int64 { return 0 }
