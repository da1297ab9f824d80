package mlx

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/porttest"
)

func loadFixture(t *testing.T, f fixture) *Target {
	t.Helper()
	tg, err := Load(t.Context(), writeFixture(t, f), LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tg.Close() })
	return tg
}

// readTaps copies taps to rows for the conformance suite.
func readTaps(tp ports.Taps) ([][]float32, error) {
	m, ok := tp.(*Taps)
	if !ok {
		return nil, errors.New("not mlx taps")
	}
	data, rows, width, err := m.Read()
	if err != nil {
		return nil, err
	}
	out := make([][]float32, rows)
	for r := range out {
		out[r] = data[r*width : (r+1)*width]
	}
	return out, nil
}

// The ports conformance suite on dense, hybrid and quantized targets.
func TestPortConformance(t *testing.T) {
	requireMLX(t)
	for name, f := range parityFixtures() {
		t.Run(name, func(t *testing.T) {
			f.spec.Context = 40
			tg := loadFixture(t, f)
			porttest.SessionSuite{
				Open:          porttest.Sessions(tg),
				Vocab:         f.spec.Vocab,
				TapLayers:     []int{f.spec.Layers - 1, 0},
				ReadTaps:      readTaps,
				TapsTolerance: 1e-4, // MLX's matmuls round differently for different row counts
				ContextLength: 40,
			}.Run(t)
		})
	}
}

// readState copies every GDN layer's SSM and conv state to Go memory.
func readState(t *testing.T, s *Session) [][]float32 {
	t.Helper()
	var out [][]float32
	require.NoError(t, s.t.rt.Do(func() error {
		g := graph.New(s.t.rt, "test read")
		defer g.Release()
		for _, st := range s.st.gdn {
			if st != nil {
				g.Eval(st.SSM, st.Conv)
				out = append(out, g.ReadF32(st.SSM), g.ReadF32(st.Conv))
			}
		}
		return g.Err
	}))
	return out
}

// Replaying n steps of a taped block must give the state of feeding only those n tokens (bit-exact: same
// ops in the same order), for every n.
func TestTapeReplayMatchesRecompute(t *testing.T) {
	requireMLX(t)
	tg := loadFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 21, Layers: 4, Vocab: 96}})
	block := []ports.Token{3, 14, 15, 92, 65, 35, 89}
	for n := 0; n <= len(block); n++ {
		a, err := tg.NewSession(t.Context(), nil)
		require.NoError(t, err)
		b, err := tg.NewSession(t.Context(), nil)
		require.NoError(t, err)
		_, err = a.Forward(t.Context(), prompt, ports.ForwardOptions{})
		require.NoError(t, err)
		_, err = b.Forward(t.Context(), prompt, ports.ForwardOptions{})
		require.NoError(t, err)
		fr, err := a.Forward(t.Context(), block, ports.ForwardOptions{RecordTape: true})
		require.NoError(t, err)
		require.NoError(t, a.TrimKV(len(prompt)+n))
		require.NoError(t, a.(*Session).ReplayTape(t.Context(), fr.Tape, n))
		if n > 0 {
			for _, tok := range block[:n] {
				// Token by token, as decoding would.
				_, err = b.Forward(t.Context(), []ports.Token{tok}, ports.ForwardOptions{})
				require.NoError(t, err)
			}
		}
		sa, sb := readState(t, a.(*Session)), readState(t, b.(*Session))
		require.Len(t, sa, len(sb))
		worst := 0.0
		for i := range sa {
			for j := range sa[i] {
				worst = max(worst, float64(abs32(sa[i][j]-sb[i][j])))
			}
		}
		assert.LessOrEqual(t, worst, 1e-5, "n=%d", n)
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// Bad input is an error, not a crash, and the session stays usable after an input error.
func TestForwardErrors(t *testing.T) {
	requireMLX(t)
	tg := loadFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3", Seed: 5, Layers: 1, Vocab: 96, Context: 8}})
	s, err := tg.NewSession(t.Context(), []int{0})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Forward(t.Context(), nil, ports.ForwardOptions{})
	assert.Error(t, err)
	_, err = s.Forward(t.Context(), []ports.Token{96}, ports.ForwardOptions{})
	assert.ErrorContains(t, err, "outside the vocabulary")
	_, err = s.Forward(t.Context(), make([]ports.Token, 9), ports.ForwardOptions{})
	assert.ErrorIs(t, err, ports.ErrContextFull)
	_, err = tg.NewSession(t.Context(), []int{1})
	assert.ErrorContains(t, err, "tap layer 1")
	r, err := s.Forward(t.Context(), []ports.Token{1, 2}, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	assert.Len(t, r.Greedy, 2)
	_, err = s.Snapshot()
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

// activeMemory returns MLX's bytes held by live arrays, after letting pending cleanups (from this or earlier
// tests) reach the MLX thread.
func activeMemory(t *testing.T, tg *Target) uint64 {
	t.Helper()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	var n uintptr
	require.NoError(t, tg.rt.Do(func() error { return tg.rt.Check(mlxc.GetActiveMemory(&n)) }))
	return uint64(n)
}

// Explicit lifetimes: a session that decodes, verifies with taps and tapes, rolls back, snapshots and
// detaches taps returns MLX's active memory to where it started once closed, and a long decode does not grow
// it beyond its caches.
func TestNoArrayLeaks(t *testing.T) {
	requireMLX(t)
	tg := loadFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 31, Layers: 4, Vocab: 96}})
	base := activeMemory(t, tg)
	s, err := tg.NewSession(t.Context(), []int{0, 3})
	require.NoError(t, err)
	_, err = s.Forward(t.Context(), prompt, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	var mid uint64
	for round := range 30 {
		pre := s.Len()
		fr, err := s.Forward(t.Context(), []ports.Token{1, 2, 3, 4, 5}, ports.ForwardOptions{Taps: true, RecordTape: true})
		require.NoError(t, err)
		require.NoError(t, s.TrimKV(pre+2))
		require.NoError(t, s.(*Session).ReplayTape(t.Context(), fr.Tape, 2))
		if round == 0 {
			_, err = s.Snapshot()
			require.NoError(t, err)
			_ = fr.Taps.Detach()
		}
		if round == 9 {
			mid = activeMemory(t, tg)
		}
	}
	end := activeMemory(t, tg)
	t.Logf("active memory: base %d, after 10 rounds %d, after 30 rounds %d", base, mid, end)
	// 20 more rounds add 40 positions of KV for one attention layer pair (tiny), nothing per round else.
	assert.Less(t, int64(end)-int64(mid), int64(64<<10), "memory grows by more than the KV cache: %d → %d", mid, end)
	require.NoError(t, s.Close())
	// The snapshot and detached taps were dropped in round 0: their cleanups queue them for the MLX thread.
	got := activeMemory(t, tg)
	for i := 0; i < 100 && got != base; i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		got = activeMemory(t, tg)
	}
	assert.Equal(t, base, got, "closing the session and dropping its snapshot and detached taps frees everything")
}

// A target is safe for concurrent use: sessions on several goroutines (all funnelled onto the one MLX
// thread) give the same tokens as one session alone.
func TestConcurrentSessions(t *testing.T) {
	requireMLX(t)
	tg := loadFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 41, Layers: 4, Vocab: 96}})
	decode := func() ([]ports.Token, error) {
		s, err := tg.NewSession(t.Context(), nil)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		r, err := s.Forward(t.Context(), prompt, ports.ForwardOptions{Rows: 1})
		if err != nil {
			return nil, err
		}
		out := []ports.Token{r.Greedy[0]}
		for range 8 {
			r, err = s.Forward(t.Context(), out[len(out)-1:], ports.ForwardOptions{})
			if err != nil {
				return nil, err
			}
			out = append(out, r.Greedy[0])
		}
		return out, nil
	}
	want, err := decode()
	require.NoError(t, err)
	var wg sync.WaitGroup
	got := make([][]ports.Token, 4)
	errs := make([]error, 4)
	for i := range got {
		wg.Go(func() { got[i], errs[i] = decode() })
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		assert.Equal(t, want, got[i], "goroutine %d", i)
	}
}

// A long block runs in chunks; the result (logits of the returned rows, taps, later decoding) matches the
// one-graph forward.
func TestChunkedForward(t *testing.T) {
	requireMLX(t)
	tg := loadFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 51, Layers: 4, Vocab: 96}})
	run := func(chunk, rows int) ([]ports.Token, []float32, [][]float32, ports.Token) {
		defer func(old int) { maxChunk = old }(maxChunk)
		maxChunk = chunk
		s, err := tg.NewSession(t.Context(), []int{1, 3})
		require.NoError(t, err)
		defer s.Close()
		fr, err := s.Forward(t.Context(), prompt, ports.ForwardOptions{Rows: rows, Taps: true, Logits: true})
		require.NoError(t, err)
		logits := fr.Logits
		taps, err := readTaps(fr.Taps)
		require.NoError(t, err)
		next, err := s.Forward(t.Context(), []ports.Token{7}, ports.ForwardOptions{})
		require.NoError(t, err)
		return fr.Greedy, logits, taps, next.Greedy[0]
	}
	for _, rows := range []int{0, 1, 3, 7} {
		wantG, wantL, wantT, wantN := run(256, rows)
		gotG, gotL, gotT, gotN := run(5, rows)
		assert.Equal(t, wantG, gotG, "rows %d", rows)
		assert.Equal(t, wantN, gotN, "rows %d: next token", rows)
		require.Len(t, gotL, len(wantL))
		require.Len(t, gotT, len(prompt))
		for i := range wantL {
			assert.InDelta(t, wantL[i], gotL[i], 1e-4, "rows %d logit %d", rows, i)
		}
		for r := range wantT {
			for j := range wantT[r] {
				assert.InDelta(t, wantT[r][j], gotT[r][j], 1e-4)
			}
		}
	}
}

// Loading holds each weight once: MLX's active memory grows by about the checkpoint's tensor bytes (f32),
// not twice that (no upload, transpose view or unfused part left behind).
func TestWeightsHeldOnce(t *testing.T) {
	requireMLX(t)
	dir := writeFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 61, Layers: 4, Vocab: 96}})
	st, err := safetensors.OpenDir(dir)
	require.NoError(t, err)
	var bytes int
	for _, n := range st.Names() {
		tn, err := st.Tensor(n)
		require.NoError(t, err)
		bytes += len(tn.Data)
	}
	require.NoError(t, st.Close())
	rt, err := mlxc.Open()
	require.NoError(t, err)
	probe := &Target{rt: rt}
	before := activeMemory(t, probe)
	tg, err := Load(t.Context(), dir, LoadOptions{})
	require.NoError(t, err)
	held := int(activeMemory(t, probe) - before)
	require.NoError(t, tg.Close())
	t.Logf("checkpoint tensors %d bytes, MLX holds %d", bytes, held)
	assert.InDelta(t, bytes, held, 0.02*float64(bytes))
}

// Using a session or drafter after its target was closed is an error, not a use of freed arrays.
func TestUseAfterClose(t *testing.T) {
	requireMLX(t)
	_, mp := loadPairs(t, synth.TargetSpec{Family: "qwen3", Seed: 71}, synth.DrafterSpec{Seed: 72, Taps: []int{1, 3}, Mask: 60})
	s, err := mp.target.NewSession(t.Context(), nil)
	require.NoError(t, err)
	ds, err := mp.drafter.NewSession(t.Context())
	require.NoError(t, err)
	require.NoError(t, mp.drafter.(*Drafter).Close())
	_, err = ds.Draft(t.Context(), 1, nil, 4)
	assert.ErrorContains(t, err, "closed")
	require.NoError(t, mp.target.(*Target).Close())
	require.NoError(t, mp.target.(*Target).Close(), "Close is idempotent")
	_, err = s.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	assert.ErrorIs(t, err, errTargetClosed)
	_, err = mp.target.NewSession(t.Context(), nil)
	assert.ErrorIs(t, err, errTargetClosed)
	require.NoError(t, s.Close())
	require.NoError(t, ds.Close())
}
