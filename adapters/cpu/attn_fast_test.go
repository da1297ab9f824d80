package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/model"
)

// The fast attention (attnJob.headsFast, whichever way the work is cut) sees exactly the keys the exact
// head does — cached keys from the window's start, visible block keys under causal and sliding-window masks,
// blocks longer than the window included — and agrees with it to float32 rounding; cut per query head or per
// KV head it gives the same bits.
func TestFastAttentionMatchesExact(t *testing.T) {
	if !vecmath.FastAttention(64) {
		t.Skip("no AVX-512 on this CPU: the fast mode keeps the exact attention here")
	}
	r := rand.New(rand.NewPCG(81, 82))
	const d, Hq, Hkv, n, bs = 64, 4, 2, 9, 12
	kvw := Hkv * d
	vec := func(m int) []float32 {
		v := make([]float32, m)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		return v
	}
	c := &kvCache{k: vec(n * kvw), v: vec(n * kvw)}
	qr, kr, v := vec(bs*Hq*d), vec(bs*kvw), vec(bs*kvw)
	for _, causal := range []bool{false, true} {
		for _, window := range []int{0, 2, 3, 5, 20} {
			t.Run(fmt.Sprintf("causal_%v_window_%d", causal, window), func(t *testing.T) {
				job := func(fast bool, unitHeads int) []float32 {
					j := &attnJob{a: model.Attend[*weight]{Pos: n, HeadDim: d, Causal: causal, Window: window}, c: c,
						qr: qr, kr: kr, v: v, out: make([]float32, bs*Hq*d), d: d, Hq: Hq, kvw: kvw, n: n, bs: bs,
						group: Hq / Hkv, scale: float32(1 / math.Sqrt(d)), rows: bs, fast: fast, unitHeads: unitHeads}
					scores, tmp := make([]float32, j.scratch()), make([]float32, d)
					for idx := range j.units() {
						j.unit(idx, scores, tmp)
					}
					return j.out
				}
				exact, grouped, single := job(false, 1), job(true, Hq/Hkv), job(true, 1)
				for i := range exact {
					require.Equal(t, math.Float32bits(grouped[i]), math.Float32bits(single[i]), "element %d: per KV head vs per query head", i)
					require.InDelta(t, exact[i], grouped[i], 1e-4, "element %d", i)
				}
			})
		}
	}
}
