package synth

import (
	"fmt"
	"math"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// minHalfNormal is the smallest normal IEEE half (2^−14). A bfloat16 value at or above it in magnitude (and
// below 65504) is also an exact half: bfloat16 keeps 8 significant bits, half 11.
const minHalfNormal = 1.0 / (1 << 14)

// halfExact rounds v in place to values exact in both bfloat16 and IEEE half: to the nearest bfloat16, with
// magnitudes below 2^−14 (where half loses bits) flushed to zero.
func halfExact(v []float32) {
	for i, x := range v {
		r := safetensors.BF16ToFloat32(safetensors.Float32ToBF16(x))
		if math.Abs(float64(r)) < minHalfNormal {
			r = 0
		}
		v[i] = r
	}
}

// packSymmetric quantizes a [rows, in] matrix like quant.Pack but symmetrically, in the form llama.cpp's
// Q8_0 and Q4_0 store exactly: per group scale = max|w|/(2^(b−1)−1) rounded to a value exact in bfloat16 and
// half (at least 2^−14), code c = clamp(round(w/scale), −2^(b−1), 2^(b−1)−1) + 2^(b−1), bias = −2^(b−1)·scale,
// so scale·c + bias = scale·(c − 2^(b−1)) exactly. Only 4 and 8 bits (Q4_0 and Q8_0) are offered.
func packSymmetric(w []float32, rows, in int, spec quant.Spec) (packed []uint32, scales, biases []float32, err error) {
	if spec.Bits != 4 && spec.Bits != 8 {
		return nil, nil, nil, fmt.Errorf("synth: symmetric quantization needs 4 or 8 bits (Q4_0/Q8_0), not %d", spec.Bits)
	}
	words, err := spec.PackedCols(in)
	if err != nil {
		return nil, nil, nil, err
	}
	if rows < 0 || len(w) != rows*in {
		return nil, nil, nil, fmt.Errorf("%w: %d weights for %d rows of %d", quant.ErrShape, len(w), rows, in)
	}
	gs, zero := spec.GroupSize, 1<<(spec.Bits-1)
	groups := in / gs
	packed = make([]uint32, rows*words)
	scales = make([]float32, rows*groups)
	biases = make([]float32, rows*groups)
	perWord := 32 / spec.Bits
	for r := range rows {
		for g := range groups {
			base := r*in + g*gs
			amax := 0.0
			for _, x := range w[base : base+gs] {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					return nil, nil, nil, fmt.Errorf("synth: non-finite weight %v in row %d", x, r)
				}
				amax = max(amax, math.Abs(float64(x)))
			}
			s := safetensors.BF16ToFloat32(safetensors.Float32ToBF16(float32(amax / float64(zero-1))))
			s = max(s, minHalfNormal)
			scales[r*groups+g], biases[r*groups+g] = s, -float32(zero)*s
			for j := range gs {
				q := math.RoundToEven(float64(w[base+j]) / float64(s))
				c := uint32(int(max(-float64(zero), min(float64(zero-1), q))) + zero)
				k := g*gs + j
				packed[r*words+k/perWord] |= c << (uint(k%perWord) * uint(spec.Bits))
			}
		}
	}
	return packed, scales, biases, nil
}
