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

//go:noescape
func panelPairQ4R1AVX512(a *panelArgs)

//go:noescape
func panelPairQ4R2AVX512(a *panelArgs)

//go:noescape
func panelPairQ4R4AVX512(a *panelArgs)

//go:noescape
func panelPairQ4R8AVX512(a *panelArgs)

//go:noescape
func panelPairQ8R1AVX512(a *panelArgs)

//go:noescape
func panelPairQ8R2AVX512(a *panelArgs)

//go:noescape
func panelPairQ8R4AVX512(a *panelArgs)

//go:noescape
func panelPairQ8R8AVX512(a *panelArgs)

// panelPairKernels holds the kernels of 64-input blocks (the quantizer's pair form) by form and R (1, 2, 4, 8).
var panelPairKernels = [2][4]func(a *panelArgs){
	{panelPairQ4R1AVX512, panelPairQ4R2AVX512, panelPairQ4R4AVX512, panelPairQ4R8AVX512},
	{panelPairQ8R1AVX512, panelPairQ8R2AVX512, panelPairQ8R4AVX512, panelPairQ8R8AVX512},
}

// panelKernels holds the kernels by form (4-bit, 8-bit) and R (1, 2, 4, 8, 16).
var panelKernels = [2][5]func(a *panelArgs){
	{panelQ4R1AVX512, panelQ4R2AVX512, panelQ4R4AVX512, panelQ4R8AVX512, panelQ4R16AVX512},
	{panelQ8R1AVX512, panelQ8R2AVX512, panelQ8R4AVX512, panelQ8R8AVX512, panelQ8R16AVX512},
}
