package serve

import "golang.org/x/sys/unix"

// physicalMemory returns the memory this process may use in bytes: the machine's RAM, or the cgroup's memory
// limit where that is smaller (a container); 0 when unknown.
func physicalMemory() int64 {
	var ram int64
	var info unix.Sysinfo_t
	if err := unix.Sysinfo(&info); err == nil {
		ram = int64(info.Totalram) * int64(info.Unit)
	}
	return limitedMemory(ram, cgroupMemoryLimit(cgroupMemoryFiles))
}
