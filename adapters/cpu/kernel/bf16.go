package kernel

import "math"

// BF16ToF32 widens one bfloat16 value (exact).
func BF16ToF32(v uint16) float32 { return math.Float32frombits(uint32(v) << 16) }

// F32ToBF16 rounds to the nearest bfloat16, ties to even; NaN stays a quiet NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// WidenBF16 converts src into dst[:len(src)] (exact).
func WidenBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	i := 0
	for ; i+4 <= len(src); i += 4 {
		s := src[i : i+4 : i+4]
		d := dst[i : i+4 : i+4]
		d[0] = math.Float32frombits(uint32(s[0]) << 16)
		d[1] = math.Float32frombits(uint32(s[1]) << 16)
		d[2] = math.Float32frombits(uint32(s[2]) << 16)
		d[3] = math.Float32frombits(uint32(s[3]) << 16)
	}
	for ; i < len(src); i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}
