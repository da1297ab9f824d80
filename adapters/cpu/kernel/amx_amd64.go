//go:build amd64 && !purego

package kernel

import (
	"sync"

	"golang.org/x/sys/cpu"
)

var (
	amxOnce sync.Once
	amxOK   bool
)

// amxReady reports whether this process may run the tile kernels: the CPU has AMX tiles and their int8
// products, the VNNI panel kernels they pair with, and the OS granted the tile data (amxPermit). It asks the
// OS on its first call, not at start-up: the permission is the process's, and once granted Linux refuses
// signal stacks too small for the tile state (cgo code that sets up glibc-sized ones), so a program that
// imports this package but never runs a prefill-sized fast product does not ask.
func amxReady() bool {
	amxOnce.Do(func() { amxOK = useVNNI && cpu.X86.HasAMXTile && cpu.X86.HasAMXInt8 && amxPermit() })
	return amxOK
}

// The tile kernels (gen_amx.py): 16 packed input rows against a.npanels panels, like the panel kernels; a.cfg
// is amxConfig.

//go:noescape
func panelQ4G64AMX(a *panelArgs)

//go:noescape
func panelQ4G128AMX(a *panelArgs)

//go:noescape
func panelQ8G64AMX(a *panelArgs)

//go:noescape
func panelQ8G128AMX(a *panelArgs)

// amxKernels holds the tile kernels by form (4-bit, 8-bit) and group size (amxGroup).
var amxKernels = [2][2]func(a *panelArgs){
	{panelQ4G64AMX, panelQ4G128AMX},
	{panelQ8G64AMX, panelQ8G128AMX},
}
