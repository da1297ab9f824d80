//go:build !amd64 || purego

package machine

// useAVX2 is always false here: the kernels run their portable Go paths.
var useAVX2 = false

func streamSumAVX2(p *float32, n int) float32 { panic("machine: no AVX2 on this platform") }
func fmaPeakAVX2(iters int) float32           { panic("machine: no AVX2 on this platform") }
