//go:build !amd64 || purego

package kernel

// No tile kernels here.
var (
	amxReady   = false
	amxKernels [2][2]func(a *panelArgs)
)
