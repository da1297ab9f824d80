package vecmath

import (
	"fmt"
	"math"

	"github.com/viterin/vek/vek32"
)

// The fast mode's attention kernels (AVX-512; gen_attn.py). The exact mode computes each (row, head) score
// with Dot and its softmax with float64 exp, one key at a time, which on a long context costs more in calls
// than in arithmetic (a DFlash drafter's rounds attend over the whole context). In the fast mode, on CPUs with
// AVX-512, the heads that share a KV head run together through two kernels: AttnScores (each score a 16-lane
// dot product: lane l sums q[t]·k[t] for t ≡ l mod 16 in order, products rounded before the adds, then the
// lanes summed by halving as tree16, then times the scale) and AttnValues (o[t] += s_p·v_p[t] in key order,
// the product rounded before the add: AddScaled's arithmetic), around SoftmaxFast (fastExpNeg in place of
// float64 exp). Every score and output element is computed alone, so a row's result does not depend on the
// rows or heads beside it; attnScoresGo and attnValuesGo are the same operations in Go.

// useFastAttn selects the fast attention in the CPU backend's fast mode (FastAttention). Tests flip it.
var useFastAttn = useAVX512

// FastAttention reports whether the fast mode runs its attention kernels for head dimension d (AVX-512 and
// d a multiple of 16 up to 256); otherwise it keeps the exact mode's attention.
func FastAttention(d int) bool { return useFastAttn && d%16 == 0 && d > 0 && d <= 256 }

// AttnScores sets s[i·lds + p] = (q_i · k_p)·scale for the nq query heads q_i = q[i·d:(i+1)·d] and the n keys
// k_p = k[p·kstride:p·kstride+d] (d a multiple of 16).
func AttnScores(s []float32, lds int, q []float32, nq int, k []float32, kstride, n, d int, scale float32) {
	checkAttnDim(d)
	if n == 0 || nq == 0 {
		return
	}
	_ = s[(nq-1)*lds+n-1]
	_ = q[nq*d-1]
	_ = k[(n-1)*kstride+d-1]
	if useAVX512 {
		attnScoresAVX512(&s[0], lds, &q[0], nq, &k[0], kstride, n, d, scale)
		return
	}
	attnScoresGo(s, lds, q, nq, k, kstride, n, d, scale)
}

// AttnValues adds Σ_p s[i·lds + p]·v_p, in key order, to o_i = o[i·d:(i+1)·d] for the nq heads, with
// v_p = v[p·vstride:p·vstride+d] (d a multiple of 16, at most 256).
func AttnValues(o, s []float32, lds, nq int, v []float32, vstride, n, d int) {
	checkAttnDim(d)
	if n == 0 || nq == 0 {
		return
	}
	_ = s[(nq-1)*lds+n-1]
	_ = o[nq*d-1]
	_ = v[(n-1)*vstride+d-1]
	if useAVX512 {
		attnValuesAVX512(&o[0], &s[0], lds, nq, &v[0], vstride, n, d)
		return
	}
	attnValuesGo(o, s, lds, nq, v, vstride, n, d)
}

// checkAttnDim panics on a head dimension the kernels do not take (a caller bug: FastAttention says which).
func checkAttnDim(d int) {
	if d <= 0 || d%16 != 0 || d > 256 {
		panic(fmt.Sprintf("kernel: attention head dimension %d is not a multiple of 16 up to 256", d))
	}
}

// SoftmaxFast is Softmax in the fast mode's arithmetic: m = max x (vek32.Max; a row of −Inf gives NaN, as Softmax), y_j = x_j − m, e_j =
// fastExpNeg(−y_j) (an AVX2 vector exp, the same bits lane by lane), the sum of the e_j by vek32.Sum (a fixed
// order for a given length), then each e_j times 1/sum.
func SoftmaxFast(x []float32) {
	if len(x) == 0 {
		return
	}
	m := vek32.Max(x)
	if m <= -math.MaxFloat32 {
		// vek32's AVX2 max starts from −MaxFloat32: a row of −Inf would pass for finite (and come out
		// uniform instead of NaN, as Softmax gives).
		m = x[0]
		for _, v := range x[1:] {
			m = max(m, v)
		}
	}
	j := 0
	if useAVX512 && len(x) >= 16 {
		// The subtraction and the exp in one pass, 16 lanes at a time: each element's operations are the ones
		// below (the same bits), a quarter of the time on a row of a few hundred scores.
		j = len(x) &^ 15
		expSubFastAVX512(&x[0], &x[0], j, m)
	} else {
		vek32.SubNumber_Inplace(x, m)
		m = 0 // subtracted already: x − 0 is x, bit for bit, in the tail below
		if useAVX2 && len(x) >= 8 {
			j = len(x) &^ 7
			expFastAVX2(&x[0], &x[0], j)
		}
	}
	for ; j < len(x); j++ {
		x[j] = fastExpNeg(-(x[j] - m))
	}
	vek32.MulNumber_Inplace(x, 1/vek32.Sum(x))
}

func attnScoresGo(s []float32, lds int, q []float32, nq int, k []float32, kstride, n, d int, scale float32) {
	for p := range n {
		kp := k[p*kstride : p*kstride+d]
		for i := range nq {
			qi := q[i*d : (i+1)*d]
			var acc [16]float32
			for t, v := range qi {
				acc[t%16] += float32(v * kp[t])
			}
			s[i*lds+p] = tree16(&acc) * scale
		}
	}
}

func attnValuesGo(o, s []float32, lds, nq int, v []float32, vstride, n, d int) {
	for i := range nq {
		oi := o[i*d : (i+1)*d]
		for p := range n {
			w := s[i*lds+p]
			for t, x := range v[p*vstride : p*vstride+d] {
				oi[t] += float32(w * x)
			}
		}
	}
}

// tree16 sums 16 lanes by halving: (i, i+8), (i, i+4), (i, i+2), then lanes 0 and 1 (the order of the
// matrix kernels' fast-mode lanes, kernel's tree16).
func tree16(v *[16]float32) float32 {
	for n := 8; n >= 1; n /= 2 {
		for i := range n {
			v[i] += v[i+n]
		}
	}
	return v[0]
}
