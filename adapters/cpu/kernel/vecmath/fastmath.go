package vecmath

import "math"

// The fast mode's activation functions: float32 arithmetic (a clamped exp with a degree-6 polynomial, one
// correctly rounded division) in place of ModeExact's float64 math.Exp, so they vectorize. Every operation is
// one IEEE float32 operation, written here in Go as the AVX2 kernels run it lane by lane (fastmath_amd64.s),
// so both give the same bits. Each element is computed alone: a row's results do not depend on the rows
// beside it. Relative error against the float64 functions: a few float32 ulps (TestFastActAccuracy).

// The constants of fastExpNeg (gen: see fastmath_amd64.s, which holds the same bit patterns).
const (
	fxHi    = 88.0           // exp's argument is clamped to [fxLo, fxHi]: 2ⁿ stays a normal float
	fxLo    = -86.0          //
	fxLog2e = 1.44269504     // log2(e)
	fxMagic = 1 << 23 * 1.5  // adding and subtracting it rounds to an integer, ties to even
	fxC1    = 0.693359375    // ln 2 split: fxC1 has 9 significant bits, so n·fxC1 is exact
	fxC2    = -2.12194440e-4 // ln 2 − fxC1
	fxP6    = 1.0 / 720      // the Taylor coefficients of exp, highest first
	fxP5    = 1.0 / 120      //
	fxP4    = 1.0 / 24       //
	fxP3    = 1.0 / 6        //
	fxP2    = 0.5            //
	fxOne   = 1.0            //
)

// fastExpNeg returns exp(−x) with the argument clamped to [fxLo, fxHi] (NaN passes through).
func fastExpNeg(x float32) float32 {
	t := -x
	if fxHi < t {
		t = fxHi
	}
	if fxLo > t {
		t = fxLo
	}
	v := float32(t * fxLog2e)
	nf := float32(float32(v+fxMagic) - fxMagic)
	n := int32(nf)
	r := float32(t - float32(nf*fxC1))
	r = float32(r - float32(nf*fxC2))
	p := float32(fxP6)
	p = float32(float32(p*r) + fxP5)
	p = float32(float32(p*r) + fxP4)
	p = float32(float32(p*r) + fxP3)
	p = float32(float32(p*r) + fxP2)
	p = float32(float32(p*r) + fxOne)
	p = float32(float32(p*r) + fxOne)
	return math.Float32frombits(math.Float32bits(p) + uint32(n)<<23)
}

// SiLUFast is the fast mode's x·σ(x): x / (1 + exp(−x)).
func SiLUFast(x float32) float32 { return x / float32(fastExpNeg(x)+1) }

// SigmoidFast is the fast mode's σ(x): 1 / (1 + exp(−x)).
func SigmoidFast(x float32) float32 { return 1 / float32(fastExpNeg(x)+1) }

// SiLUFastInto sets dst[j] = SiLUFast(x[j]) (dst may be x).
func SiLUFastInto(dst, x []float32) {
	x = x[:len(dst)]
	j := 0
	if useAVX2 && len(dst) >= 8 {
		j = len(dst) &^ 7
		siluFastAVX2(&dst[0], &x[0], j)
	}
	for ; j < len(dst); j++ {
		dst[j] = SiLUFast(x[j])
	}
}

// SigmoidFastInto sets dst[j] = SigmoidFast(x[j]) (dst may be x).
func SigmoidFastInto(dst, x []float32) {
	x = x[:len(dst)]
	j := 0
	if useAVX2 && len(dst) >= 8 {
		j = len(dst) &^ 7
		sigmoidFastAVX2(&dst[0], &x[0], j)
	}
	for ; j < len(dst); j++ {
		dst[j] = SigmoidFast(x[j])
	}
}

// SwiGLUFast sets dst[j] = SiLUFast(gate[j])·up[j] (dst may alias gate or up).
func SwiGLUFast(dst, gate, up []float32) {
	gate, up = gate[:len(dst)], up[:len(dst)]
	j := 0
	if useAVX2 && len(dst) >= 8 {
		j = len(dst) &^ 7
		swigluFastAVX2(&dst[0], &gate[0], &up[0], j)
	}
	for ; j < len(dst); j++ {
		dst[j] = SiLUFast(gate[j]) * up[j]
	}
}
