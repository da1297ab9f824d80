//go:build !amd64 || purego

package kernel

// No tile kernels here.
var amxKernels [2][2]func(a *panelArgs)

func amxReady() bool { return false }
