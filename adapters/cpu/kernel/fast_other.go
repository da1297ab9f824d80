//go:build !amd64 || purego

package kernel

// useVNNI is always false here: the fast mode runs its portable Go path.
var useVNNI = false

// fastKernels is never called without VNNI.
var fastKernels [2][4][2]func(a *fastArgs)

func quantizeFastQ4AVX512(dst *byte, stride int, xs, x *float32, groups, gs int) { noAVX2() }
func quantizeFastQ8AVX512(dst *byte, stride int, xs, x *float32, groups, gs int) { noAVX2() }
func quantizeFastPairQ4AVX512(dst *byte, stride int, xs, x *float32, groups, gs int) {
	noAVX2()
}
func quantizeFastPairQ8AVX512(dst *byte, stride int, xs, x *float32, groups, gs int) {
	noAVX2()
}

// useFastAVX2 is always false here.
var useFastAVX2 = false

func fastQ4R1AVX2(a *fastArgs2) { noAVX2() }
func fastQ4R2AVX2(a *fastArgs2) { noAVX2() }
func fastQ4R4AVX2(a *fastArgs2) { noAVX2() }
func fastQ8R1AVX2(a *fastArgs2) { noAVX2() }
func fastQ8R2AVX2(a *fastArgs2) { noAVX2() }
func fastQ8R4AVX2(a *fastArgs2) { noAVX2() }

func quantizeFastQ4AVX2(dst *byte, stride int, xs, x *float32, groups, gs int) { noAVX2() }
func quantizeFastQ8AVX2(dst *byte, stride int, xs, x *float32, groups, gs int) { noAVX2() }

// panelKernels is never called without VNNI (usePanelAsm is false).
var (
	panelKernels     [2][5]func(a *panelArgs)
	panelPairKernels [2][4]func(a *panelArgs)
)
