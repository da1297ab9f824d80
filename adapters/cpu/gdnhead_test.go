package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/model"
)

// headRowByRow is the fast recurrence as one row after another, each row stepping through the block on
// GDNStepFast: the order head's groups of rows (and four-row calls) must reproduce bit for bit.
func headRowByRow(j *gdnJob, h int) {
	Y, C, T, Hv, dk, dv, Dk := j.Y, j.C, j.T, j.Hv, j.dk, j.dv, j.Dk
	o, delta, alpha, beta := j.o, j.delta, j.alpha, j.beta
	src, dst := j.st.s[j.st.cur], j.st.s[1-j.st.cur]
	if j.inPlace {
		dst = src
	}
	kh := h / j.rho
	S := dst[h*dv*dk : (h+1)*dv*dk]
	S0 := src[h*dv*dk : (h+1)*dv*dk]
	for t := range T {
		khat := Y[t*C+Dk+kh*dk : t*C+Dk+(kh+1)*dk]
		qhat := Y[t*C+kh*dk : t*C+(kh+1)*dk]
		a, b := alpha[t*Hv+h], beta[t*Hv+h]
		for i := 0; i < dv; i++ {
			Si := S[i*dk : (i+1)*dk]
			from := Si
			if t == 0 {
				from = S0[i*dk : (i+1)*dk]
			}
			vi := Y[t*C+2*Dk+h*dv+i]
			var di float32
			o[(t*Hv+h)*dv+i], di = vecmath.GDNStepFast(Si, from, khat, qhat, a, b, vi)
			if delta != nil {
				delta[(t*Hv+h)*dv+i] = di
			}
		}
	}
}

func randValues(r *rand.Rand, n int, sc float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * sc
	}
	return v
}

// The fast Gated DeltaNet head (rows in groups, four rows per kernel call where the key dimension allows)
// gives the row-by-row recurrence's outputs, innovations and states bit for bit, in place and taped, for key
// dimensions the four-row kernel takes (32, 64, 128) and one it does not (16), and value dimensions that
// leave partial groups.
func TestFastHeadMatchesRowByRow(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dk := range []int{16, 32, 64, 128} {
		for _, dv := range []int{3, 4, 6, 8, 10, 13, 16, 64} {
			for _, inPlace := range []bool{true, false} {
				Hk, Hv, T := 2, 4, 3
				Dk, Dv := Hk*dk, Hv*dv
				C := 2*Dk + Dv
				Y := randValues(r, T*C, 0.2)
				alpha, beta := randValues(r, T*Hv, 1), randValues(r, T*Hv, 1)
				s0 := randValues(r, Hv*dv*dk, 1)
				var jobs [2]*gdnJob
				for w := range 2 {
					st := &gdnState{s: [2][]float32{append([]float32(nil), s0...), make([]float32, len(s0))}, cur: 0}
					jobs[w] = &gdnJob{st: st, Y: Y, alpha: alpha, beta: beta, o: make([]float32, T*Dv), Hk: Hk, Hv: Hv, dk: dk, dv: dv, Dk: Dk, Dv: Dv, C: C, rho: Hv / Hk, T: T, inPlace: inPlace, fast: true}
					if !inPlace {
						jobs[w].delta = make([]float32, T*Hv*dv)
					}
				}
				for h := range Hv {
					jobs[0].head(h, make([]float32, dk))
					headRowByRow(jobs[1], h)
				}
				eq := func(name string, a, b []float32) {
					for i := range a {
						if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
							t.Fatalf("dk %d dv %d inPlace %v %s[%d]: %v vs %v", dk, dv, inPlace, name, i, a[i], b[i])
						}
					}
				}
				eq("o", jobs[0].o, jobs[1].o)
				eq("s0", jobs[0].st.s[0], jobs[1].st.s[0])
				eq("s1", jobs[0].st.s[1], jobs[1].st.s[1])
				if !inPlace {
					eq("delta", jobs[0].delta, jobs[1].delta)
				}
			}
		}
	}
}

// keyHeadJobs builds two identical Gated DeltaNet jobs over random inputs (conv window, taps, gates' inputs,
// state) for TestKeyHeadMatchesLayerSteps.
func keyHeadJobs(r *rand.Rand, Hk, rho, dk, dv, T int, inPlace, fast bool) [2]*gdnJob {
	const Kc = 4
	Hv := Hk * rho
	Dk, Dv := Hk*dk, Hv*dv
	C := 2*Dk + Dv
	w := &model.DeltaNet[*weight]{
		Conv: &weight{taps: randValues(r, Kc*C, 0.5)}, NegA: &weight{vec: randValues(r, Hv, 1)},
		DtBias:   &weight{vec: randValues(r, Hv, 1)},
		KeyHeads: Hk, ValueHeads: Hv, KeyDim: dk, ValueDim: dv, ConvKernel: Kc,
	}
	X := randValues(r, (Kc-1+T)*C, 1)
	b, araw := randValues(r, T*Hv, 2), randValues(r, T*Hv, 2)
	s0 := randValues(r, Hv*dv*dk, 1)
	var jobs [2]*gdnJob
	for i := range jobs {
		st := &gdnState{conv: make([]float32, (Kc-1)*C), s: [2][]float32{append([]float32(nil), s0...), make([]float32, len(s0))}}
		j := &gdnJob{st: st, w: w, b: act{b, T}, araw: act{araw, T}, X: append([]float32(nil), X...),
			Y: make([]float32, T*C), beta: make([]float32, T*Hv), alpha: make([]float32, T*Hv), o: make([]float32, T*Dv),
			Hk: Hk, Hv: Hv, dk: dk, dv: dv, Kc: Kc, Dk: Dk, Dv: Dv, C: C, rho: rho, T: T, inPlace: inPlace, fast: fast}
		if !inPlace {
			j.delta = make([]float32, T*Hv*dv)
		}
		jobs[i] = j
	}
	// The second job copies the block's projections into its window itself (convWindow with pr set).
	b1 := jobs[1]
	b1.pr = append([]float32(nil), X[(Kc-1)*C:]...)
	for i := (Kc - 1) * C; i < len(b1.X); i++ {
		b1.X[i] = float32(math.NaN())
	}
	return jobs
}

// pass.DeltaNet's one-call form (convWindow over channel ranges: the block into the conv window and the conv;
// then keyHead per key head; then the conv state's shift) computes every value the
// three-step form (conv over all channels, gates, head per value head) computes, bit for bit: read-outs,
// innovations, gates, conv outputs, conv state and recurrent state, in both kernel modes, in place and taped,
// for one-row decode steps and verify blocks.
func TestKeyHeadMatchesLayerSteps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, fast := range []bool{false, true} {
		for _, shape := range []struct{ Hk, rho, dk, dv int }{{2, 2, 16, 8}, {4, 2, 64, 64}, {3, 1, 32, 13}} {
			for _, T := range []int{1, 3, 16} {
				for _, inPlace := range []bool{true, false} {
					jobs := keyHeadJobs(r, shape.Hk, shape.rho, shape.dk, shape.dv, T, inPlace, fast)
					a, b := jobs[0], jobs[1]
					a.conv(0, a.C)
					a.gates()
					for h := range a.Hv {
						a.head(h, make([]float32, a.dk))
					}
					for lo := 0; lo < b.C; lo += 40 { // uneven channel ranges
						b.convWindow(lo, min(lo+40, b.C))
					}
					for g := range b.Hk {
						b.keyHead(g, make([]float32, b.dk))
					}
					copy(b.st.conv, b.X[b.T*b.C:])
					what := fmt.Sprintf("fast %v shape %+v T %d inPlace %v", fast, shape, T, inPlace)
					for _, c := range []struct {
						name string
						x, y []float32
					}{{"o", a.o, b.o}, {"Y", a.Y, b.Y}, {"alpha", a.alpha, b.alpha}, {"beta", a.beta, b.beta},
						{"delta", a.delta, b.delta}, {"conv state", a.st.conv, b.st.conv}, {"window", a.X, b.X},
						{"s0", a.st.s[0], b.st.s[0]}, {"s1", a.st.s[1], b.st.s[1]}} {
						requireBits(t, c.x, c.y, what+": "+c.name)
					}
				}
			}
		}
	}
}
