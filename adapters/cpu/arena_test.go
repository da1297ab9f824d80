package cpu

import (
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

func TestArenaRecyclesAndStaysBounded(t *testing.T) {
	var a arena
	first := a.get(100)
	first[0] = 7
	a.reset()
	again := a.get(100)
	assert.Same(t, &first[0], &again[0], "a pass's first request of a size class gets the class's first buffer")
	assert.Zero(t, again[0], "a recycled buffer comes back zeroed")
	// Passes whose requests change size and order (as MoE routing does) never push the arena past its budget.
	for pass := range 200 {
		a.reset()
		for i := range 64 {
			a.get(1 + (pass*7919+i*104729)%maxArena)
		}
		require.LessOrEqual(t, a.held, arenaBudget)
	}
	// A class no pass used since the trim before the last is dropped; with keep (a target session's arena),
	// only those over it, so smaller ones (a verify's) stay for the next speculative round.
	kept := arena{keep: keepClass}
	for pass := range 2 * trimEvery {
		kept.reset()
		if pass == 0 {
			kept.get(keepClass)
			kept.get(keepClass + 1)
		}
		kept.get(5)
	}
	assert.Contains(t, kept.classes, classSize(keepClass))
	assert.NotContains(t, kept.classes, classSize(keepClass+1))
	for range 2 * trimEvery {
		a.reset()
		a.get(5)
	}
	assert.Len(t, a.classes, 1, "only the class still in use remains")
	assert.Equal(t, classSize(5), a.held)
	big := a.get(maxArena + 1)
	assert.Len(t, big, maxArena+1, "an over-size request is served, not kept")
	assert.Equal(t, classSize(5), a.held)
	// Within a pass no two buffers overlap, whatever the mix of sizes.
	a.reset()
	var live [][]float32
	for i := range 300 {
		b := a.scratch(1 + (i*7919)%5000)
		for j := range b {
			b[j] = float32(i)
		}
		live = append(live, b)
	}
	for i, b := range live {
		for _, v := range b {
			require.Equal(t, float32(i), v, "buffer %d was overwritten by a later one of the same pass", i)
		}
	}
	held := 0
	for _, c := range a.classes {
		for _, b := range c.bufs {
			held += cap(b)
		}
	}
	assert.Equal(t, held, a.held, "held is the capacity of every kept buffer")
	var none *arena
	assert.Len(t, none.get(3), 3, "a nil arena allocates")
}

// After a pass that fills the budget (a long prefill), a pass of another shape takes the room of the classes it
// does not use and recycles its buffers from its second run on, long before the next trim.
func TestArenaEvictsIdleClassesForANewShape(t *testing.T) {
	var a arena
	a.reset()
	for range arenaBudget / maxArena {
		a.get(maxArena) // the prefill: every value of the budget
	}
	require.Equal(t, arenaBudget, a.held)
	sizes := []int{640, 1536 * 16, 4096 * 16, 1280 * 16}
	pass := func() []*float32 {
		a.reset()
		var ptrs []*float32
		for _, n := range sizes {
			ptrs = append(ptrs, &a.get(n)[0])
		}
		return ptrs
	}
	first := pass()
	require.LessOrEqual(t, a.held, arenaBudget)
	for i := range 3 {
		again := pass()
		for j := range first {
			assert.Same(t, first[j], again[j], "run %d: request %d reuses the buffer of the first run", i, j)
		}
	}
	assert.Less(t, a.held, arenaBudget, "the prefill's idle classes gave their room up")
	held := 0
	for _, c := range a.classes {
		for _, b := range c.bufs {
			held += cap(b)
		}
	}
	assert.Equal(t, held, a.held, "held is the capacity of every kept buffer after the eviction")
	// A class the current pass uses is never evicted, even when the pass asks for more than the budget.
	a.reset()
	kept := &a.get(640)[0]
	for range arenaBudget/maxArena + 2 {
		a.get(maxArena)
	}
	a.reset()
	assert.Same(t, kept, &a.get(640)[0], "the pass's own class kept its buffer")
	require.LessOrEqual(t, a.held, arenaBudget)
}

// Ops that take their output unzeroed (ops.out) write every value: with recycled buffers poisoned with NaN,
// prefill, decode, a taped verify and a batched round give the same logits, bit for bit, as with clean ones,
// on dense, hybrid, gated and MoE targets in both kernel modes. Not parallel: it sets poisonScratch.
func TestScratchBuffersAreFullyWritten(t *testing.T) {
	q4 := &quant.Spec{Bits: 4, GroupSize: 32}
	for name, c := range map[string]struct {
		f    testmodel.TargetSpec
		mode kernel.Mode
	}{
		"qwen3 f32":              {f: testmodel.TargetSpec{Family: "qwen3", Seed: 91, Layers: 2, Tied: true}},
		"qwen3 q4 fast":          {f: testmodel.TargetSpec{Family: "qwen3", Seed: 92, Layers: 2, Quant: q4}, mode: kernel.ModeFast},
		"qwen3_next hybrid fast": {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 93, Layers: 4}, mode: kernel.ModeFast},
		"qwen3_5 hybrid gated":   {f: testmodel.TargetSpec{Family: "qwen3_5", Seed: 94, Layers: 4, OutputGate: true, PartialRotary: 0.25}},
		"qwen3_next moe q4 fast": {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 95, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: q4}, mode: kernel.ModeFast},
		"qwen3_next q4 exact":    {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 97, Layers: 4, Quant: q4}},
		"qwen3 bf16 fast":        {f: testmodel.TargetSpec{Family: "qwen3", Seed: 98, Layers: 2, BF16: true}, mode: kernel.ModeFast},
	} {
		t.Run(name, func(t *testing.T) {
			c.f.Context = 64
			tg, err := Load(t.Context(), testmodel.Target(t, c.f), LoadOptions{Threads: 2, Kernels: c.mode})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			run := func() [][]float32 {
				var out [][]float32
				a, err := tg.NewSession(t.Context(), nil)
				require.NoError(t, err)
				defer a.Close()
				b, err := tg.NewSession(t.Context(), nil)
				require.NoError(t, err)
				defer b.Close()
				// Every shape runs twice, so its second pass runs on the buffers its first one left.
				for _, step := range []struct {
					s    ports.Session
					toks []ports.Token
					opts ports.ForwardOptions
				}{
					{a, []ports.Token{1, 2, 3, 4, 5, 6, 7}, ports.ForwardOptions{Rows: 1}},
					{b, []ports.Token{9, 8, 7}, ports.ForwardOptions{Rows: 1}},
					{a, []ports.Token{8}, ports.ForwardOptions{Rows: 1, Logits: true}},
					{a, []ports.Token{9}, ports.ForwardOptions{Rows: 1, Logits: true}},
					{a, []ports.Token{10, 11, 12, 13}, ports.ForwardOptions{Rows: 4, Logits: true, RecordTape: true}},
					{a, []ports.Token{14, 15, 16, 17}, ports.ForwardOptions{Rows: 4, Logits: true, RecordTape: true}},
				} {
					res, err := step.s.Forward(t.Context(), step.toks, step.opts)
					require.NoError(t, err)
					out = append(out, res.Logits)
				}
				for range 2 {
					rs, err := tg.ForwardBatch(t.Context(), []ports.BatchItem{
						{Session: a, Tokens: []ports.Token{18}, Opts: ports.ForwardOptions{Rows: 1, Logits: true}},
						{Session: b, Tokens: []ports.Token{4, 5}, Opts: ports.ForwardOptions{Rows: 2, Logits: true}},
					})
					require.NoError(t, err)
					for _, r := range rs {
						require.NoError(t, r.Err)
						out = append(out, r.Result.Logits)
					}
				}
				return out
			}
			clean := run()
			poisonScratch = true
			defer func() { poisonScratch = false }()
			poisoned := run()
			require.Len(t, poisoned, len(clean))
			for i := range clean {
				for j, v := range poisoned[i] {
					require.False(t, math.IsNaN(float64(v)), "pass %d logit %d is NaN: an op read a value it did not write", i, j)
					require.Equal(t, math.Float32bits(clean[i][j]), math.Float32bits(v), "pass %d logit %d", i, j)
				}
			}
		})
	}
}

// The drafter's ops (Scale, its attention over the context cache, its block) also write every value they take
// unzeroed: DFlash and DFlash2 drafts on poisoned buffers propose what they propose on clean ones.
func TestScratchBuffersAreFullyWrittenByDrafters(t *testing.T) {
	for name, v2 := range map[string]bool{"dflash": false, "dflash2": true} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 31})
			ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 32, Taps: []int{0, 3}, Mask: 63, Nested: v2, DFlash2: v2})
			// Scaled embeddings and logits, so the drafter's Scale runs too.
			testmodel.EditConfig(t, ddir, func(m map[string]any) { m["input_embedding_scale"], m["output_multiplier"] = 1.5, 2.0 })
			tg, err := Load(ctx, tdir, LoadOptions{Threads: 2})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			d, err := LoadDrafter(ctx, ddir, tg, DrafterOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			run := func() [][]ports.Token {
				sess, err := tg.NewSession(ctx, d.TapLayers())
				require.NoError(t, err)
				defer sess.Close()
				ds, err := d.NewSession(ctx)
				require.NoError(t, err)
				defer ds.Close()
				var out [][]ports.Token
				next := []ports.Token{3, 1, 4, 1, 5, 9, 2, 6}
				for range 4 { // later rounds run on the buffers the earlier ones left
					fr, err := sess.Forward(ctx, next, ports.ForwardOptions{Rows: 1, Taps: true})
					require.NoError(t, err)
					p, err := ds.Draft(ctx, fr.Greedy[0], fr.Taps, 8)
					require.NoError(t, err)
					out = append(out, p.Tokens)
					next = []ports.Token{fr.Greedy[0]}
				}
				return out
			}
			clean := run()
			poisonScratch = true
			defer func() { poisonScratch = false }()
			assert.Equal(t, clean, run())
		})
	}
}

// A layer's buffers go back to the pass at its end, but its output; with dropIn its input too, when it is the
// output the layer before kept. Large ones go back to largeFree.
func TestLayerScopeKeepsOnlyTheOutput(t *testing.T) {
	var a arena
	a.reset()
	before := a.get(640) // the embedding: before any layer
	a.beginLayer()
	h := a.scratch(640)
	a.scratch(maxArena + 1)
	a.scratch(1000)
	out0 := a.scratch(640)
	a.endLayer(out0, false)
	assert.Empty(t, a.big, "large buffers go back at the layer's end")

	a.beginLayer()
	h1 := a.scratch(640)
	assert.Same(t, &h[0], &h1[0], "the next layer's first request gets the first layer's first buffer")
	out1 := a.scratch(640)
	a.endLayer(out1, true) // no tap kept out0: it goes back too
	a.beginLayer()
	x := a.scratch(640)
	y := a.scratch(640)
	got := map[*float32]bool{&x[0]: true, &y[0]: true}
	assert.True(t, got[&h[0]] && got[&out0[0]], "layer 2 reuses layer 1's scratch and layer 0's output")
	for _, b := range [][]float32{x, y} {
		assert.NotSame(t, &out1[0], &b[0], "layer 1's output stays taken")
		assert.NotSame(t, &before[0], &b[0], "a buffer from before the layers stays taken")
	}
	a.endLayer(y, false) // kept: layer 2's output, x goes back

	// Outputs over maxArena values: kept among the pass's large buffers, and given back to largeFree the same way.
	a.beginLayer()
	big0 := a.scratch(maxArena + 1)
	a.endLayer(big0, false)
	require.Len(t, a.big, 1)
	a.beginLayer()
	big1 := a.scratch(maxArena + 1)
	a.endLayer(big1, true)
	require.Len(t, a.big, 1, "the input went back")
	assert.Same(t, &big1[0], &a.big[0][0], "the output stays")
	a.beginLayer()
	big2 := a.scratch(maxArena + 1)
	a.endLayer(big2, false)
	assert.Len(t, a.big, 2, "a tapped input stays")
	a.reset()
	assert.Empty(t, a.big)
}

// Layer scoping changes no bits: a prefill with taps, then decode steps, a taped verify (which does not
// scope), a batched round with another sequence's prefill and an embedding's last hidden state give the same
// values with it as without it, with recycled buffers poisoned with NaN, on
// dense, hybrid and MoE targets. Not parallel: it sets poisonScratch and scopeLayers.
func TestLayerScopeChangesNoBits(t *testing.T) {
	q4 := &quant.Spec{Bits: 4, GroupSize: 32}
	for name, c := range map[string]struct {
		f    testmodel.TargetSpec
		mode kernel.Mode
	}{
		"qwen3 f32":              {f: testmodel.TargetSpec{Family: "qwen3", Seed: 81, Layers: 3}},
		"qwen3_next hybrid fast": {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 83, Layers: 4}, mode: kernel.ModeFast},
		"qwen3_next moe q4 fast": {f: testmodel.TargetSpec{Family: "qwen3_next", Seed: 85, Layers: 4, MoE: true, ExpertLayout: testmodel.ExpertsSwitch, MLXLayout: true, Quant: q4}, mode: kernel.ModeFast},
	} {
		t.Run(name, func(t *testing.T) {
			c.f.Context = 256
			tg, err := Load(t.Context(), testmodel.Target(t, c.f), LoadOptions{Threads: 2, Kernels: c.mode})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			prompt := make([]ports.Token, 150)
			for i := range prompt {
				prompt[i] = ports.Token(1 + (i*7)%50)
			}
			run := func() [][]float32 {
				var out [][]float32
				s, err := tg.NewSession(t.Context(), []int{0, 2})
				require.NoError(t, err)
				defer s.Close()
				for _, step := range []struct {
					toks []ports.Token
					opts ports.ForwardOptions
				}{
					{prompt, ports.ForwardOptions{Rows: 3, Logits: true, Taps: true}},
					{[]ports.Token{8}, ports.ForwardOptions{Rows: 1, Logits: true, Taps: true}},
					{[]ports.Token{10, 11, 12, 13}, ports.ForwardOptions{Rows: 4, Logits: true, Taps: true, RecordTape: true}},
					{[]ports.Token{14, 15}, ports.ForwardOptions{Rows: 2, Logits: true, Taps: true}},
				} {
					res, err := s.Forward(t.Context(), step.toks, step.opts)
					require.NoError(t, err)
					taps, _, _, err := res.Taps.(ports.HostTaps).Host()
					require.NoError(t, err)
					out = append(out, res.Logits, slices.Clone(taps))
				}
				h, err := tg.LastHidden(t.Context(), prompt)
				require.NoError(t, err)
				out = append(out, h)
				// A batched round: a second sequence's prefill beside the first one's decode step.
				s2, err := tg.NewSession(t.Context(), []int{0, 2})
				require.NoError(t, err)
				defer s2.Close()
				rs, err := tg.ForwardBatch(t.Context(), []ports.BatchItem{
					{Session: s, Tokens: []ports.Token{16}, Opts: ports.ForwardOptions{Rows: 1, Logits: true, Taps: true}},
					{Session: s2, Tokens: prompt[:120], Opts: ports.ForwardOptions{Rows: 1, Logits: true, Taps: true}},
				})
				require.NoError(t, err)
				for _, r := range rs {
					require.NoError(t, r.Err)
					taps, _, _, err := r.Result.Taps.(ports.HostTaps).Host()
					require.NoError(t, err)
					out = append(out, r.Result.Logits, slices.Clone(taps))
				}
				return out
			}
			scopeLayers = false
			plain := run()
			scopeLayers, poisonScratch = true, true
			defer func() { poisonScratch = false }()
			scoped := run()
			require.Len(t, scoped, len(plain))
			for i := range plain {
				require.Len(t, scoped[i], len(plain[i]))
				for j, v := range scoped[i] {
					require.False(t, math.IsNaN(float64(v)), "output %d value %d is NaN: a value read after its layer gave it back", i, j)
					require.Equal(t, math.Float32bits(plain[i][j]), math.Float32bits(v), "output %d value %d", i, j)
				}
			}
		})
	}
}

// Sessions prefilling at once, on other goroutines, share the process's free list of large buffers (largeFree):
// each gets the logits it gets alone, bit for bit, run after run.
func TestLargeBuffersSharedBySessions(t *testing.T) {
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 61, Wide: 8})
	tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	prompt := func(seed int) []ports.Token {
		p := make([]ports.Token, 200) // 200 rows of the 1,536-wide MLP: buffers over maxArena
		for i := range p {
			p[i] = ports.Token(1 + (i*seed)%60)
		}
		return p
	}
	run := func(seed int) []float32 {
		s, err := tg.NewSession(t.Context(), nil)
		require.NoError(t, err)
		defer s.Close()
		res, err := s.Forward(t.Context(), prompt(seed), ports.ForwardOptions{Rows: 1, Logits: true})
		require.NoError(t, err)
		return res.Logits
	}
	want := map[int][]float32{}
	for seed := 1; seed <= 4; seed++ {
		want[seed] = run(seed)
	}
	for range 2 {
		got := make([][]float32, 5)
		var wg sync.WaitGroup
		for seed := 1; seed <= 4; seed++ {
			wg.Go(func() { got[seed] = run(seed) })
		}
		wg.Wait()
		for seed := 1; seed <= 4; seed++ {
			require.Len(t, got[seed], len(want[seed]))
			for j, v := range got[seed] {
				require.Equal(t, math.Float32bits(want[seed][j]), math.Float32bits(v), "prompt %d logit %d", seed, j)
			}
		}
	}
}
