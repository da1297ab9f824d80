//go:build amd64 && !purego

package kernel

import "golang.org/x/sys/cpu"

// amxReady is whether this process may run the tile kernels: the CPU has AMX tiles and their int8 products, the
// VNNI panel kernels they pair with, and the OS granted the tile data (amxPermit).
var amxReady = useVNNI && cpu.X86.HasAMXTile && cpu.X86.HasAMXInt8 && amxPermit()

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
