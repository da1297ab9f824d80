package serve

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cgroupMemoryFiles are where a container's memory limit is read: cgroup v2's memory.max, then v1's
// limit_in_bytes. Inside a container the process's own cgroup is mounted at /sys/fs/cgroup.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// cgroupMemoryLimit is the first limit found in files, in bytes; 0 when none is set or none is readable.
func cgroupMemoryLimit(files []string) int64 {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := parseCgroupLimit(string(b)); err == nil {
			return n
		}
	}
	return 0
}

// parseCgroupLimit reads a cgroup memory limit file's content: a byte count, or "max" for none (0). v1's
// "no limit" is a huge count, which the caller's min with the RAM discards.
func parseCgroupLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup memory limit %q: %w", s, err)
	}
	if n < 0 {
		return 0, fmt.Errorf("cgroup memory limit %d must be ≥ 0", n)
	}
	return n, nil
}

// limitedMemory is ram lowered to the cgroup limit when one is set (either may be 0: unknown or none).
func limitedMemory(ram, limit int64) int64 {
	switch {
	case limit <= 0:
		return ram
	case ram <= 0:
		return limit
	}
	return min(ram, limit)
}
