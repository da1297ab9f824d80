package vecmath

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/viterin/vek/vek32"
)

// RMSNorm normalises each of the len(x)/len(w) rows of x over its last axis and multiplies by w:
// dst = w ⊙ x/sqrt(mean(x²)+eps). dst may alias x. Zero-centred (1+w) weights are folded at load time.
func RMSNorm(dst, x, w []float32, eps float32) {
	n := len(w)
	for r := 0; r+n <= len(x); r += n {
		xr, dr := x[r:r+n], dst[r:r+n]
		inv := rmsInv(xr, eps)
		scaleMul(dr, xr, w, inv)
	}
}

// scaleMul sets dst[j] = w[j]·(x[j]·a), each product rounded (vek's vector multiplies where the CPU has AVX2,
// element for element the same bits as the scalar loop, which a verify block's norms spent most of their time
// in). dst may alias x.
func scaleMul(dst, x, w []float32, a float32) {
	if &dst[0] != &x[0] {
		copy(dst, x)
	}
	vek32.MulNumber_Inplace(dst, a)
	vek32.Mul_Inplace(dst, w)
}

// Dot is vek32.Dot that accepts empty vectors. Its reduction order depends only on len(a).
func Dot(a, b []float32) float32 {
	if len(a) == 0 {
		return 0
	}
	return vek32.Dot(a, b[:len(a)])
}

func rmsInv(x []float32, eps float32) float32 {
	ss := Dot(x, x)
	return float32(1 / math.Sqrt(float64(ss/float32(len(x))+eps)))
}

// GatedRMSNorm is the Gated DeltaNet output norm per row of width len(w): dst = w ⊙ x̂ ⊙ silu(z).
// dst may alias x.
func GatedRMSNorm(dst, x, z, w []float32, eps float32) {
	n := len(w)
	for r := 0; r+n <= len(x); r += n {
		xr, zr, dr := x[r:r+n], z[r:r+n], dst[r:r+n]
		inv := rmsInv(xr, eps)
		for j, v := range xr {
			dr[j] = float32(w[j]*float32(v*inv)) * SiLU(zr[j])
		}
	}
}

// L2Normalize scales x in place to x/sqrt(‖x‖²+eps), then by scale.
func L2Normalize(x []float32, eps, scale float32) {
	inv := float32(1 / math.Sqrt(float64(Dot(x, x)+eps)))
	vek32.MulNumber_Inplace(x, inv)
	vek32.MulNumber_Inplace(x, scale)
}

// Sigmoid is the logistic function, evaluated in float64 and rounded once.
func Sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// SiLU is x·σ(x), evaluated in float64 and rounded once.
func SiLU(x float32) float32 {
	v := float64(x)
	return float32(v / (1 + math.Exp(-v)))
}

// Softplus is the stable max(x,0)+log1p(exp(−|x|)).
func Softplus(x float32) float32 {
	v := float64(x)
	return float32(math.Max(v, 0) + math.Log1p(math.Exp(-math.Abs(v))))
}

// Softmax replaces x by softmax(x) in float32 with max subtraction; the sum runs in index order.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	var s float32
	for j, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[j] = e
		s += e
	}
	inv := 1 / s
	for j := range x {
		x[j] *= inv
	}
}

// SwiGLU writes silu(gate) ⊙ up into dst (dst may alias gate or up).
func SwiGLU(dst, gate, up []float32) {
	for j, g := range gate[:len(dst)] {
		dst[j] = SiLU(g) * up[j]
	}
}

// GatedRMSNormFast is GatedRMSNorm with SiLUFast for SiLU: dst = w ⊙ x̂ ⊙ silu(z), each element's operations
// in GatedRMSNorm's order. dst may alias x.
func GatedRMSNormFast(dst, x, z, w []float32, eps float32) {
	n := len(w)
	var buf [512]float32
	s := buf[:]
	if n > len(s) {
		s = make([]float32, n)
	}
	s = s[:n]
	for r := 0; r+n <= len(x); r += n {
		xr, dr := x[r:r+n], dst[r:r+n]
		inv := rmsInv(xr, eps)
		SiLUFastInto(s, z[r:r+n])
		for j, v := range xr {
			dr[j] = float32(w[j]*float32(v*inv)) * s[j]
		}
	}
}

// Add sets dst[j] += x[j] (one rounding per element).
func Add(dst, x []float32) {
	if len(dst) == 0 {
		return
	}
	vek32.Add_Inplace(dst, x[:len(dst)])
}

// AddInto sets dst[j] = x[j] + y[j] (one rounding per element: Add's result on a copy of x, with one pass
// over memory instead of two).
func AddInto(dst, x, y []float32) {
	if len(dst) == 0 {
		return
	}
	vek32.Add_Into(dst, x[:len(dst)], y[:len(dst)])
}

// Scale sets x[j] *= a (one rounding per element).
func Scale(x []float32, a float32) {
	if len(x) == 0 {
		return
	}
	vek32.MulNumber_Inplace(x, a)
}

// ScaleInto sets dst[j] = a·x[j] (one rounding per element). dst may be x itself but must not partially overlap it.
func ScaleInto(dst, x []float32, a float32) {
	if len(dst) == 0 {
		return
	}
	if &dst[0] == &x[0] {
		vek32.MulNumber_Inplace(dst, a)
		return
	}
	vek32.MulNumber_Into(dst, x[:len(dst)], a)
}

// MulAdd sets dst[j] += x[j]·y[j] with the product rounded before the add (never fused), using tmp (len(dst))
// as scratch.
func MulAdd(dst, x, y, tmp []float32) {
	if len(dst) == 0 {
		return
	}
	vek32.Mul_Into(tmp[:len(dst)], x[:len(dst)], y[:len(dst)])
	vek32.Add_Inplace(dst, tmp[:len(dst)])
}

// AddScaled sets dst[j] += a·x[j] with the product rounded before the add (never fused), using tmp (len(dst))
// as scratch.
func AddScaled(dst, x, tmp []float32, a float32) {
	if len(dst) == 0 {
		return
	}
	x = x[:len(dst)]
	j := 0
	if useAVX2 && len(dst) >= 8 {
		j = len(dst) &^ 7
		addScaledAVX2(&dst[0], &x[0], a, j)
	}
	if j == len(dst) {
		return
	}
	tmp = tmp[:len(dst)-j]
	vek32.MulNumber_Into(tmp, x[j:], a)
	vek32.Add_Inplace(dst[j:], tmp)
}

// DecayRank1 sets S = α·S0 + δ ⊗ k̂ for a state of len(delta) rows of len(khat) values: each element
// float32(α·s0) + float32(δ_i·k̂_j), the bits of ScaleInto(S, S0, α) followed by AddScaled(S_i, k̂, tmp, δ_i) on
// every row, in one pass and one call (a Gated DeltaNet's tape replay runs it per head and step). S may be S0.
func DecayRank1(S, S0 []float32, alpha float32, khat, delta []float32) {
	dk, rows := len(khat), len(delta)
	if rows == 0 || dk == 0 {
		return
	}
	_, _ = S[rows*dk-1], S0[rows*dk-1]
	switch {
	case useAVX512 && dk%16 == 0:
		decayRank1AVX512(&S[0], &S0[0], &khat[0], &delta[0], alpha, rows, dk)
		return
	case useAVX2 && dk%8 == 0:
		decayRank1AVX2(&S[0], &S0[0], &khat[0], &delta[0], alpha, rows, dk)
		return
	}
	for i, d := range delta {
		s, s0 := S[i*dk:(i+1)*dk], S0[i*dk:(i+1)*dk]
		for j, k := range khat {
			s[j] = float32(alpha*s0[j]) + float32(d*k)
		}
	}
}

// Rope holds the inverse frequencies of NeoX rotate-half RoPE over the first Dims dims of a head, and the
// cos/sin tables of the positions asked so far.
type Rope struct {
	Dims    int
	invFreq []float64
	// scale multiplies cos and sin (YaRN's attention factor); 0 means 1.
	scale float64
	// tables caches Table's values: a table per position is 32–128 float64 cos and sin calls, which measured
	// ~8% of a gocoder draft (its 16-row block rotates queries and keys in each layer every round).
	tables *ropeTables
}

// ropeTables holds Table's values for positions [0, n): row pos is cos then sin, Dims/2 each. A table is
// never written once published; asking past its end publishes a larger copy (amortised doubling) up to
// ropeTableBytes, beyond which Table computes.
type ropeTables struct {
	mu  sync.Mutex
	cur atomic.Pointer[[]float32]
}

// ropeTableBytes bounds a Rope's cached table (16K positions of a 128-dim head, 32K of a 64-dim one).
const ropeTableBytes = 8 << 20

// NewRopeFreqs returns RoPE with the given inverse frequencies (Dims = 2·len(invFreq)) whose cos and sin are
// multiplied by scale, as transformers applies a scaled RoPE's attention factor.
func NewRopeFreqs(invFreq []float64, scale float64) *Rope {
	return &Rope{Dims: 2 * len(invFreq), invFreq: append([]float64(nil), invFreq...), scale: scale, tables: &ropeTables{}}
}

// NewRope returns RoPE over r rotary dims (even) with the given base: θ_i = base^(−2i/r).
func NewRope(r int, base float64) *Rope {
	f := make([]float64, r/2)
	for i := range f {
		f[i] = 1 / math.Pow(base, float64(2*i)/float64(r))
	}
	return &Rope{Dims: r, invFreq: f, tables: &ropeTables{}}
}

// Table fills cos/sin (each Dims/2) for absolute position pos; angles in float64, rounded once.
func (r *Rope) Table(cos, sin []float32, pos int) {
	if c, s, ok := r.Angles(pos); ok {
		copy(cos, c)
		copy(sin, s)
		return
	}
	r.compute(cos, sin, pos)
}

// Angles returns Table's cos and sin for pos as views of the cached table (read-only), or ok false past what
// the cache holds (a negative position, or a table beyond ropeTableBytes): then call Table.
func (r *Rope) Angles(pos int) (cos, sin []float32, ok bool) {
	h := len(r.invFreq)
	w := 2 * h
	if pos < 0 || h == 0 || r.tables == nil || pos >= ropeTableBytes/(4*w) {
		return nil, nil, false
	}
	t := r.tables.cur.Load()
	if t == nil || (pos+1)*w > len(*t) {
		t = r.grow(pos + 1)
	}
	row := (*t)[pos*w : (pos+1)*w]
	return row[:h:h], row[h:w:w], true
}

// grow publishes a table of at least n positions (twice the current one, at least 256, at most
// ropeTableBytes) and returns it.
func (r *Rope) grow(n int) *[]float32 {
	c := r.tables
	c.mu.Lock()
	defer c.mu.Unlock()
	h := len(r.invFreq)
	w := 2 * h
	old := c.cur.Load()
	have := 0
	if old != nil {
		have = len(*old) / w
		if have >= n {
			return old
		}
	}
	m := min(max(n, 2*have, 256), ropeTableBytes/(4*w))
	t := make([]float32, m*w)
	if old != nil {
		copy(t, *old)
	}
	for pos := have; pos < m; pos++ {
		row := t[pos*w : (pos+1)*w]
		r.compute(row[:h], row[h:], pos)
	}
	c.cur.Store(&t)
	return &t
}

// compute is Table without the cache.
func (r *Rope) compute(cos, sin []float32, pos int) {
	if r.scale != 0 && r.scale != 1 {
		for i, f := range r.invFreq {
			a := float64(pos) * f
			cos[i] = float32(math.Cos(a) * r.scale)
			sin[i] = float32(math.Sin(a) * r.scale)
		}
		return
	}
	for i, f := range r.invFreq {
		a := float64(pos) * f
		cos[i] = float32(math.Cos(a))
		sin[i] = float32(math.Sin(a))
	}
}

// Apply rotates the first Dims dims of one head vector x with a table from Table; the rest pass through.
func (r *Rope) Apply(x, cos, sin []float32) {
	h := r.Dims / 2
	for i := range h {
		a, b := x[i], x[i+h]
		x[i] = float32(a*cos[i]) - float32(b*sin[i])
		x[i+h] = float32(b*cos[i]) + float32(a*sin[i])
	}
}

// Argmax returns the index of the largest value, the lowest index on ties; NaN never wins. −1 for empty x.
func Argmax(x []float32) int {
	best := -1
	for j, v := range x {
		if v != v {
			continue
		}
		if best < 0 || v > x[best] {
			best = j
		}
	}
	return best
}
