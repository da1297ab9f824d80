package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	allBits   = []int{2, 3, 4, 5, 6, 8}
	allGroups = []int{32, 64, 128}
)

func TestSpecValidate(t *testing.T) {
	for _, b := range allBits {
		for _, g := range allGroups {
			assert.NoError(t, Spec{Bits: b, GroupSize: g}.Validate())
		}
	}
	for _, s := range []Spec{{1, 64}, {7, 64}, {16, 64}, {4, 16}, {4, 0}, {0, 0}, {4, 256}} {
		assert.Error(t, s.Validate(), "%v", s)
	}
	err := Spec{Bits: 7, GroupSize: 48}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bits 7")
	assert.Contains(t, err.Error(), "group_size 48")
}

// The 3- and 6-bit words below were computed by hand from the bit-stream rule (code j at bits [j·b, j·b+b) of
// the row, lowest first; MLX packs 8 three-bit codes into 3 bytes and 4 six-bit codes into 3 bytes the same
// way). Example check for 3 bits: codes 3,0,5 fill bits 0..8 as 101_000_011 = 0x143, the low 9 bits of 0x43c67543;
// code 10 (value 5 = 101) sits at bits 30..32, straddling words 0 and 1 (bits 30,31 of word 0 are 01, bit 0 of
// word 1 is 1).
func TestCodeHandComputed(t *testing.T) {
	t.Run("3 bits", func(t *testing.T) {
		words := []uint32{0x43c67543, 0x7543c675, 0xc67543c6}
		for j := range 32 {
			assert.Equal(t, uint32((5*j+3)%8), Code(words, j, 3), "code %d", j)
		}
		assert.Equal(t, uint32(5), Code(words, 10, 3), "straddling code")
	})
	t.Run("6 bits", func(t *testing.T) {
		words := []uint32{0x1fe95c0b, 0xd6333a91, 0xd91b078b}
		for j := range 16 {
			assert.Equal(t, uint32((37*j+11)%64), Code(words, j, 6), "code %d", j)
		}
		// Code 5 (value 4) occupies bits 30..35: bits 30,31 of word 0 are 00 (0x1f… top bits 00), bits 0..3 of
		// word 1 are 0001.
		assert.Equal(t, uint32(4), Code(words, 5, 6))
	})
	t.Run("4 bits", func(t *testing.T) {
		// 8 codes per word, code j%8 at bits 4·(j%8).
		words := []uint32{0x76543210, 0xfedcba98}
		for j := range 16 {
			assert.Equal(t, uint32(j), Code(words, j, 4))
		}
	})
}

func TestPutCodeInvertsCode(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, b := range allBits {
		n := 128
		codes := make([]uint32, n)
		row := make([]uint32, n*b/32)
		for j := range codes {
			codes[j] = uint32(rng.IntN(1 << b))
			putCode(row, j, b, codes[j])
		}
		for j := range codes {
			require.Equal(t, codes[j], Code(row, j, b), "bits %d code %d", b, j)
		}
	}
}

func TestDequantizeRowHandExample(t *testing.T) {
	spec := Spec{Bits: 3, GroupSize: 32}
	words := []uint32{0x43c67543, 0x7543c675, 0xc67543c6}
	dst := make([]float32, 32)
	require.NoError(t, DequantizeRow(dst, words, []float32{0.5}, []float32{-1}, spec))
	for j := range 32 {
		assert.Equal(t, 0.5*float32((5*j+3)%8)-1, dst[j])
	}
}

func TestPackDequantRoundTrip(t *testing.T) {
	for _, b := range allBits {
		for _, g := range allGroups {
			spec := Spec{Bits: b, GroupSize: g}
			t.Run(spec.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(b), uint64(g)))
				rows, in := 3, 2*g
				w := make([]float32, rows*in)
				for i := range w {
					w[i] = float32(rng.NormFloat64())
				}
				// A constant group must come back exactly.
				for j := range g {
					w[j] = 0.75
				}
				packed, scales, biases, err := Pack(w, rows, in, spec)
				require.NoError(t, err)
				require.Len(t, packed, rows*in*b/32)
				require.Len(t, scales, rows*in/g)
				require.Len(t, biases, rows*in/g)
				_, _, err = CheckShapes([]int{rows, in * b / 32}, []int{rows, in / g}, []int{rows, in / g}, spec)
				require.NoError(t, err)

				got := make([]float32, rows*in)
				require.NoError(t, Dequantize(got, packed, scales, biases, rows, in, spec))
				for i := range w {
					grp := i / g
					tol := float64(scales[grp])/2 + 1e-6*math.Abs(float64(w[i])) + 1e-6
					require.InDelta(t, w[i], got[i], tol, "element %d", i)
				}
				for j := range g {
					assert.Equal(t, float32(0.75), got[j])
				}
				// Each group's extremes are representable: min exactly, max within rounding of scale·levels.
				for grp := range scales {
					lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
					for _, v := range w[grp*g : (grp+1)*g] {
						lo, hi = min(lo, v), max(hi, v)
					}
					assert.Equal(t, lo, biases[grp])
					assert.InDelta(t, hi, biases[grp]+scales[grp]*float32(int(1)<<b-1), 1e-5)
				}
				// Quantizing the dequantized values again reproduces the codes (idempotence of the grid).
				packed2, _, _, err := Pack(got, rows, in, spec)
				require.NoError(t, err)
				assert.Equal(t, packed, packed2)
			})
		}
	}
}

func TestPackRejects(t *testing.T) {
	_, _, _, err := PackRow(make([]float32, 48), Spec{4, 32})
	require.ErrorIs(t, err, ErrShape)
	_, _, _, err = PackRow(append(make([]float32, 31), float32(math.NaN())), Spec{4, 32})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "non-finite")
	_, _, _, err = Pack(make([]float32, 64), 3, 32, Spec{4, 32})
	require.ErrorIs(t, err, ErrShape)
	_, _, _, err = PackRow(make([]float32, 32), Spec{7, 32})
	require.Error(t, err)
}

func TestDequantizeRowRejectsLengths(t *testing.T) {
	spec := Spec{Bits: 4, GroupSize: 32}
	dst := make([]float32, 64)
	tests := []struct {
		name                 string
		words, nScale, nBias int
		dst                  []float32
	}{
		{"short packed", 7, 2, 2, dst},
		{"long packed", 9, 2, 2, dst},
		{"short scales", 8, 1, 2, dst},
		{"short biases", 8, 2, 1, dst},
		{"dst not group multiple", 8, 2, 2, make([]float32, 48)},
		{"empty dst", 0, 0, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := DequantizeRow(tc.dst, make([]uint32, tc.words), make([]float32, tc.nScale), make([]float32, tc.nBias), spec)
			require.ErrorIs(t, err, ErrShape)
		})
	}
	err := Dequantize(make([]float32, 64), make([]uint32, 8), make([]float32, 2), make([]float32, 2), 2, 64, spec)
	require.ErrorIs(t, err, ErrShape)
}

func TestCheckShapes(t *testing.T) {
	s4 := Spec{Bits: 4, GroupSize: 64}
	s3 := Spec{Bits: 3, GroupSize: 32}
	tests := []struct {
		name    string
		w, s, b []int
		spec    Spec
		out, in int
		wantErr string
	}{
		{"linear 4-bit", []int{2560, 320}, []int{2560, 40}, []int{2560, 40}, s4, 2560, 2560, ""},
		{"linear 3-bit", []int{16, 12}, []int{16, 4}, []int{16, 4}, s3, 16, 128, ""},
		{"experts", []int{512, 512, 256}, []int{512, 512, 32}, []int{512, 512, 32}, s4, 512, 2048, ""},
		{"biases nil", []int{8, 8}, []int{8, 1}, nil, s4, 8, 64, ""},
		{"packed cols wrong", []int{2560, 321}, []int{2560, 40}, []int{2560, 40}, s4, 0, 0, "needs 320 packed words"},
		{"rows differ", []int{10, 8}, []int{11, 1}, []int{11, 1}, s4, 0, 0, "differ in dimension 0"},
		{"experts differ", []int{4, 8, 8}, []int{5, 8, 1}, []int{5, 8, 1}, s4, 0, 0, "differ in dimension 0"},
		{"biases differ", []int{8, 8}, []int{8, 1}, []int{8, 2}, s4, 0, 0, "biases shape"},
		{"rank 1", []int{8}, []int{8}, nil, s4, 0, 0, "want [out"},
		{"rank mismatch", []int{8, 8}, []int{1, 8, 1}, nil, s4, 0, 0, "rank differs"},
		{"zero dim", []int{0, 8}, []int{0, 1}, nil, s4, 0, 0, "non-positive"},
		{"no groups", []int{8, 8}, []int{8, 0}, nil, s4, 0, 0, "no groups"},
		{"bad spec", []int{8, 8}, []int{8, 1}, nil, Spec{Bits: 7, GroupSize: 64}, 0, 0, "bits 7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, in, err := CheckShapes(tc.w, tc.s, tc.b, tc.spec)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.out, out)
			assert.Equal(t, tc.in, in)
		})
	}
}

func TestPackedCols(t *testing.T) {
	for _, b := range allBits {
		for _, g := range allGroups {
			n, err := Spec{b, g}.PackedCols(4 * g)
			require.NoError(t, err)
			assert.Equal(t, 4*g*b/32, n, fmt.Sprint(b, g))
		}
	}
	_, err := Spec{4, 64}.PackedCols(32)
	require.ErrorIs(t, err, ErrShape)
}

func BenchmarkDequantizeRow4(b *testing.B) {
	spec := Spec{Bits: 4, GroupSize: 64}
	in := 4096
	w := make([]float32, in)
	for i := range w {
		w[i] = float32(i%17) - 8
	}
	p, s, bi, err := PackRow(w, spec)
	require.NoError(b, err)
	dst := make([]float32, in)
	for b.Loop() {
		_ = DequantizeRow(dst, p, s, bi, spec)
	}
}
