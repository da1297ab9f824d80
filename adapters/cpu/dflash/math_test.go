package dflash

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

// ref is a float64 re-statement of MODEL-REFERENCE §5 that recomputes everything from the whole context on
// every call: no cache, no chunking, no kernels.
type ref struct {
	a  Arch
	w  map[string][]float64
	ft *fakeTarget
}

func loadRef(t *testing.T, dir string, a Arch, ft *fakeTarget) *ref {
	st, err := safetensors.OpenDir(dir)
	require.NoError(t, err)
	defer st.Close()
	r := &ref{a: a, w: map[string][]float64{}, ft: ft}
	for _, n := range st.Names() {
		tt, err := st.Tensor(n)
		require.NoError(t, err)
		v, err := tt.Float32()
		require.NoError(t, err)
		f := make([]float64, len(v))
		for i := range v {
			f[i] = float64(v[i])
		}
		r.w[n] = f
	}
	return r
}

func (r *ref) lin(name string, x []float64, in int) []float64 {
	w := r.w[name+".weight"]
	out := len(w) / in
	rows := len(x) / in
	y := make([]float64, rows*out)
	for i := range rows {
		for o := range out {
			var s float64
			for j := range in {
				s += x[i*in+j] * w[o*in+j]
			}
			y[i*out+o] = s
		}
	}
	return y
}

func (r *ref) norm(name string, x []float64) []float64 {
	w := r.w[name]
	n := len(w)
	y := make([]float64, len(x))
	for off := 0; off < len(x); off += n {
		var ss float64
		for _, v := range x[off : off+n] {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(n)+r.a.RMSNormEps)
		for j := range n {
			y[off+j] = w[j] * x[off+j] * inv
		}
	}
	return y
}

func (r *ref) rope(x []float64, heads, pos0 int) {
	d := r.a.HeadDim
	rows := len(x) / (heads * d)
	for i := range rows {
		for h := range heads {
			v := x[(i*heads+h)*d : (i*heads+h+1)*d]
			for k := range d / 2 {
				th := float64(pos0+i) * math.Pow(r.a.RopeTheta, -2*float64(k)/float64(d))
				c, s := math.Cos(th), math.Sin(th)
				a, b := v[k], v[k+d/2]
				v[k], v[k+d/2] = a*c-b*s, b*c+a*s
			}
		}
	}
}

// logits returns draft logits for block rows 1..bs−1 given all context features f (m rows).
func (r *ref) logits(f []float64, m int, anchor ports.Token, bs int) [][]float64 {
	a := r.a
	H, d := a.HiddenSize, a.HeadDim
	c := r.norm("hidden_norm.weight", r.lin("fc", f, len(a.TapLayers)*H))
	x := make([]float64, bs*H)
	for i := range bs {
		tok := a.MaskToken
		if i == 0 {
			tok = anchor
		}
		scale := 1.0
		if a.EmbedScale != 0 {
			scale = a.EmbedScale
		}
		for j := range H {
			x[i*H+j] = float64(float32(float64(r.ft.embed[int(tok)*H+j]) * scale))
		}
	}
	group := a.NumHeads / a.NumKVHeads
	for l := range a.NumLayers {
		p := "layers." + strconv.Itoa(l) + "."
		window, causal := 0, false
		if len(a.SlidingWindows) > 0 {
			window = a.SlidingWindows[l]
		}
		if len(a.Causal) > 0 {
			causal = a.Causal[l]
		}
		visible := func(qpos, kpos int) bool {
			if causal && kpos > qpos {
				return false
			}
			return window == 0 || (qpos-kpos < window && kpos-qpos < window)
		}
		h := r.norm(p+"input_layernorm.weight", x)
		q := r.norm(p+"self_attn.q_norm.weight", r.lin(p+"self_attn.q_proj", h, H))
		kn := r.norm(p+"self_attn.k_norm.weight", r.lin(p+"self_attn.k_proj", h, H))
		vn := r.lin(p+"self_attn.v_proj", h, H)
		kx := r.norm(p+"self_attn.k_norm.weight", r.lin(p+"self_attn.k_proj", c, H))
		vx := r.lin(p+"self_attn.v_proj", c, H)
		r.rope(q, a.NumHeads, m)
		r.rope(kn, a.NumKVHeads, m)
		r.rope(kx, a.NumKVHeads, 0)
		keys := append(append([]float64{}, kx...), kn...)
		vals := append(append([]float64{}, vx...), vn...)
		nk := m + bs
		att := make([]float64, bs*a.NumHeads*d)
		for i := range bs {
			for hh := range a.NumHeads {
				g := hh / group
				qv := q[(i*a.NumHeads+hh)*d : (i*a.NumHeads+hh+1)*d]
				sc := make([]float64, nk)
				mx := math.Inf(-1)
				for j := range nk {
					if !visible(m+i, j) {
						sc[j] = math.Inf(-1)
						continue
					}
					var s float64
					for t := range d {
						s += qv[t] * keys[(j*a.NumKVHeads+g)*d+t]
					}
					sc[j] = s / math.Sqrt(float64(d))
					mx = max(mx, sc[j])
				}
				var z float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					z += sc[j]
				}
				for j := range nk {
					for t := range d {
						att[(i*a.NumHeads+hh)*d+t] += sc[j] / z * vals[(j*a.NumKVHeads+g)*d+t]
					}
				}
			}
		}
		o := r.lin(p+"self_attn.o_proj", att, a.NumHeads*d)
		for i := range x {
			x[i] += o[i]
		}
		hm := r.norm(p+"post_attention_layernorm.weight", x)
		gt := r.lin(p+"mlp.gate_proj", hm, H)
		up := r.lin(p+"mlp.up_proj", hm, H)
		for i := range gt {
			gt[i] = gt[i] / (1 + math.Exp(-gt[i])) * up[i]
		}
		dn := r.lin(p+"mlp.down_proj", gt, a.IntermediateSize)
		for i := range x {
			x[i] += dn[i]
		}
	}
	y := r.norm("norm.weight", x)
	V := r.ft.info.VocabSize
	out := make([][]float64, bs-1)
	for i := 1; i < bs; i++ {
		out[i-1] = make([]float64, V)
		for v := range V {
			var s float64
			for j := range H {
				s += y[i*H+j] * float64(r.ft.head[v*H+j])
			}
			out[i-1][v] = s
		}
	}
	return out
}

func newTestDrafter(t *testing.T, seed uint64, a Arch, threads int) (*Drafter, *fakeTarget, string) {
	rng := rand.New(rand.NewPCG(seed, 1))
	ft := newFakeTarget(rng, 64, a.HiddenSize, 4)
	dir := writeDrafter(t, rng, a, "", false, safetensors.F32)
	d, err := loadWeights(dir, a, ft, kernel.NewPool(threads), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d, ft, dir
}

func TestDraftMatchesFloat64Reference(t *testing.T) {
	full := testArch()
	sliding := testArch()
	sliding.SlidingWindows = []int{5, 0}
	sliding.Causal = []bool{true, false}
	sliding.EmbedScale = 1.5
	causal := testArch()
	causal.Causal = []bool{true, true}
	for name, a := range map[string]Arch{"full": full, "sliding-causal-scaled": sliding, "causal": causal} {
		// Short blocks either run the trained block (default) or a shrunk one (ShrinkBlocks); the reference
		// runs the block the drafter should have run.
		t.Run(name+"/trained-block", func(t *testing.T) { checkAgainstReference(t, a, false) })
		t.Run(name+"/shrunk-block", func(t *testing.T) { checkAgainstReference(t, a, true) })
	}
}

func checkAgainstReference(t *testing.T, a Arch, shrink bool) {
	d, ft, dir := newTestDrafter(t, 7, a, 2)
	d.shrink = shrink
	r := loadRef(t, dir, a, ft)
	rng := rand.New(rand.NewPCG(3, 3))
	width := len(a.TapLayers) * a.HiddenSize
	var all []float32
	s, err := d.NewSession(t.Context())
	require.NoError(t, err)
	sess := s.(*Session)
	for round, m := range []int{5, 3, 1, 4} {
		f := randVec(rng, m*width, 1)
		all = append(all, f...)
		anchor := ports.Token(rng.IntN(60))
		bs := []int{8, 4, 2, 6}[round]
		p, err := sess.Draft(t.Context(), anchor, &floatTaps{data: f, rows: m, width: width}, bs)
		require.NoError(t, err)
		require.Len(t, p.Tokens, bs-1)
		assert.Equal(t, len(all)/width, sess.Len())
		f64 := make([]float64, len(all))
		for i, v := range all {
			f64[i] = float64(v)
		}
		nb := a.BlockSize
		if shrink {
			nb = bs
		}
		want := r.logits(f64, len(all)/width, anchor, nb)[:bs-1]
		require.Len(t, sess.logits, (bs-1)*d.vocab, "the LM head runs only on the returned rows")
		V := d.vocab
		for i := range bs - 1 {
			got := sess.logits[i*V : (i+1)*V]
			var maxErr float64
			for v := range V {
				maxErr = max(maxErr, math.Abs(float64(got[v])-want[i][v]))
			}
			assert.Less(t, maxErr, 1e-3, "round %d slot %d", round, i+1)
			best, second := top2(want[i])
			if want[i][best]-want[i][second] > 1e-3 {
				assert.Equal(t, ports.Token(best), p.Tokens[i], "round %d slot %d", round, i+1)
			}
		}
	}
}

func top2(x []float64) (int, int) {
	b, s := 0, -1
	for i := 1; i < len(x); i++ {
		if x[i] > x[b] {
			b, s = i, b
		} else if s < 0 || x[i] > x[s] {
			s = i
		}
	}
	return b, s
}

// TestIncrementalEqualsOneShot checks the cache bookkeeping: context fed over several rounds (with crops)
// drafts bit-identically to the same context fed at once, for any worker count.
func TestIncrementalEqualsOneShot(t *testing.T) {
	a := testArch()
	rng := rand.New(rand.NewPCG(5, 5))
	width := len(a.TapLayers) * a.HiddenSize
	f := randVec(rng, 300*width, 1) // > contextChunk to exercise chunking
	for _, threads := range []int{1, 3} {
		d, _, _ := newTestDrafter(t, 11, a, threads)
		one, err := d.NewSession(t.Context())
		require.NoError(t, err)
		want, err := one.Draft(t.Context(), 9, &floatTaps{data: f, rows: 300, width: width}, 8)
		require.NoError(t, err)
		wantLogits := append([]float32(nil), one.(*Session).logits...)

		inc, err := d.NewSession(t.Context())
		require.NoError(t, err)
		done := 0
		for _, m := range []int{130, 1, 69, 100} {
			_, err := inc.Draft(t.Context(), 3, &floatTaps{data: f[done*width : (done+m)*width], rows: m, width: width}, 4)
			require.NoError(t, err)
			done += m
			require.NoError(t, inc.Crop(done)) // a no-op crop, as the domain issues after each round
		}
		got, err := inc.Draft(t.Context(), 9, nil, 8)
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, got.Tokens, "threads %d", threads)
		assert.Equal(t, wantLogits, inc.(*Session).logits, "threads %d", threads)

		// Crop back and re-feed: same state.
		require.NoError(t, inc.Crop(200))
		again, err := inc.Draft(t.Context(), 9, &floatTaps{data: f[200*width:], rows: 100, width: width}, 8)
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, again.Tokens)
		assert.Equal(t, wantLogits, inc.(*Session).logits)

		// Context-only calls (bs 1, as the decoder feeds plain-decoding rounds) queue their rows; a crop
		// inside the queue drops queued rows; the next drafting call projects the rest: same state.
		require.NoError(t, inc.Crop(150))
		for _, at := range []int{150, 151, 152, 153} {
			_, err := inc.Draft(t.Context(), 3, &floatTaps{data: f[at*width : (at+1)*width], rows: 1, width: width}, 1)
			require.NoError(t, err)
			assert.Equal(t, at+1, inc.Len())
		}
		require.NoError(t, inc.Crop(152))
		assert.Equal(t, 152, inc.Len())
		_, err = inc.Draft(t.Context(), 3, &floatTaps{data: f[152*width : 250*width], rows: 98, width: width}, 1)
		require.NoError(t, err)
		queued := inc.(*Session).nq
		assert.Equal(t, 100, queued, "context-only calls project nothing")
		queue, err := inc.Draft(t.Context(), 9, &floatTaps{data: f[250*width:], rows: 50, width: width}, 8)
		require.NoError(t, err)
		assert.Equal(t, 300, inc.Len())
		assert.Equal(t, want.Tokens, queue.Tokens)
		assert.Equal(t, wantLogits, inc.(*Session).logits)
		// A crop below the projected positions drops the queue too.
		_, err = inc.Draft(t.Context(), 3, nil, 1)
		require.NoError(t, err)
		require.NoError(t, inc.Crop(100))
		again, err = inc.Draft(t.Context(), 9, &floatTaps{data: f[100*width:], rows: 200, width: width}, 8)
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, again.Tokens)
		assert.Equal(t, wantLogits, inc.(*Session).logits)
	}
}

func TestDeterministicAcrossThreads(t *testing.T) {
	a := testArch()
	rng := rand.New(rand.NewPCG(8, 8))
	width := len(a.TapLayers) * a.HiddenSize
	f := randVec(rng, 20*width, 1)
	var first []float32
	for _, threads := range []int{1, 2, 5} {
		d, _, _ := newTestDrafter(t, 13, a, threads)
		s, err := d.NewSession(t.Context())
		require.NoError(t, err)
		_, err = s.Draft(t.Context(), 1, &floatTaps{data: f, rows: 20, width: width}, 8)
		require.NoError(t, err)
		got := append([]float32(nil), s.(*Session).logits...)
		if first == nil {
			first = got
		}
		assert.Equal(t, first, got, "threads %d", threads)
	}
}
