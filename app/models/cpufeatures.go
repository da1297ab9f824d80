package models

import (
	"runtime"
	"strings"

	"golang.org/x/sys/cpu"
)

// CPUFeatures are the vector and matrix extensions the running machine reports (golang.org/x/sys/cpu), printed
// beside the kernel costs so a figure can be read against what the kernels could use. On other architectures
// than amd64 every x86 flag is false.
type CPUFeatures struct {
	Arch       string `json:"arch"`
	Threads    int    `json:"threads"` // GOMAXPROCS
	AVX2       bool   `json:"avx2"`
	FMA        bool   `json:"fma"`
	AVX512F    bool   `json:"avx512f"`
	AVX512VL   bool   `json:"avx512vl"`
	AVX512BW   bool   `json:"avx512bw"`
	AVX512VNNI bool   `json:"avx512vnni"`
	AVXVNNI    bool   `json:"avxvnni"`
	AVX512BF16 bool   `json:"avx512bf16"`
	AMXTile    bool   `json:"amx_tile"`
	AMXInt8    bool   `json:"amx_int8"`
	AMXBF16    bool   `json:"amx_bf16"`
}

// DetectCPUFeatures reads the running machine's features.
func DetectCPUFeatures() CPUFeatures {
	x := cpu.X86
	return CPUFeatures{Arch: runtime.GOARCH, Threads: runtime.GOMAXPROCS(0),
		AVX2: x.HasAVX2, FMA: x.HasFMA, AVX512F: x.HasAVX512F, AVX512VL: x.HasAVX512VL, AVX512BW: x.HasAVX512BW,
		AVX512VNNI: x.HasAVX512VNNI, AVXVNNI: x.HasAVXVNNI, AVX512BF16: x.HasAVX512BF16,
		AMXTile: x.HasAMXTile, AMXInt8: x.HasAMXInt8, AMXBF16: x.HasAMXBF16}
}

// String lists the present features ("none" when no listed one is).
func (f CPUFeatures) String() string {
	var on []string
	for _, p := range []struct {
		name string
		has  bool
	}{{"avx2", f.AVX2}, {"fma", f.FMA}, {"avx512f", f.AVX512F}, {"avx512vl", f.AVX512VL}, {"avx512bw", f.AVX512BW},
		{"avx512vnni", f.AVX512VNNI}, {"avxvnni", f.AVXVNNI}, {"avx512bf16", f.AVX512BF16},
		{"amx_tile", f.AMXTile}, {"amx_int8", f.AMXInt8}, {"amx_bf16", f.AMXBF16}} {
		if p.has {
			on = append(on, p.name)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, " ")
}
