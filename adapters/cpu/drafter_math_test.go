package cpu

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// draftRef is a float64 re-statement of docs/model-math.md#dflash-drafter that recomputes everything from the whole
// context on every call: no cache, no chunking, no kernels, no package model. Its settings are the test's spec (what
// the test wrote into the drafter's config), its weights are read straight from the drafter's checkpoint, and
// the embedding and LM head from the target's.
type draftRef struct {
	a           hfmodel.DrafterArch
	w           map[string][]float64
	embed, head []float64 // [V, H]
	vocab       int
}

// readFloat64s returns every tensor of the safetensors file at path as float64, by stored name.
func readFloat64s(t *testing.T, path string) map[string][]float64 {
	t.Helper()
	st, err := safetensors.OpenFile(path)
	require.NoError(t, err)
	defer st.Close()
	out := map[string][]float64{}
	for _, n := range st.Names() {
		tt, err := st.Tensor(n)
		require.NoError(t, err)
		v, err := tt.Float32()
		require.NoError(t, err)
		f := make([]float64, len(v))
		for i := range v {
			f[i] = float64(v[i])
		}
		out[n] = f
	}
	return out
}

func loadDraftRef(t *testing.T, ddir, tdir string, a hfmodel.DrafterArch) *draftRef {
	tw := readFloat64s(t, filepath.Join(tdir, "model.safetensors"))
	r := &draftRef{a: a, w: readFloat64s(t, filepath.Join(ddir, "model.safetensors")),
		embed: tw["model.embed_tokens.weight"], head: tw["lm_head.weight"]}
	require.NotEmpty(t, r.embed, "the target's embedding")
	require.Len(t, r.head, len(r.embed), "the target's untied LM head")
	r.vocab = len(r.embed) / a.HiddenSize
	return r
}

func (r *draftRef) lin(name string, x []float64, in int) []float64 {
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

func (r *draftRef) norm(name string, x []float64) []float64 {
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

func (r *draftRef) rope(x []float64, heads, pos0 int) {
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
func (r *draftRef) logits(f []float64, m int, anchor ports.Token, bs int) [][]float64 {
	l, _ := r.forward(f, m, anchor, bs)
	return l
}

// forward returns the draft logits (compute_logits' transforms applied) and the final-normed hidden states
// of block rows 1..bs−1; a DFlash2 arch wraps attention and the MLP in r.conv.
func (r *draftRef) forward(f []float64, m int, anchor ports.Token, bs int) ([][]float64, [][]float64) {
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
			x[i*H+j] = float64(float32(r.embed[int(tok)*H+j] * scale))
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
		var post []float64
		if a.V2() {
			h, post = r.convPrepare(p+"attention_conv", h)
		}
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
		if a.V2() {
			o = r.conv(o, post, r.w[p+"attention_conv.base_kernel"][a.ConvKernel*H:])
		}
		for i := range x {
			x[i] += o[i]
		}
		hm := r.norm(p+"post_attention_layernorm.weight", x)
		if a.V2() {
			hm, post = r.convPrepare(p+"mlp_conv", hm)
		}
		gt := r.lin(p+"mlp.gate_proj", hm, H)
		up := r.lin(p+"mlp.up_proj", hm, H)
		for i := range gt {
			gt[i] = gt[i] / (1 + math.Exp(-gt[i])) * up[i]
		}
		dn := r.lin(p+"mlp.down_proj", gt, a.IntermediateSize)
		if a.V2() {
			dn = r.conv(dn, post, r.w[p+"mlp_conv.base_kernel"][a.ConvKernel*H:])
		}
		for i := range x {
			x[i] += dn[i]
		}
	}
	y := r.norm("norm.weight", x)
	V := r.vocab
	out := make([][]float64, bs-1)
	hidden := make([][]float64, bs-1)
	mult := a.OutputMultiplier
	if mult == 0 {
		mult = 1
	}
	for i := 1; i < bs; i++ {
		out[i-1] = make([]float64, V)
		hidden[i-1] = y[i*H : (i+1)*H]
		for v := range V {
			var s float64
			for j := range H {
				s += y[i*H+j] * r.head[v*H+j]
			}
			s *= mult
			if c := a.LogitSoftcap; c > 0 {
				s = c * math.Tanh(s/c)
			}
			out[i-1][v] = s
		}
	}
	return out, hidden
}

func TestDraftMatchesFloat64Reference(t *testing.T) {
	full := tinyDraftArch()
	sliding := tinyDraftArch()
	sliding.SlidingWindows = []int{5, 0}
	sliding.Causal = []bool{true, false}
	sliding.EmbedScale = 1.5
	causal := tinyDraftArch()
	causal.Causal = []bool{true, true}
	// compute_logits' transforms: a negative multiplier flips every draft, so the test sees it applied.
	transformed := tinyDraftArch()
	transformed.OutputMultiplier, transformed.LogitSoftcap = -0.8, 1.5
	for name, a := range map[string]hfmodel.DrafterArch{"full": full, "sliding-causal-scaled": sliding, "causal": causal, "negated-softcapped": transformed} {
		// Blocks below, at and above the configured size: each runs exactly bs slots, as the reference does.
		t.Run(name, func(t *testing.T) { checkDraftAgainstReference(t, a) })
	}
}

func checkDraftAgainstReference(t *testing.T, a hfmodel.DrafterArch) {
	d, ddir, tdir := newTinyDrafter(t, 7, a, 2, DrafterOptions{})
	r := loadDraftRef(t, ddir, tdir, a)
	V := d.t.Info().VocabSize
	require.Equal(t, r.vocab, V)
	rng := rand.New(rand.NewPCG(3, 3))
	width := len(a.TapLayers) * a.HiddenSize
	var all []float32
	s, err := d.NewSession(t.Context())
	require.NoError(t, err)
	sess := s.(*DraftSession)
	for round, m := range []int{5, 3, 1, 4, 2} {
		f := testmodel.NormalVec(rng, m*width, 1)
		all = append(all, f...)
		anchor := ports.Token(rng.IntN(60))
		bs := []int{a.BlockSize, 4, 2, 6, a.BlockSize + 5}[round]
		p, err := sess.Draft(t.Context(), anchor, &draftTaps{data: f, rows: m, width: width}, bs)
		require.NoError(t, err)
		require.Len(t, p.Tokens, bs-1)
		assert.Equal(t, len(all)/width, sess.Len())
		f64 := make([]float64, len(all))
		for i, v := range all {
			f64[i] = float64(v)
		}
		want := r.logits(f64, len(all)/width, anchor, bs)[:bs-1]
		require.Len(t, sess.logits, (bs-1)*V, "the LM head runs only on the returned rows")
		for i := range bs - 1 {
			got := sess.logits[i*V : (i+1)*V]
			var maxErr float64
			for v := range V {
				maxErr = max(maxErr, math.Abs(float64(got[v])-want[i][v]))
			}
			// The target's head gives logits of a few units (|logit| ≲ 3); float32 rounding keeps them within
			// ~1e-6 of the float64 reference.
			assert.Less(t, maxErr, 1e-4, "round %d slot %d", round, i+1)
			best, second := top2Of(want[i])
			if want[i][best]-want[i][second] > 1e-3 {
				assert.Equal(t, ports.Token(best), p.Tokens[i], "round %d slot %d", round, i+1)
			}
		}
	}
}

func top2Of(x []float64) (int, int) {
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

// TestDraftIncrementalEqualsOneShot checks the cache bookkeeping: context fed over several rounds (with
// crops) drafts bit-identically to the same context fed at once, for any worker count.
func TestDraftIncrementalEqualsOneShot(t *testing.T) {
	a := tinyDraftArch()
	rng := rand.New(rand.NewPCG(5, 5))
	width := len(a.TapLayers) * a.HiddenSize
	f := testmodel.NormalVec(rng, 300*width, 1) // > contextChunk to exercise chunking
	for _, threads := range []int{1, 3} {
		d, _, _ := newTinyDrafter(t, 11, a, threads, DrafterOptions{})
		one, err := d.NewSession(t.Context())
		require.NoError(t, err)
		want, err := one.Draft(t.Context(), 9, &draftTaps{data: f, rows: 300, width: width}, 8)
		require.NoError(t, err)
		wantLogits := append([]float32(nil), one.(*DraftSession).logits...)

		inc, err := d.NewSession(t.Context())
		require.NoError(t, err)
		done := 0
		for _, m := range []int{130, 1, 69, 100} {
			_, err := inc.Draft(t.Context(), 3, &draftTaps{data: f[done*width : (done+m)*width], rows: m, width: width}, 4)
			require.NoError(t, err)
			done += m
			require.NoError(t, inc.Crop(done)) // a no-op crop, as the domain issues after each round
		}
		got, err := inc.Draft(t.Context(), 9, nil, 8)
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, got.Tokens, "threads %d", threads)
		assert.Equal(t, wantLogits, inc.(*DraftSession).logits, "threads %d", threads)

		// Crop back and re-feed: same state.
		require.NoError(t, inc.Crop(200))
		again, err := inc.Draft(t.Context(), 9, &draftTaps{data: f[200*width:], rows: 100, width: width}, 8)
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, again.Tokens)
		assert.Equal(t, wantLogits, inc.(*DraftSession).logits)

		// Context-only calls (bs 1, as the decoder feeds plain-decoding rounds) queue their rows; a crop
		// inside the queue drops queued rows; the next drafting call projects the rest: same state.
		require.NoError(t, inc.Crop(150))
		for _, at := range []int{150, 151, 152, 153} {
			_, err := inc.Draft(t.Context(), 3, &draftTaps{data: f[at*width : (at+1)*width], rows: 1, width: width}, 1)
			require.NoError(t, err)
			assert.Equal(t, at+1, inc.Len())
		}
		require.NoError(t, inc.Crop(152))
		assert.Equal(t, 152, inc.Len())
		_, err = inc.Draft(t.Context(), 3, &draftTaps{data: f[152*width : 250*width], rows: 98, width: width}, 1)
		require.NoError(t, err)
		queued := inc.(*DraftSession).nq
		assert.Equal(t, 100, queued, "context-only calls project nothing")
		queue, err := inc.Draft(t.Context(), 9, &draftTaps{data: f[250*width:], rows: 50, width: width}, 8)
		require.NoError(t, err)
		assert.Equal(t, 300, inc.Len())
		assert.Equal(t, want.Tokens, queue.Tokens)
		assert.Equal(t, wantLogits, inc.(*DraftSession).logits)
		// A crop below the projected positions drops the queue too.
		_, err = inc.Draft(t.Context(), 3, nil, 1)
		require.NoError(t, err)
		require.NoError(t, inc.Crop(100))
		again, err = inc.Draft(t.Context(), 9, &draftTaps{data: f[100*width:], rows: 200, width: width}, 8)
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, again.Tokens)
		assert.Equal(t, wantLogits, inc.(*DraftSession).logits)
	}
}

// TestDraftLogitsAcrossThreads: the drafter's logits are bit-identical for any worker count of the
// target's pool, which the drafter shares.
func TestDraftLogitsAcrossThreads(t *testing.T) {
	a := tinyDraftArch()
	rng := rand.New(rand.NewPCG(8, 8))
	width := len(a.TapLayers) * a.HiddenSize
	f := testmodel.NormalVec(rng, 20*width, 1)
	var first []float32
	for _, threads := range []int{1, 2, 5} {
		d, _, _ := newTinyDrafter(t, 13, a, threads, DrafterOptions{})
		require.Equal(t, threads, d.t.Threads())
		s, err := d.NewSession(t.Context())
		require.NoError(t, err)
		_, err = s.Draft(t.Context(), 1, &draftTaps{data: f, rows: 20, width: width}, 8)
		require.NoError(t, err)
		got := append([]float32(nil), s.(*DraftSession).logits...)
		if first == nil {
			first = got
		}
		assert.Equal(t, first, got, "threads %d", threads)
	}
}
