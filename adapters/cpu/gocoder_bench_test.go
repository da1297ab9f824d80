package cpu

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/ports"
)

// BenchmarkGocoder times what a speculative round on the bundled gocoder target and drafter is made of, with
// the fast kernels, interleaved in every iteration so that a shared machine's load falls on all of them alike:
// a 1-row decode, verifies of 4, 8 and 16 rows (taps and tape recorded, as the decoder asks; 4 is a tree of
// 4 nodes, the cheapest round that drafts) at a 128-token
// context, a drafter pass of block 16 (proposals for 15 positions), a tree of 4 nodes' draft (block 16,
// 3 rows of new context first, 4 candidates for each of 3 slots), full and narrow (ports.TopRequest.Narrow,
// what tree rounds run), and a tree of 4 nodes' verify with keeping its accepted path (tree4; keep4 is its
// KeepPath alone). It reports each part's median time and
// the medians of each part over the same iteration's decode, in decode steps; each part runs under a pprof
// label (part=decode, verify4, verify8, verify16, draft16, draft4, draft4n, tree4). HIGGS_BENCH_CONTEXT sets the context length (128 by
// default; a generation's rounds run at its prompt's length and more, where attention weighs more), and
// HIGGS_BENCH_THREADS the worker count (2 by default); with 1 the times are the thread's CPU time (threadCPU), which other processes
// on a shared machine inflate far less than wall time. Beside -cpuprofile it gives the split by part
// (docs/performance.md):
//
//	go test -run '^$' -bench 'Gocoder$' -benchtime 200x ./adapters/cpu
//	HIGGS_BENCH_THREADS=1 go test -run '^$' -bench 'Gocoder$' -benchtime 200x -cpuprofile /tmp/cpu.out ./adapters/cpu
func BenchmarkGocoder(b *testing.B) {
	threads := benchEnv("HIGGS_BENCH_THREADS", 2)
	clock := func() time.Duration { return time.Duration(time.Now().UnixNano()) }
	if threads == 1 {
		// The pool runs every loop on the calling goroutine: pin it so the thread's clock is its own.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		clock = threadCPU
	}
	ctx := b.Context()
	ctxLen := benchEnv("HIGGS_BENCH_CONTEXT", 128)
	toks := benchTokens(ctxLen + 16)
	r := newGocoderRig(b, threads, toks, ctxLen)
	ps, ds, fr, snap := r.ps, r.ds, r.fr, r.snap
	drafted := ds.Len()
	// A tree round's draft: the context of the tokens the round before committed (3 rows here) goes in first.
	fr3, err := ps.Forward(ctx, toks[ctxLen:ctxLen+3], ports.ForwardOptions{Taps: true, Rows: 3})
	require.NoError(b, err)
	taps3 := fr3.Taps.Detach()
	require.NoError(b, ps.TrimKV(ctxLen))
	require.NoError(b, ps.Restore(snap))
	forward := func(k int) time.Duration {
		t0 := clock()
		_, err := ps.Forward(ctx, toks[ctxLen:ctxLen+k], ports.ForwardOptions{Taps: true, RecordTape: k > 1, Rows: k})
		t := clock() - t0
		require.NoError(b, err)
		require.NoError(b, ps.TrimKV(ctxLen))
		require.NoError(b, ps.Restore(snap))
		return t
	}
	draft := func() time.Duration {
		t0 := clock()
		_, err := ds.Draft(ctx, fr.Greedy[0], nil, 16)
		t := clock() - t0
		require.NoError(b, err)
		require.NoError(b, ds.Crop(drafted))
		return t
	}
	top, ok := any(ds).(ports.TopDrafter)
	require.True(b, ok)
	draftTree := func(narrow bool) func() time.Duration {
		return func() time.Duration {
			t0 := clock()
			_, err := top.DraftTop(ctx, fr.Greedy[0], taps3, 16, ports.TopRequest{K: 4, Slots: 3, Narrow: narrow})
			t := clock() - t0
			require.NoError(b, err)
			require.NoError(b, ds.Crop(drafted))
			return t
		}
	}
	tv, ok := any(ps).(ports.TreeVerifier)
	require.True(b, ok)
	// A tree round's verify: 4 nodes (the anchor, two candidates for the first slot, one below the first of
	// them), then the kept path of the anchor and the two drafts accepted, as a tree round runs them.
	var keeps []float64 // the tree part's KeepPath alone, ms
	tree := func() time.Duration {
		t0 := clock()
		_, err := tv.ForwardTree(ctx, toks[ctxLen:ctxLen+4], []int{-1, 0, 1, 0}, ports.ForwardOptions{Taps: true})
		require.NoError(b, err)
		t1 := clock()
		_, err = tv.KeepPath(ctx, []int{0, 1, 2})
		t := clock() - t0
		keeps = append(keeps, float64(clock()-t1)/1e6)
		require.NoError(b, err)
		require.NoError(b, ps.TrimKV(ctxLen))
		require.NoError(b, ps.Restore(snap))
		return t
	}
	names := []string{"decode", "verify4", "verify8", "verify16", "draft16", "draft4", "draft4n", "tree4"}
	ms, steps := make([][]float64, len(names)), make([][]float64, len(names))
	for b.Loop() {
		var ts []time.Duration
		for i, part := range []func() time.Duration{func() time.Duration { return forward(1) }, func() time.Duration { return forward(4) },
			func() time.Duration { return forward(8) }, func() time.Duration { return forward(16) }, draft, draftTree(false), draftTree(true), tree} {
			// The label lets a profile be cut by part: go tool pprof -tagfocus part=verify16.
			pprof.Do(ctx, pprof.Labels("part", names[i]), func(context.Context) { ts = append(ts, part()) })
		}
		for i, t := range ts {
			ms[i] = append(ms[i], float64(t)/1e6)
			steps[i] = append(steps[i], float64(t)/float64(ts[0]))
		}
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	for i, name := range names {
		b.ReportMetric(med(ms[i]), name+"-ms")
		if i > 0 {
			b.ReportMetric(med(steps[i]), name+"-steps")
		}
	}
	b.ReportMetric(med(keeps), "keep4-ms")
}

// BenchmarkGocoderCatchUp times, on 2 workers, the drafter's catch-up as a generation pays it after the adaptive
// policy decoded a stretch plainly: HIGGS_BENCH_STRETCH (64 by default) decode steps with taps after a context of
// HIGGS_BENCH_CONTEXT positions (480), then the context-only calls that hand the drafter every position but the
// newest (calls-ms), then the drafting call that projects them all and drafts a block of 2 (draft-ms), against
// the same draft with nothing to catch up (warm-ms). catchup-us-per-pos is (calls + draft − warm) / stretch: what
// every position decoded plainly costs the next probe.
//
//	go test -run '^$' -bench GocoderCatchUp -benchtime 100x ./adapters/cpu
func BenchmarkGocoderCatchUp(b *testing.B) {
	ctx := b.Context()
	stretch := benchEnv("HIGGS_BENCH_STRETCH", 64)
	ctxLen := benchEnv("HIGGS_BENCH_CONTEXT", 480)
	toks := benchTokens(ctxLen + stretch + 1)
	r := newGocoderRig(b, 2, toks, ctxLen)
	ps, ds, snap := r.ps, r.ds, r.snap
	var calls, draft, warm, per []float64
	for b.Loop() {
		require.NoError(b, ps.TrimKV(ctxLen))
		require.NoError(b, ps.Restore(snap))
		require.NoError(b, ds.Crop(ctxLen))
		pending := make([]ports.Taps, stretch)
		for i := range pending {
			fr, err := ps.Forward(ctx, toks[ctxLen+i:ctxLen+i+1], ports.ForwardOptions{Taps: true, Rows: 1})
			require.NoError(b, err)
			pending[i] = fr.Taps.Detach()
		}
		end := ctxLen + stretch
		t0 := time.Now()
		for i, p := range pending[:stretch-1] {
			_, err := ds.Draft(ctx, toks[ctxLen+i+1], p, 1)
			require.NoError(b, err)
		}
		t1 := time.Now()
		_, err := ds.Draft(ctx, toks[end], pending[stretch-1], 2)
		t2 := time.Now()
		require.NoError(b, err)
		require.NoError(b, ds.Crop(end))
		_, err = ds.Draft(ctx, toks[end], nil, 2)
		t3 := time.Now()
		require.NoError(b, err)
		calls = append(calls, float64(t1.Sub(t0))/1e6)
		draft = append(draft, float64(t2.Sub(t1))/1e6)
		warm = append(warm, float64(t3.Sub(t2))/1e6)
		per = append(per, float64(t2.Sub(t0)-t3.Sub(t2))/1e3/float64(stretch))
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(med(calls), "calls-ms")
	b.ReportMetric(med(draft), "draft-ms")
	b.ReportMetric(med(warm), "warm-ms")
	b.ReportMetric(med(per), "catchup-us-per-pos")
}

// BenchmarkGocoderPrefill times a prefill of HIGGS_BENCH_CONTEXT tokens (480 by default) on the bundled gocoder
// with the fast kernels on 2 workers; on a CPU with AMX, with its tile kernels and without them alternately in
// every iteration (the same bits either way), reporting each one's median in tokens per second.
//
//	go test -run '^$' -bench GocoderPrefill -benchtime 10x ./adapters/cpu
func BenchmarkGocoderPrefill(b *testing.B) {
	ctx := b.Context()
	target := loadGocoder(b, 2)
	n := benchEnv("HIGGS_BENCH_CONTEXT", 480)
	toks := benchTokens(n)
	paths := []bool{false}
	if kernel.AMX() {
		paths = []bool{true, false}
		defer kernel.SetAMX(true)
	}
	rates := make([][]float64, len(paths))
	for b.Loop() {
		for i, amx := range paths {
			kernel.SetAMX(amx)
			ps, err := target.NewSession(ctx, nil)
			require.NoError(b, err)
			t0 := time.Now()
			_, err = ps.Forward(ctx, toks, ports.ForwardOptions{Rows: 1})
			d := time.Since(t0)
			require.NoError(b, err)
			require.NoError(b, ps.Close())
			rates[i] = append(rates[i], float64(n)/d.Seconds())
		}
	}
	for i, amx := range paths {
		slices.Sort(rates[i])
		name := "tok/s"
		switch {
		case amx:
			name = "amx-tok/s"
		case len(paths) > 1:
			name = "noamx-tok/s"
		}
		b.ReportMetric(rates[i][len(rates[i])/2], name)
	}
}

// gocoderRig is what the gocoder benchmarks start from: a target session that prefilled a context with taps
// (fr; the recurrent state after it in snap) and a draft session that took that context, on the bundled gocoder
// and its drafter.
type gocoderRig struct {
	ps   ports.Session
	ds   ports.DraftSession
	fr   ports.ForwardResult
	snap ports.RecurrentSnapshot
}

// newGocoderRig loads gocoder with the fast kernels on threads workers and its drafter, prefills toks[:ctxLen]
// and drafts once after it, so that the drafter has projected the context before anything is timed (all closed
// when b ends; skipped where the model is not here).
func newGocoderRig(b *testing.B, threads int, toks []ports.Token, ctxLen int) *gocoderRig {
	ctx := b.Context()
	target := loadGocoder(b, threads)
	d, err := LoadDrafter(ctx, filepath.Join(gocoderRoot, "drafter"), target, DrafterOptions{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = d.Close() })
	r := &gocoderRig{}
	r.ps, err = target.NewSession(ctx, d.TapLayers())
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.ps.Close() })
	r.fr, err = r.ps.Forward(ctx, toks[:ctxLen], ports.ForwardOptions{Taps: true, Rows: 1})
	require.NoError(b, err)
	r.snap, err = r.ps.Snapshot()
	require.NoError(b, err)
	r.ds, err = d.NewSession(ctx)
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.ds.Close() })
	_, err = r.ds.Draft(ctx, toks[ctxLen], r.fr.Taps, 2)
	require.NoError(b, err)
	return r
}

// gocoderRoot is the bundled gocoder model's directory.
var gocoderRoot = filepath.Join("..", "..", "models", "gocoder")

// loadGocoder loads the bundled gocoder target with the fast kernels on threads workers (closed when b ends),
// or skips b where the model is not here.
func loadGocoder(b *testing.B, threads int) *Target {
	if _, err := os.Stat(filepath.Join(gocoderRoot, "target", "model.safetensors")); err != nil {
		b.Skipf("the bundled gocoder model is not here: %v", err)
	}
	target, err := Load(b.Context(), filepath.Join(gocoderRoot, "target"), LoadOptions{Threads: threads, Kernels: kernel.ModeFast})
	require.NoError(b, err)
	b.Cleanup(func() { _ = target.Close() })
	return target
}

// benchEnv is the positive integer in the environment variable name, or def.
func benchEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchTokens is n made-up token ids (a fixed pattern below the vocabulary).
func benchTokens(n int) []ports.Token {
	toks := make([]ports.Token, n)
	for i := range toks {
		toks[i] = ports.Token(100 + i*37%3000)
	}
	return toks
}
