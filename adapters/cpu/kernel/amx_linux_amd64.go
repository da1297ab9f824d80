//go:build linux && amd64 && !purego

package kernel

import "syscall"

// Linux hands out AMX's tile data (8 KiB of state per thread) only to processes that ask for it: without the
// permission the first tile instruction faults.
const (
	archReqXcompPerm = 0x1023 // arch_prctl's ARCH_REQ_XCOMP_PERM
	xfeatureTileData = 18     // XFEATURE_XTILEDATA
)

// amxPermit asks the kernel for the tile data once, for the whole process; a refusal (an old kernel, a
// seccomp filter, a sigaltstack too small for the larger signal frames) leaves the VNNI kernels in charge.
func amxPermit() bool {
	_, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureTileData, 0)
	return errno == 0
}
