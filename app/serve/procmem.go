package serve

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// parseProcStatus reads VmRSS and VmHWM ("VmRSS:   123456 kB") from a /proc/PID/status text, in bytes. A
// field that is absent stays 0; one that is present but malformed is an error.
func parseProcStatus(s string) (rss, peak int64, err error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc status %s: %q is not a size in kB", key, strings.TrimSpace(val))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 || n > 1<<53 {
			return 0, 0, fmt.Errorf("/proc status %s: %q is not a size in kB", key, f[0])
		}
		if key == "VmRSS" {
			rss = n << 10
		} else {
			peak = n << 10
		}
	}
	return rss, peak, sc.Err()
}
