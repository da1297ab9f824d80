package vecmath

import "math"

// The 8-bit KV cache's row format (the CPU backend's --kv-bits 8): a row x of one head (HeadDim values) is
// kept as HeadDim int8 codes q and one float32 scale s = max|x| / 127, with q_i = round-half-even(x_i / s)
// clamped to [−127, 127], and read back as x̂_i = float32(q_i)·s (one rounding). The scale is per (position,
// head), so a row's codes depend on that row alone: a key written by a verify block, a prefill chunk or a
// decode step quantizes to the same bits. A row of zeros (or of values below 127 times the smallest float32)
// has scale 0 (every code 0, read back as +0). A row
// holding a NaN or an infinity has scale NaN (codes 0), so every value reads back as NaN and a bad value
// poisons the attention as it would in float32 instead of vanishing.

// QuantizeRow8 writes x's codes into q (len(q) ≥ len(x)) and returns the row's scale.
func QuantizeRow8(q []int8, x []float32) float32 {
	q = q[:len(x)]
	var amax float32
	for _, v := range x {
		if v != v || math.IsInf(float64(v), 0) {
			clear(q)
			return float32(math.NaN())
		}
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	s := amax / 127
	if s == 0 { // zeros, or values so small that the step underflows: read back as zeros
		clear(q)
		return 0
	}
	for i, v := range x {
		// v/s in float32 (one rounding), then round half to even; |v| ≤ amax keeps it within ±127 up to
		// the division's rounding, which the clamp absorbs.
		r := math.RoundToEven(float64(v / s))
		q[i] = int8(max(-127, min(127, r)))
	}
	return s
}

// DequantizeRow8 sets x[i] = float32(q[i])·s for the len(x) values (len(q) ≥ len(x)).
func DequantizeRow8(x []float32, q []int8, s float32) {
	q = q[:len(x)]
	for i, c := range q {
		x[i] = float32(c) * s
	}
}
