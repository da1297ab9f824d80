package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

// An 8-bit cache's attention, in chunks of kvChunk rows read back, gives the bits of the same attention over
// a float32 cache holding the read-back values: exact and fast units, a cache of several chunks, windows that
// start inside a chunk.
func TestKV8AttentionReadsBackRows(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const d, Hq, Hkv, n, bs = 32, 4, 2, 2*kvChunk + 13, 5
	kvw := Hkv * d
	vec := func(m int) []float32 {
		v := make([]float32, m)
		for i := range v {
			v[i] = r.Float32()*4 - 2
		}
		return v
	}
	q8 := newKVCache(8, d)
	q8.appendRows(vec(n*kvw), vec(n*kvw))
	f32 := &kvCache{k: make([]float32, n*kvw), v: make([]float32, n*kvw)}
	dequantizeRows(f32.k, q8.k8, q8.ks, d)
	dequantizeRows(f32.v, q8.v8, q8.vs, d)
	require.Equal(t, n, q8.positions(kvw))
	qr, kr, v := vec(bs*Hq*d), vec(bs*kvw), vec(bs*kvw)
	for _, window := range []int{0, 7, 100} {
		for _, fast := range []bool{false, true} {
			t.Run(fmt.Sprintf("window_%d_fast_%v", window, fast), func(t *testing.T) {
				job := func(c *kvCache) []float32 {
					unitHeads := 1
					if fast {
						unitHeads = Hq / Hkv
					}
					j := &attnJob{a: model.Attend[*weight]{Pos: n, HeadDim: d, Causal: true, Window: window}, c: c,
						qr: qr, kr: kr, v: v, out: make([]float32, bs*Hq*d), d: d, Hq: Hq, kvw: kvw, n: n, bs: bs,
						group: Hq / Hkv, scale: float32(1 / math.Sqrt(d)), rows: bs, fast: fast, unitHeads: unitHeads}
					scores, tmp := make([]float32, j.scratch()), make([]float32, j.tmp())
					for idx := range j.units() {
						j.unit(idx, scores, tmp)
					}
					return j.out
				}
				want, got := job(f32), job(q8)
				for i := range want {
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "element %d", i)
				}
			})
		}
	}
}

// kv8Pair loads a synth target with 8-bit KV (and the given kernels) and a DFlash drafter beside it.
func kv8Pair(t *testing.T, family string, seed uint64, mode kernel.Mode, q *quant.Spec) (*Target, *Drafter) {
	t.Helper()
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: seed, Quant: q})
	ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: seed + 1, Taps: []int{0, 2, 3}, Mask: 63, Quant: q})
	tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2, Kernels: mode, KVBits: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	require.Equal(t, 8, tg.KVBits())
	d, err := LoadDrafter(t.Context(), ddir, tg, DrafterOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return tg, d
}

// With 8-bit KV, greedy speculative output equals greedy plain output (every block size, both rollbacks), in
// the exact and the fast kernel modes, on a dense and a hybrid target.
func TestKV8SpeculativeConformance(t *testing.T) {
	for _, c := range []struct {
		family string
		mode   kernel.Mode
		q      *quant.Spec
	}{
		{"qwen3", kernel.ModeExact, nil},
		{"qwen3_next", kernel.ModeExact, nil},
		{"qwen3_next", kernel.ModeFast, &quant.Spec{Bits: 4, GroupSize: 32}},
	} {
		t.Run(fmt.Sprintf("%s_mode_%d", c.family, c.mode), func(t *testing.T) {
			tg, d := kv8Pair(t, c.family, 21, c.mode, c.q)
			n := 32
			if testing.Short() {
				n = 12
			}
			accepted := porttest.SpeculativeSuite{Target: tg, Drafter: d, Tokens: n}.Run(t)
			t.Logf("%s kv8: %d draft tokens accepted over the suite", c.family, accepted)
		})
	}
}

// With 8-bit KV every item of a batched forward is bit-identical to its solo Forward (exact and fast).
func TestKV8BatchConformance(t *testing.T) {
	for name, c := range map[string]struct {
		f    testmodel.TargetSpec
		mode kernel.Mode
	}{
		"qwen3 f32":         {f: testmodel.TargetSpec{Family: "qwen3", Seed: 97, Layers: 2, Tied: true}},
		"qwen3_next hybrid": {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 98, Layers: 4}},
		"qwen3 q4 fast":     {f: testmodel.TargetSpec{Family: "qwen3", Seed: 99, Layers: 2, Quant: &quant.Spec{Bits: 4, GroupSize: 32}}, mode: kernel.ModeFast},
	} {
		t.Run(name, func(t *testing.T) {
			c.f.Context = 64
			tg, err := Load(context.Background(), testmodel.Target(t, c.f), LoadOptions{Threads: 2, Kernels: c.mode, KVBits: 8})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			porttest.BatchSuite{Target: tg, TapLayers: []int{c.f.Layers - 1, 0}, ReadTaps: hostRows, ContextLength: 64}.Run(t)
		})
	}
	t.Run("drafted", func(t *testing.T) {
		tg, d := kv8Pair(t, "qwen3_next", 31, kernel.ModeExact, nil)
		porttest.BatchSuite{Target: tg, Drafter: d, TapLayers: []int{3}, ReadTaps: hostRows, Long: 140}.Run(t)
	})
}

// The prefix-state suite with 8-bit KV: an imported prefix continues bit-identically.
func TestKV8PrefixConformance(t *testing.T) {
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			tg, d := kv8Pair(t, family, 41, kernel.ModeExact, nil)
			porttest.PrefixSuite{Target: tg, Drafter: d, Vocab: tg.Info().VocabSize}.Run(t)
		})
	}
}

// The exported 8-bit state says what it holds and is a quarter-size copy: codes and scales, not floats, and
// an import restores them bit for bit.
func TestKV8PrefixHoldsCodes(t *testing.T) {
	ctx := t.Context()
	tg, _ := kv8Pair(t, "qwen3", 51, kernel.ModeExact, nil)
	s := openSession(t, tg, nil)
	toks := make([]ports.Token, 90)
	for i := range toks {
		toks[i] = ports.Token(i*5%50 + 1)
	}
	_, err := s.Forward(ctx, toks, ports.ForwardOptions{Rows: 1})
	require.NoError(t, err)
	ps, err := s.ExportPrefix(80)
	require.NoError(t, err)
	p := ps.(*Prefix)
	assert.Equal(t, 8, p.KVBits())
	a := tg.m.Arch
	kvw := a.KVHeads * a.HeadDim
	var attn int64
	for i, c := range s.kv {
		if c == nil {
			continue
		}
		attn++
		assert.Nil(t, p.k, "no float rows")
		assert.Equal(t, c.k8[:80*kvw], p.k8[i])
		assert.Equal(t, c.vs[:80*a.KVHeads], p.vs[i])
	}
	assert.Equal(t, attn*80*2*int64(kvw+4*a.KVHeads), p.Bytes(), "codes and scales")
	s2 := openSession(t, tg, nil)
	require.NoError(t, s2.ImportPrefix(p))
	for i, c := range s2.kv {
		if c != nil {
			assert.Equal(t, s.kv[i].k8[:80*kvw], c.k8)
			assert.Equal(t, s.kv[i].ks[:80*a.KVHeads], c.ks)
			assert.Equal(t, s.kv[i].v8[:80*kvw], c.v8)
		}
	}
}

// A position's keys and values quantize to the same bits whichever pass wrote them: a prompt run in one
// block, in chunks across the kvChunk boundaries and one token at a time gives the same logits and caches.
func TestKV8SameBitsWhateverTheBlocks(t *testing.T) {
	for _, mode := range []kernel.Mode{kernel.ModeExact, kernel.ModeFast} {
		t.Run(fmt.Sprintf("mode_%d", mode), func(t *testing.T) {
			ctx := t.Context()
			tg, _ := kv8Pair(t, "qwen3_next", 61, mode, nil)
			toks := make([]ports.Token, 150)
			for i := range toks {
				toks[i] = ports.Token(i*11%60 + 1)
			}
			run := func(chunk int) (*Session, []float32) {
				s := openSession(t, tg, nil)
				var last []float32
				for lo := 0; lo < len(toks); lo += chunk {
					fr, err := s.Forward(ctx, toks[lo:min(len(toks), lo+chunk)], ports.ForwardOptions{Rows: 1, Logits: true})
					require.NoError(t, err)
					last = fr.Logits
				}
				return s, last
			}
			s1, want := run(len(toks))
			for _, chunk := range []int{1, 7, 64} {
				s, got := run(chunk)
				require.Equal(t, want, got, "chunk %d logits", chunk)
				for i, c := range s.kv {
					if c != nil {
						require.Equal(t, s1.kv[i].k8, c.k8, "chunk %d layer %d keys", chunk, i)
						require.Equal(t, s1.kv[i].vs, c.vs, "chunk %d layer %d value scales", chunk, i)
					}
				}
			}
		})
	}
}

// KV bits other than 32 and 8 are refused at load with a clear error.
func TestKVBitsRefused(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 71})
	for _, b := range []int{4, 16, -1} {
		_, err := Load(t.Context(), dir, LoadOptions{KVBits: b})
		require.ErrorIs(t, err, ErrKVBits, "bits %d", b)
	}
	tg, err := Load(t.Context(), dir, LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	assert.Equal(t, 32, tg.KVBits())
}

// The 8-bit cache prices a quarter of the float32 cache's bytes plus the scales (4 bytes per position and KV
// head), and the admission price of the whole session shrinks with it.
func TestKV8PricesLessKV(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 72})
	load := func(bits int) *Target {
		tg, err := Load(t.Context(), dir, LoadOptions{Threads: 2, KVBits: bits})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tg.Close() })
		return tg
	}
	t32, t8 := load(32), load(8)
	dem := ports.MemoryDemand{Positions: 4096, Rows: 64, Block: 4}
	p32, p8 := t32.price(dem), t8.price(dem)
	a := t32.m.Arch
	assert.Less(t, p8.kv, p32.kv/3)
	assert.Greater(t, p8.kv, p32.kv/4)
	var attn int64
	for _, k := range a.Kinds {
		if k == ports.LayerAttention {
			attn++
		}
	}
	held := attn * 2 * int64(dem.Positions) * int64(a.KVHeads*(a.HeadDim+4)) // codes and scales
	assert.GreaterOrEqual(t, p8.kv, held)
	assert.LessOrEqual(t, p8.kv, held*5/4+attn*2*(192+2048)*5, "within append's growth")
	assert.Less(t, t8.SessionBytes(dem), t32.SessionBytes(dem))
}
