//go:build amd64 && !purego && !linux

package kernel

// amxPermit is false off Linux: the tile kernels are only enabled where the process can ask for the tile state
// (arch_prctl), and the VNNI kernels run instead.
func amxPermit() bool { return false }
