package app

import "golang.org/x/sys/unix"

// physicalMemory returns the machine's RAM in bytes (0 when unknown).
func physicalMemory() int64 {
	var info unix.Sysinfo_t
	if err := unix.Sysinfo(&info); err != nil {
		return 0
	}
	return int64(info.Totalram) * int64(info.Unit)
}
