//go:build amd64 && !purego

package kernel

import "golang.org/x/sys/cpu"

// useVNNI selects the fast-mode kernels (AVX512-VNNI VPDPBUSD on top of the AVX-512 set). Tests flip it to
// cover the portable path.
var useVNNI = useAVX512 && cpu.X86.HasAVX512VNNI

// The fast-mode kernels (gen_fast.py): R packed input rows against a.wgroups groups of W weight rows; see
// fastArgs and fast.go.

//go:noescape
func fastQ4R1W1AVX512(a *fastArgs)

//go:noescape
func fastQ4R1W2AVX512(a *fastArgs)

//go:noescape
func fastQ4R2W1AVX512(a *fastArgs)

//go:noescape
func fastQ4R2W2AVX512(a *fastArgs)

//go:noescape
func fastQ4R4W1AVX512(a *fastArgs)

//go:noescape
func fastQ4R4W2AVX512(a *fastArgs)

//go:noescape
func fastQ4R8W1AVX512(a *fastArgs)

//go:noescape
func fastQ4R8W2AVX512(a *fastArgs)

//go:noescape
func fastQ8R1W1AVX512(a *fastArgs)

//go:noescape
func fastQ8R1W2AVX512(a *fastArgs)

//go:noescape
func fastQ8R2W1AVX512(a *fastArgs)

//go:noescape
func fastQ8R2W2AVX512(a *fastArgs)

//go:noescape
func fastQ8R4W1AVX512(a *fastArgs)

//go:noescape
func fastQ8R4W2AVX512(a *fastArgs)

//go:noescape
func fastQ8R8W1AVX512(a *fastArgs)

//go:noescape
func fastQ8R8W2AVX512(a *fastArgs)

// quantizeFastQ4AVX512 and quantizeFastQ8AVX512 are quantizeFastGo (nibble and byte form) for groups groups
// of gs floats: records stride bytes apart from dst, group sums at xs.

//go:noescape
func quantizeFastQ4AVX512(dst *byte, stride int, xs, x *float32, groups, gs int)

//go:noescape
func quantizeFastQ8AVX512(dst *byte, stride int, xs, x *float32, groups, gs int)

// quantizeFastPairQ4AVX512 and quantizeFastPairQ8AVX512 are quantizeFastBlocksGo with pair (one step per 64
// inputs); gs a multiple of 64.

//go:noescape
func quantizeFastPairQ4AVX512(dst *byte, stride int, xs, x *float32, groups, gs int)

//go:noescape
func quantizeFastPairQ8AVX512(dst *byte, stride int, xs, x *float32, groups, gs int)

// fastKernels holds the kernels by form (nibble, byte), R (1, 2, 4, 8) and W - 1.
var fastKernels = [2][4][2]func(a *fastArgs){
	{
		{fastQ4R1W1AVX512, fastQ4R1W2AVX512},
		{fastQ4R2W1AVX512, fastQ4R2W2AVX512},
		{fastQ4R4W1AVX512, fastQ4R4W2AVX512},
		{fastQ4R8W1AVX512, fastQ4R8W2AVX512},
	},
	{
		{fastQ8R1W1AVX512, fastQ8R1W2AVX512},
		{fastQ8R2W1AVX512, fastQ8R2W2AVX512},
		{fastQ8R4W1AVX512, fastQ8R4W2AVX512},
		{fastQ8R8W1AVX512, fastQ8R8W2AVX512},
	},
}

// useFastAVX2 selects the AVX2 fast-mode kernels (gen_fast_avx2.py) where VNNI is missing. They give the same
// bits as the VNNI kernels and the portable path. Tests flip it to cover the portable path.
var useFastAVX2 = useAVX2

// The AVX2 fast-mode kernels: R packed input rows against a.wrows weight rows; see fastArgs2.

//go:noescape
func fastQ4R1AVX2(a *fastArgs2)

//go:noescape
func fastQ4R2AVX2(a *fastArgs2)

//go:noescape
func fastQ4R4AVX2(a *fastArgs2)

//go:noescape
func fastQ8R1AVX2(a *fastArgs2)

//go:noescape
func fastQ8R2AVX2(a *fastArgs2)

//go:noescape
func fastQ8R4AVX2(a *fastArgs2)

// quantizeFastQ4AVX2 and quantizeFastQ8AVX2 are quantizeFastGo (nibble and byte form) on AVX2; arguments as
// quantizeFastQ4AVX512's.

//go:noescape
func quantizeFastQ4AVX2(dst *byte, stride int, xs, x *float32, groups, gs int)

//go:noescape
func quantizeFastQ8AVX2(dst *byte, stride int, xs, x *float32, groups, gs int)
