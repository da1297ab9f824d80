package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func randVec(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

// quantFixture builds a random quantized [out,in] matrix and its exact dequantized float64 copy.
func quantFixture(r *rand.Rand, out, in, bits, group int) (Quant, []float64) {
	ng := in / group
	q := Quant{Bits: bits, Group: group, Codes: make([]uint32, out*in*bits/32),
		Scales: make([]float32, out*ng), Biases: make([]float32, out*ng)}
	deq := make([]float64, out*in)
	codes := make([]uint8, in)
	for o := range out {
		for j := range codes {
			codes[j] = uint8(r.IntN(1 << bits))
		}
		PackCodes(q.Codes[o*in*bits/32:(o+1)*in*bits/32], codes, bits)
		for g := range ng {
			q.Scales[o*ng+g] = (r.Float32() + 0.1) / float32(int(1)<<bits)
			q.Biases[o*ng+g] = -r.Float32() * 0.5
		}
		for j := range in {
			deq[o*in+j] = float64(q.Scales[o*ng+j/group])*float64(codes[j]) + float64(q.Biases[o*ng+j/group])
		}
	}
	return q, deq
}

// naive is the float64 reference product; it also returns Σ|x||w| per element for relative tolerances.
func naive(w []float64, x []float32, rows, out, in int) (y, mag []float64) {
	y, mag = make([]float64, rows*out), make([]float64, rows*out)
	for r := range rows {
		for o := range out {
			for j := range in {
				y[r*out+o] += float64(x[r*in+j]) * w[o*in+j]
				mag[r*out+o] += math.Abs(float64(x[r*in+j]) * w[o*in+j])
			}
		}
	}
	return y, mag
}

func TestPackUnpackRoundTrip(t *testing.T) { bothPaths(t, testPackUnpackRoundTrip) }

func testPackUnpackRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		// The vector unpacking reads 8 bytes per block of 8 codes, so a row ends in a scalar tail of the
		// blocks whose read would pass the row (3 of the 4 blocks of 32 2-bit codes).
		for _, in := range []int{32, 64, 128, 352} {
			codes, words := randomPacked(r, bits, in)
			got := make([]float32, in)
			UnpackCodes(got, words, bits, in)
			for j := range in {
				require.Equal(t, float32(codes[j]), got[j], "bits %d in %d code %d", bits, in, j)
			}
		}
	}
	// The byte widening of 2, 3, 5 and 6 bits (AVX-512 blocks, then the scalar tail) gives the same codes.
	for _, bits := range []int{2, 3, 5, 6} {
		for _, in := range []int{32, 64, 352} {
			codes, words := randomPacked(r, bits, in)
			got := make([]byte, in)
			unpackCodesBytes(got, words, bits)
			require.Equal(t, codes, got, "bits %d in %d", bits, in)
		}
	}
	// A hand-checked 4-bit word: code j%8 sits at bits 4·(j%8).
	got := make([]float32, 8)
	UnpackCodes(got, []uint32{0x76543210}, 4, 8)
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7}, got)
}

// randomPacked returns in random bits-bit codes and their packed row.
func randomPacked(r *rand.Rand, bits, in int) ([]uint8, []uint32) {
	codes := make([]uint8, in)
	for j := range codes {
		codes[j] = uint8(r.IntN(1 << bits))
	}
	words := make([]uint32, in*bits/32)
	PackCodes(words, codes, bits)
	return codes, words
}

// bothPaths runs f with every kernel set this CPU has: the AVX-512 tiles, AVX2 alone, and the portable ones.
func bothPaths(t *testing.T, f func(t *testing.T)) {
	saved, saved512 := useAVX2, useAVX512
	defer func() { useAVX2, useAVX512 = saved, saved512 }()
	if saved512 {
		t.Run("avx512", f)
	}
	useAVX512 = false
	if saved {
		t.Run("avx2", f)
	}
	useAVX2 = false
	t.Run("portable", f)
}

func TestLinearMatchesFloat64Reference(t *testing.T) { bothPaths(t, testLinearMatchesFloat64Reference) }

func testLinearMatchesFloat64Reference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const out, in = 37, 256
	x := randVec(r, 34*in, 1)
	w32 := randVec(r, out*in, 0.5)
	w64 := make([]float64, len(w32))
	bf := make([]uint16, len(w32))
	bf64 := make([]float64, len(w32))
	for i, v := range w32 {
		w64[i] = float64(v)
		bf[i] = F32ToBF16(v)
		bf64[i] = float64(BF16ToF32(bf[i]))
	}
	type tc struct {
		name string
		lin  func() (*Linear, error)
		ref  []float64
	}
	cases := []tc{
		{"f32", func() (*Linear, error) { return NewF32(out, in, w32) }, w64},
		{"bf16", func() (*Linear, error) { return NewBF16(out, in, bf) }, bf64},
	}
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, g := range []int{32, 64, 128} {
			q, deq := quantFixture(r, out, in, bits, g)
			cases = append(cases, tc{fmt.Sprintf("q%d-g%d", bits, g), func() (*Linear, error) { return NewQuant(out, in, q) }, deq})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := c.lin()
			require.NoError(t, err)
			for _, rows := range []int{1, 3, 16} {
				want, mag := naive(c.ref, x, rows, out, in)
				got := make([]float32, rows*out)
				l.Forward(got, x, rows)
				for i := range got {
					assert.InDelta(t, want[i], float64(got[i]), 1e-5*mag[i]+1e-7, "rows %d elem %d", rows, i)
				}
			}
			// Row() dequantizes exactly what the product uses.
			row := make([]float32, in)
			l.Row(row, 5)
			for j := range in {
				assert.InDelta(t, c.ref[5*in+j], float64(row[j]), 1e-6*math.Abs(c.ref[5*in+j])+1e-7)
			}
		})
	}
}

// Bit-identity: one block call equals row-by-row calls, for every worker count.
func TestLinearDeterministic(t *testing.T) { bothPaths(t, testLinearDeterministic) }

func testLinearDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const out, in, rows = 301, 512, 16
	x := randVec(r, rows*in, 1)
	q, _ := quantFixture(r, out, in, 4, 64)
	q8, _ := quantFixture(r, out, in, 8, 32)
	q3, _ := quantFixture(r, out, in, 3, 128)
	bf := make([]uint16, out*in)
	for i, v := range randVec(r, out*in, 1) {
		bf[i] = F32ToBF16(v)
	}
	lf, err := NewF32(out, in, randVec(r, out*in, 1))
	require.NoError(t, err)
	lb, err := NewBF16(out, in, bf)
	require.NoError(t, err)
	lq, err := NewQuant(out, in, q)
	require.NoError(t, err)
	lq8, err := NewQuant(out, in, q8)
	require.NoError(t, err)
	lq3, err := NewQuant(out, in, q3)
	require.NoError(t, err)
	for _, l := range []*Linear{lf, lb, lq, lq8, lq3} {
		l.Pool = NewPool(1)
		ref := make([]float32, rows*out)
		l.Forward(ref, x, rows)
		for _, threads := range []int{2, 3, 4, 7} {
			l.Pool = NewPool(threads)
			got := make([]float32, rows*out)
			l.Forward(got, x, rows)
			assertBits(t, ref, got, "%v threads %d", l.Format(), threads)
			for row := range rows {
				one := make([]float32, out)
				l.Forward(one, x[row*in:(row+1)*in], 1)
				assertBits(t, ref[row*out:(row+1)*out], one, "%v row %d alone", l.Format(), row)
			}
		}
	}
}

func assertBits(t *testing.T, want, got []float32, msg string, args ...any) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("%s: element %d differs: %v vs %v", fmt.Sprintf(msg, args...), i, want[i], got[i])
		}
	}
}

func TestLinearRowsView(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const out, in = 8, 64
	q, _ := quantFixture(r, out, in, 3, 32)
	l, err := NewQuant(out, in, q)
	require.NoError(t, err)
	v, err := l.Rows(2, 5)
	require.NoError(t, err)
	a, b := make([]float32, in), make([]float32, in)
	l.Row(a, 3)
	v.Row(b, 1)
	assert.Equal(t, a, b)
	_, err = l.Rows(4, 9)
	assert.Error(t, err)
}

func TestConstructorsRejectBadShapes(t *testing.T) {
	_, err := NewF32(2, 3, make([]float32, 5))
	assert.Error(t, err)
	_, err = NewBF16(2, 3, make([]uint16, 7))
	assert.Error(t, err)
	_, err = NewQuant(2, 64, Quant{Bits: 7, Group: 64})
	assert.Error(t, err)
	_, err = NewQuant(2, 64, Quant{Bits: 4, Group: 64, Codes: make([]uint32, 3), Scales: make([]float32, 2), Biases: make([]float32, 2)})
	assert.Error(t, err)
}

func TestBF16Rounding(t *testing.T) {
	assert.Equal(t, uint16(0x3f80), F32ToBF16(1))
	// 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down to 1).
	assert.Equal(t, uint16(0x3f80), F32ToBF16(1+1.0/256))
	assert.Equal(t, uint16(0x3f82), F32ToBF16(1+3.0/256))
	assert.True(t, math.IsNaN(float64(BF16ToF32(F32ToBF16(float32(math.NaN()))))))
}

func TestPoolCoversRange(t *testing.T) {
	for _, threads := range []int{1, 2, 5} {
		for _, n := range []int{0, 1, 7, 100} {
			seen := make([]int32, n)
			NewPool(threads).For(n, 1, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					seen[i]++
				}
			})
			for i := range seen {
				require.Equal(t, int32(1), seen[i])
			}
		}
	}
}

// The f32 and bf16 paths handle lengths that are not a multiple of the vector width, alone and in row pairs.
func TestVectorTails(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 12))
		for _, in := range []int{1, 7, 31, 33, 70} {
			w32 := randVec(r, 3*in, 1)
			bf := make([]uint16, len(w32))
			ref := make([]float64, len(w32))
			for i, v := range w32 {
				bf[i] = F32ToBF16(v)
				ref[i] = float64(BF16ToF32(bf[i]))
			}
			lb, err := NewBF16(3, in, bf)
			require.NoError(t, err)
			lf, err := NewF32(3, in, w32)
			require.NoError(t, err)
			ref32 := make([]float64, len(w32))
			for i, v := range w32 {
				ref32[i] = float64(v)
			}
			x := randVec(r, 3*in, 1)
			for _, c := range []struct {
				l   *Linear
				ref []float64
			}{{lb, ref}, {lf, ref32}} {
				for _, rows := range []int{1, 2, 3} {
					got := make([]float32, 3*rows)
					c.l.Forward(got, x, rows)
					want, mag := naive(c.ref, x, rows, 3, in)
					for i := range got {
						assert.InDelta(t, want[i], float64(got[i]), 1e-6*mag[i]+1e-7, "%v in %d rows %d elem %d", c.l.Format(), in, rows, i)
					}
					one := make([]float32, 3)
					c.l.Forward(one, x[(rows-1)*in:rows*in], 1)
					assertBits(t, got[(rows-1)*3:], one, "%v in %d last row alone", c.l.Format(), in)
				}
			}
		}
	})
}

// Long inputs are processed in row tiles; every element still matches the one-row product bit for bit.
func TestLinearTiledRows(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		const out, in, rows = 9, 2048, 37 // tile = 16 rows at in = 2048
		q, _ := quantFixture(r, out, in, 4, 128)
		bf := make([]uint16, out*in)
		for i, v := range randVec(r, out*in, 1) {
			bf[i] = F32ToBF16(v)
		}
		lf, _ := NewF32(out, in, randVec(r, out*in, 1))
		lb, _ := NewBF16(out, in, bf)
		lq, _ := NewQuant(out, in, q)
		x := randVec(r, rows*in, 1)
		for _, l := range []*Linear{lf, lb, lq} {
			l.Pool = NewPool(2)
			all := make([]float32, rows*out)
			l.Forward(all, x, rows)
			for row := range rows {
				one := make([]float32, out)
				l.Forward(one, x[row*in:(row+1)*in], 1)
				assertBits(t, all[row*out:(row+1)*out], one, "%v row %d", l.Format(), row)
			}
		}
	})
}

// The AVX-512 tiles and the AVX2 kernels run the same operations, so on a CPU with both they agree bit for bit,
// for every row count and for outputs that do not fill a tile; below 4 rows the AVX-512 1 × 4 tiles give the
// one-row kernels' bits.
func TestTilesMatchAVX2(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	defer func() { useAVX512 = true }()
	r := rand.New(rand.NewPCG(15, 16))
	const out, in = 23, 320
	bf := make([]uint16, out*in)
	for i, v := range randVec(r, out*in, 1) {
		bf[i] = F32ToBF16(v)
	}
	lf, _ := NewF32(out, in, randVec(r, out*in, 1))
	lb, _ := NewBF16(out, in, bf)
	hf, _ := f16Fixture(r, out, in)
	lh, _ := NewF16(out, in, hf)
	var ls []*Linear
	for _, bits := range []int{3, 4, 8} {
		q, _ := quantFixture(r, out, in, bits, 32)
		lq, err := NewQuant(out, in, q)
		require.NoError(t, err)
		ls = append(ls, lq)
	}
	x := randVec(r, 34*in, 1)
	defer func() { quantPairs = true }()
	for _, pairs := range []bool{true, false} {
		quantPairs = pairs
		for _, l := range append([]*Linear{lf, lb, lh}, ls...) {
			for _, rows := range []int{1, 2, 3, 4, 5, 8, 11, 16} {
				useAVX512 = true
				a := make([]float32, rows*out)
				l.Forward(a, x, rows)
				useAVX512 = false
				b := make([]float32, rows*out)
				l.Forward(b, x, rows)
				assertBits(t, b, a, "%v rows %d pairs %v", l.Format(), rows, pairs)
				useAVX512, oneByFour = true, false // the one-row kernels, which the 1 × 4 tiles must match
				c := make([]float32, rows*out)
				l.Forward(c, x, rows)
				oneByFour = true
				assertBits(t, c, a, "%v rows %d pairs %v: one-row kernels", l.Format(), rows, pairs)
			}
		}
	}
}

// The pooled element-wise helpers give the serial bits for any worker count.
func TestPoolElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const n, w = 10000, 100
	g, u, z := randVec(r, n, 4), randVec(r, n, 2), randVec(r, n, 3)
	nw := randVec(r, w, 1)
	want := make([]float32, n)
	vecmath.SwiGLU(want, g, u)
	wantN := make([]float32, n)
	vecmath.GatedRMSNorm(wantN, g, z, nw, 1e-6)
	for _, threads := range []int{1, 2, 3, 7} {
		p := NewPool(threads)
		got := make([]float32, n)
		p.SwiGLU(got, g, u)
		assertBits(t, want, got, "SwiGLU threads %d", threads)
		gotN := make([]float32, n)
		p.GatedRMSNorm(gotN, g, z, nw, 1e-6)
		assertBits(t, wantN, gotN, "GatedRMSNorm threads %d", threads)
	}
}

// Long 4/8-bit rows run in several blocks along In (the last one shorter); with the f32/bf16 tiles on the same
// shape, the AVX-512 results equal the AVX2 kernels (and so one-row calls) bit for bit.
func TestBlocksAlongIn(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	defer func() { useAVX512 = true }()
	r := rand.New(rand.NewPCG(19, 20))
	const out, in = 37, 1440 // 45 groups of 32: blocks of 16, 16 and 13 groups for 8 rows
	x := randVec(r, 34*in, 1)
	type tc struct {
		name string
		l    *Linear
		ref  []float64
	}
	var cases []tc
	for _, bits := range []int{4, 8} {
		q, deq := quantFixture(r, out, in, bits, 32)
		l, err := NewQuant(out, in, q)
		require.NoError(t, err)
		cases = append(cases, tc{fmt.Sprintf("q%d", bits), l, deq})
	}
	w32 := randVec(r, out*in, 0.5)
	bf := make([]uint16, len(w32))
	ref32, refbf := make([]float64, len(w32)), make([]float64, len(w32))
	for i, v := range w32 {
		bf[i] = F32ToBF16(v)
		ref32[i], refbf[i] = float64(v), float64(BF16ToF32(bf[i]))
	}
	lf, _ := NewF32(out, in, w32)
	lb, _ := NewBF16(out, in, bf)
	cases = append(cases, tc{"f32", lf, ref32}, tc{"bf16", lb, refbf})
	for _, c := range cases {
		c.l.Pool = NewPool(3)
		for _, rows := range []int{8, 13, 16} {
			useAVX512 = true
			a := make([]float32, rows*out)
			c.l.Forward(a, x, rows)
			useAVX512 = false
			b := make([]float32, rows*out)
			c.l.Forward(b, x, rows)
			assertBits(t, b, a, "%s rows %d", c.name, rows)
			want, mag := naive(c.ref, x, rows, out, in)
			for i := range a {
				require.InDelta(t, want[i], float64(a[i]), 1e-5*mag[i]+1e-7, "%s rows %d elem %d", c.name, rows, i)
			}
		}
	}
}

// Every AVX-512 quantized kernel (one-row kernels, 4/8-row, 4×2 and 16×2 blocks; 2, 3, 5 and 6 bits widened in
// registers or to bytes for the 8-bit ones) gives the AVX2 kernels' bits for every width, group size and row
// count, also on inputs full of signed zeros.
func TestQuantAVX512MatchesAVX2AllGroups(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	defer func() { useAVX512, quantPairs, quant16, quantFused = true, true, true, true }()
	r := rand.New(rand.NewPCG(21, 22))
	// 512 inputs give even group counts; 480, 448 and 896 odd ones for groups of 32, 64 and 128; 64 and 128 a
	// single group (no next group to decode ahead). 13 outputs leave an odd last weight row for every worker
	// split; 1 output is nothing but that row.
	for _, shape := range [][2]int{{13, 512}, {13, 480}, {13, 448}, {13, 896}, {1, 64}, {3, 128}, {5, 32}} {
		out, in := shape[0], shape[1]
		x := randVec(r, 34*in, 1)
		for i := range x {
			switch i % 7 {
			case 0:
				x[i] = 0
			case 3:
				x[i] = float32(math.Copysign(0, -1))
			}
		}
		zeros := make([]float32, 34*in)
		// 2, 3, 5 and 6 bits run the 8-bit kernels on codes widened in registers or to bytes.
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, g := range []int{32, 64, 128} {
				if in%g != 0 {
					continue
				}
				q, _ := quantFixture(r, out, in, bits, g)
				l, err := NewQuant(out, in, q)
				require.NoError(t, err)
				l.Pool = NewPool(2)
				for _, mode := range []struct{ pairs, k16, fused bool }{{true, true, true}, {false, true, false}, {true, false, true}, {false, false, false}} {
					// Without the 16-row kernels the 4- and 8-row ones see blocks of 16 rows too; without the
					// fused decode, 2/3/5/6-bit rows take the byte widening.
					quantPairs, quant16, quantFused = mode.pairs, mode.k16, mode.fused
					for _, xin := range [][]float32{x, zeros} {
						for rows := 1; rows <= 34; rows++ {
							useAVX512 = true
							a := make([]float32, rows*out)
							l.Forward(a, xin, rows)
							useAVX512 = false
							b := make([]float32, rows*out)
							l.Forward(b, xin, rows)
							assertBits(t, b, a, "in %d q%d g%d rows %d %+v", in, bits, g, rows, mode)
						}
					}
				}
			}
		}
	}
}

// groupSums interleaves groups but keeps each group's sequential order (the reference's bias-term inputs).
func TestGroupSums(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, ng := range []int{1, 3, 4, 7, 9} {
		x := randVec(r, ng*32, 100)
		x[0] = float32(math.Copysign(0, -1))
		got := make([]float32, ng)
		groupSums(got, x, 32)
		for g := range ng {
			var s float32
			for _, v := range x[g*32 : (g+1)*32] {
				s += v
			}
			assert.Equal(t, math.Float32bits(s), math.Float32bits(got[g]), "ng %d group %d", ng, g)
		}
	}
}
