//go:build amd64 && !purego

package kernel

// The panel kernels (gen_panel.py): R packed input rows against a.npanels panels; see panelArgs and panel.go.

//go:noescape
func panelQ4R1AVX512(a *panelArgs)

//go:noescape
func panelQ4R2AVX512(a *panelArgs)

//go:noescape
func panelQ4R4AVX512(a *panelArgs)

//go:noescape
func panelQ4R8AVX512(a *panelArgs)

//go:noescape
func panelQ4R16AVX512(a *panelArgs)

//go:noescape
func panelQ8R1AVX512(a *panelArgs)

//go:noescape
func panelQ8R2AVX512(a *panelArgs)

//go:noescape
func panelQ8R4AVX512(a *panelArgs)

//go:noescape
func panelQ8R8AVX512(a *panelArgs)

//go:noescape
func panelQ8R16AVX512(a *panelArgs)

// panelKernels holds the kernels by form (4-bit, 8-bit) and R (1, 2, 4, 8, 16).
var panelKernels = [2][5]func(a *panelArgs){
	{panelQ4R1AVX512, panelQ4R2AVX512, panelQ4R4AVX512, panelQ4R8AVX512, panelQ4R16AVX512},
	{panelQ8R1AVX512, panelQ8R2AVX512, panelQ8R4AVX512, panelQ8R8AVX512, panelQ8R16AVX512},
}
