//go:build !amd64 || purego

package kernel

// useF16C is always false here: only the portable kernels exist on this platform or with the purego tag.
var useF16C = false

func dotF16AVX2(x *float32, w *uint16, n int) float32 { noAVX2(); return 0 }
func widenF16AVX2(dst *float32, src *uint16, n int)   { noAVX2() }
