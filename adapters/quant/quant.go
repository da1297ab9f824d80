// Package quant implements the MLX affine quantization format used by mlx-community checkpoints: per-row
// little-endian bit streams of b-bit codes packed in uint32 words, with one float scale and bias per group of
// GroupSize consecutive inputs (docs/model-math.md#mlx-affine-quantization). It holds the reference dequantizer, a
// quantizer for fixtures, and shape checks; fast kernels live in the backends and are tested against DequantizeRow.
package quant

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrShape is wrapped by CheckShapes and the row functions when tensor shapes or slice lengths disagree.
var ErrShape = errors.New("quantized tensor shape mismatch")

// Spec is one quantization setting: Bits per code and GroupSize inputs per scale/bias pair.
type Spec struct {
	Bits      int `json:"bits"`
	GroupSize int `json:"group_size"`
}

// Validate accepts the settings MLX supports: bits ∈ {2,3,4,5,6,8}, group size ∈ {32,64,128}.
func (s Spec) Validate() error {
	var errs []error
	switch s.Bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		errs = append(errs, fmt.Errorf("quantization bits %d unsupported (want 2, 3, 4, 5, 6 or 8)", s.Bits))
	}
	switch s.GroupSize {
	case 32, 64, 128:
	default:
		errs = append(errs, fmt.Errorf("quantization group_size %d unsupported (want 32, 64 or 128)", s.GroupSize))
	}
	return errors.Join(errs...)
}

func (s Spec) String() string { return fmt.Sprintf("%d-bit/g%d", s.Bits, s.GroupSize) }

// PackedCols returns how many uint32 words hold one row of in codes (in·bits/32), or an error when in is not
// a whole number of groups — every group size is a multiple of 32, which also makes in·bits a multiple of 32.
func (s Spec) PackedCols(in int) (int, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	if in <= 0 || in%s.GroupSize != 0 {
		return 0, fmt.Errorf("%w: %d inputs is not a positive multiple of group size %d", ErrShape, in, s.GroupSize)
	}
	return in * s.Bits / 32, nil
}

// CheckShapes cross-checks the three tensors of one quantized Linear (weight [out, in·bits/32], scales and
// biases [out, in/gs]) or of a stacked expert set (the same with a leading [E]) and returns the logical out and
// in. biasesShape may be nil for callers that only have weight and scales; otherwise it must equal
// scalesShape.
func CheckShapes(weightShape, scalesShape, biasesShape []int, spec Spec) (out, in int, err error) {
	if err := spec.Validate(); err != nil {
		return 0, 0, err
	}
	rank := len(weightShape)
	if rank != 2 && rank != 3 {
		return 0, 0, fmt.Errorf("%w: weight shape %v: want [out, in·bits/32] or [experts, out, in·bits/32]", ErrShape, weightShape)
	}
	if len(scalesShape) != rank {
		return 0, 0, fmt.Errorf("%w: weight shape %v but scales shape %v (rank differs)", ErrShape, weightShape, scalesShape)
	}
	var errs []error
	for i, d := range weightShape {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%w: weight shape %v has a non-positive dimension", ErrShape, weightShape))
			break
		}
		if i < rank-1 && scalesShape[i] != d {
			errs = append(errs, fmt.Errorf("%w: weight shape %v and scales shape %v differ in dimension %d", ErrShape, weightShape, scalesShape, i))
		}
	}
	if biasesShape != nil && !slices.Equal(biasesShape, scalesShape) {
		errs = append(errs, fmt.Errorf("%w: biases shape %v differs from scales shape %v", ErrShape, biasesShape, scalesShape))
	}
	groups := scalesShape[rank-1]
	if groups <= 0 {
		errs = append(errs, fmt.Errorf("%w: scales shape %v has no groups", ErrShape, scalesShape))
	}
	if len(errs) > 0 {
		return 0, 0, errors.Join(errs...)
	}
	out = weightShape[rank-2]
	in = groups * spec.GroupSize
	if got, want := weightShape[rank-1]*32, in*spec.Bits; got != want {
		return 0, 0, fmt.Errorf("%w: weight shape %v with %d groups of %d (%s) needs %d packed words per row, has %d",
			ErrShape, weightShape, groups, spec.GroupSize, spec, want/32, weightShape[rank-1])
	}
	return out, in, nil
}

// Code returns code j (of width bits) from one row's little-endian bit stream: bits [j·b, j·b+b), where word
// w holds stream bits [32w, 32w+32) lowest first. Codes of 3, 5 and 6 bits may straddle two words. The
// caller guarantees j·b+b ≤ 32·len(row).
func Code(row []uint32, j, bits int) uint32 {
	bit := j * bits
	w, s := bit>>5, uint(bit&31)
	v := row[w] >> s
	if int(s)+bits > 32 {
		v |= row[w+1] << (32 - s)
	}
	return v & (1<<uint(bits) - 1)
}

// DequantizeRow writes dst[j] = scales[j/gs]·q_j + biases[j/gs] for one row, in float32 (the reference
// semantics; scales and biases are the stored bf16/f16 values widened exactly). len(dst) is the row's input
// count; packed, scales and biases must hold exactly that row's words and groups, else an error wrapping
// ErrShape (nothing is written).
func DequantizeRow(dst []float32, packed []uint32, scales, biases []float32, spec Spec) error {
	if err := checkRow(len(dst), len(packed), len(scales), len(biases), spec); err != nil {
		return err
	}
	gs := spec.GroupSize
	for g := range scales {
		s, b := scales[g], biases[g]
		for j := g * gs; j < (g+1)*gs; j++ {
			dst[j] = s*float32(Code(packed, j, spec.Bits)) + b
		}
	}
	return nil
}

// Dequantize expands a whole [rows, in] matrix (row-major packed [rows, in·bits/32], scales and biases
// [rows, in/gs]) into dst [rows, in] with DequantizeRow. Stacked experts are rows·E rows.
func Dequantize(dst []float32, packed []uint32, scales, biases []float32, rows, in int, spec Spec) error {
	words, err := spec.PackedCols(in)
	if err != nil {
		return err
	}
	groups := in / spec.GroupSize
	if rows < 0 || len(dst) != rows*in || len(packed) != rows*words || len(scales) != rows*groups || len(biases) != rows*groups {
		return fmt.Errorf("%w: %d rows of %d inputs (%s) need dst %d, packed %d, scales/biases %d; got %d, %d, %d/%d",
			ErrShape, rows, in, spec, rows*in, rows*words, rows*groups, len(dst), len(packed), len(scales), len(biases))
	}
	for r := range rows {
		if err := DequantizeRow(dst[r*in:(r+1)*in], packed[r*words:(r+1)*words], scales[r*groups:(r+1)*groups], biases[r*groups:(r+1)*groups], spec); err != nil {
			return fmt.Errorf("row %d: %w", r, err)
		}
	}
	return nil
}

func checkRow(in, words, nScales, nBiases int, spec Spec) error {
	want, err := spec.PackedCols(in)
	if err != nil {
		return err
	}
	groups := in / spec.GroupSize
	if words != want || nScales != groups || nBiases != groups {
		return fmt.Errorf("%w: a row of %d inputs (%s) needs %d packed words and %d scales/biases; got %d words, %d scales, %d biases",
			ErrShape, in, spec, want, groups, words, nScales, nBiases)
	}
	return nil
}

// PackRow quantizes one row of weights w (len a multiple of GroupSize) into packed codes, scales and biases,
// for fixtures and tests. Per group it uses plain round-to-nearest affine quantization: bias = min,
// scale = (max−min)/(2^b−1), q = clamp(round((w−bias)/scale), 0, 2^b−1); a constant group gets scale 0 and
// bias = the constant, which dequantizes exactly. This is the textbook scheme the brief asks for, NOT
// bit-identical to mlx.core.quantize (which nudges the scale so the larger-magnitude edge is exact and rounds
// scale/bias to the model dtype); the format and DequantizeRow are the same, so fixtures are valid MLX
// checkpoints. Non-finite weights are an error.
func PackRow(w []float32, spec Spec) (packed []uint32, scales, biases []float32, err error) {
	words, err := spec.PackedCols(len(w))
	if err != nil {
		return nil, nil, nil, err
	}
	gs, levels := spec.GroupSize, float64(int(1)<<spec.Bits-1)
	groups := len(w) / gs
	packed = make([]uint32, words)
	scales = make([]float32, groups)
	biases = make([]float32, groups)
	for g := range groups {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range w[g*gs : (g+1)*gs] {
			f := float64(v)
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, nil, nil, fmt.Errorf("quantize: non-finite weight %v in group %d", v, g)
			}
			lo, hi = min(lo, f), max(hi, f)
		}
		scale := float32((hi - lo) / levels)
		scales[g], biases[g] = scale, float32(lo)
		for j := g * gs; j < (g+1)*gs; j++ {
			var q uint32
			if scale > 0 {
				q = uint32(min(max(math.RoundToEven((float64(w[j])-float64(biases[g]))/float64(scale)), 0), levels))
			}
			putCode(packed, j, spec.Bits, q)
		}
	}
	return packed, scales, biases, nil
}

// Pack quantizes a [rows, in] row-major matrix with PackRow, returning packed [rows, in·bits/32] and
// scales/biases [rows, in/gs] (row-major).
func Pack(w []float32, rows, in int, spec Spec) (packed []uint32, scales, biases []float32, err error) {
	words, err := spec.PackedCols(in)
	if err != nil {
		return nil, nil, nil, err
	}
	if rows < 0 || len(w) != rows*in {
		return nil, nil, nil, fmt.Errorf("%w: %d weights for %d rows of %d", ErrShape, len(w), rows, in)
	}
	groups := in / spec.GroupSize
	packed = make([]uint32, 0, rows*words)
	scales = make([]float32, 0, rows*groups)
	biases = make([]float32, 0, rows*groups)
	for r := range rows {
		p, s, b, err := PackRow(w[r*in:(r+1)*in], spec)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("row %d: %w", r, err)
		}
		packed, scales, biases = append(packed, p...), append(scales, s...), append(biases, b...)
	}
	return packed, scales, biases, nil
}

// putCode ORs code q into position j of a zeroed bit stream (the inverse of Code).
func putCode(row []uint32, j, bits int, q uint32) {
	bit := j * bits
	w, s := bit>>5, uint(bit&31)
	row[w] |= q << s
	if int(s)+bits > 32 {
		row[w+1] |= q >> (32 - s)
	}
}
