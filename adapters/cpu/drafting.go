package cpu

import (
	"math"
	"slices"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ model.DraftBackend[act, *weight] = ops{}

// GroupConv runs on one goroutine: the block is at most a few dozen rows, and every output element is then
// summed in the one fixed order whatever the pool's size.
func (o ops) GroupConv(x, dyn act, base *weight, taps int) act {
	T, H := x.t, x.width()
	G := dyn.width() / taps
	gs := H / G
	out := o.buf(len(x.v))
	for t := range T {
		row := out[t*H : (t+1)*H]
		d := dyn.v[t*taps*G : (t+1)*taps*G]
		for j := range min(taps, t+1) {
			src := x.v[(t-j)*H : (t-j+1)*H]
			b := base.vec[j*H : (j+1)*H]
			for c := range H {
				row[c] += b[c] * src[c]
				row[c] += d[j*G+c/gs] * src[c]
			}
		}
	}
	return act{out, T}
}

// Softcap evaluates tanh in float64.
func (o ops) Softcap(x act, c float32) act {
	out := o.buf(len(x.v))
	cc := float64(c)
	for i, v := range x.v {
		out[i] = float32(cc * math.Tanh(float64(v)/cc))
	}
	return act{out, x.t}
}

// TopK keeps each row's k best in a small sorted list (k is 1 for a greedy draft, 16 for published
// selectors); NaNs are skipped, as vecmath.Argmax does.
func (o ops) TopK(x act, k int) ([]ports.Token, []float32) {
	ids := make([]ports.Token, 0, x.t*k)
	vals := make([]float32, 0, x.t*k)
	bi := make([]ports.Token, 0, k)
	bv := make([]float32, 0, k)
	for r := range x.t {
		bi, bv = bi[:0], bv[:0]
		for j, v := range x.row(r) {
			if v != v || (len(bv) == k && v <= bv[k-1]) {
				continue
			}
			// Insert after every kept value ≥ v: a tie goes behind the lower id already kept.
			p := len(bv)
			for p > 0 && bv[p-1] < v {
				p--
			}
			if len(bv) < k {
				bv, bi = append(bv, 0), append(bi, 0)
			}
			copy(bv[p+1:], bv[p:len(bv)-1])
			copy(bi[p+1:], bi[p:len(bi)-1])
			bv[p], bi[p] = v, ports.Token(j)
		}
		// A row with fewer than k numbers (NaNs from broken weights) is padded with its lowest unused ids,
		// valued NaN, so every row has k entries.
		for j := 0; len(bi) < k && j < x.width(); j++ {
			if !slices.Contains(bi, ports.Token(j)) {
				bi, bv = append(bi, ports.Token(j)), append(bv, float32(math.NaN()))
			}
		}
		ids = append(ids, bi...)
		vals = append(vals, bv...)
	}
	return ids, vals
}

// Host returns the values themselves: they are host memory already (valid until the next pass).
func (o ops) Host(x act) []float32 { return x.v }
