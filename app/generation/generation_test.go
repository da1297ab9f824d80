package generation

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// fakeEngine is a toy hybrid target (attention and recurrent layers, tapes) with a drafter that proposes the
// target's own greedy tokens for 3 positions and then diverges, so rounds accept and reject.
func fakeEngine(t *testing.T, bs int) (*Engine, *portfake.Model) {
	t.Helper()
	m, err := portfake.New(portfake.Config{Vocab: 48, ContextLength: 256, Tape: true, EOS: []ports.Token{47}})
	require.NoError(t, err)
	d, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: bs, Propose: portfake.MatchThenDiverge(m, 3)})
	require.NoError(t, err)
	return &Engine{Target: m, Drafter: d}, m
}

// Every knob problem is reported at once, each naming its parameter, from the one place that checks them.
func TestPlanNamesEachProblem(t *testing.T) {
	e, _ := fakeEngine(t, 8)
	plain := &Engine{Target: e.Target}
	for _, tc := range []struct {
		name   string
		e      *Engine
		req    Request
		params []string
	}{
		{"empty prompt", e, Request{}, []string{"prompt"}},
		{"prompt param named", e, Request{PromptParam: "messages"}, []string{"messages"}},
		{"id outside vocabulary", e, Request{Prompt: []ports.Token{1, 48}}, []string{"prompt"}},
		{"negative max_tokens", e, Request{Prompt: []ports.Token{1}, MaxTokens: -1}, []string{"max_tokens"}},
		{"max_tokens past the context", e, Request{Prompt: []ports.Token{1}, MaxTokens: 256}, []string{"max_tokens"}},
		{"prompt fills the context", e, Request{Prompt: make([]ports.Token, 256)}, []string{"prompt"}},
		{"stop id outside vocabulary", e, Request{Prompt: []ports.Token{1}, StopIDs: []ports.Token{99}}, []string{"stop"}},
		{"bad sampling", e, Request{Prompt: []ports.Token{1}, Sampling: ports.SamplingParams{Temperature: -1}}, []string{""}},
		{"negative block size", e, Request{Prompt: []ports.Token{1}, BlockSize: -2}, []string{"block_size"}},
		{"block past the context", e, Request{Prompt: []ports.Token{1}, BlockSize: 1 << 20}, []string{"block_size"}},
		{"block without a drafter", plain, Request{Prompt: []ports.Token{1}, BlockSize: 2}, []string{"block_size"}},
		{"several at once", e, Request{Prompt: []ports.Token{1}, MaxTokens: -1, BlockSize: 1 << 20}, []string{"max_tokens", "block_size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.e.Plan(tc.req)
			require.Error(t, err)
			assert.ErrorIs(t, err, ports.ErrInvalidRequest)
			var got []string
			collect(err, &got)
			assert.Equal(t, tc.params, got)
		})
	}
}

// collect gathers the parameters of every *ports.RequestError in err's tree, in order.
func collect(err error, params *[]string) {
	var re *ports.RequestError
	if errors.As(err, &re) && re == err {
		*params = append(*params, re.Param)
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collect(e, params)
		}
	}
}

// The plan resolves the defaults: the drafter's block size, the model's EOS ids beside the engine's, the
// adaptive policy only where there is a block to adapt, one policy memory per block size and regime.
func TestPlanResolvesDefaults(t *testing.T) {
	e, _ := fakeEngine(t, 8)
	e.EOS = []ports.Token{5, 47}
	e.Policies = &Policies{}
	p, err := e.Plan(Request{Prompt: []ports.Token{1, 2}, Adaptive: true, StopIDs: []ports.Token{9}})
	require.NoError(t, err)
	assert.Equal(t, 8, p.Config.BlockSize)
	assert.True(t, p.Config.Adaptive)
	assert.ElementsMatch(t, []ports.Token{9, 5, 47}, p.Config.StopTokens)
	assert.Same(t, e.Policies.Memory(8, true), p.Config.Policy.Memory)

	p, err = e.Plan(Request{Prompt: []ports.Token{1, 2}, Adaptive: true, BlockSize: 1, NoEOS: true})
	require.NoError(t, err)
	assert.False(t, p.Config.Adaptive, "plain decoding has nothing to adapt")
	assert.Empty(t, p.Config.StopTokens)

	e.BlockSize = 4
	require.NoError(t, e.Check())
	assert.Equal(t, 4, e.DefaultBlockSize())
	e.BlockSize = 9
	require.NoError(t, e.Check(), "a block above the drafter's configured size is drafted as asked")
	ctxLen := e.Target.Info().ContextLength
	assert.Equal(t, ctxLen, e.MaxBlockSize(), "a request may name any block the context holds")
	assert.Equal(t, 8, e.DrafterBlockSize())
	e.BlockSize = ctxLen + 1
	assert.ErrorContains(t, e.Check(), fmt.Sprintf("block_size %d exceeds this model's context length %d", ctxLen+1, ctxLen))
	e.ContextLength = 32
	assert.ErrorContains(t, e.Check(), "exceeds this model's context length 32", "the operator's cap bounds blocks too")
	e.ContextLength = 0
	p, err = e.Plan(Request{Prompt: []ports.Token{1, 2}, BlockSize: 24, MaxTokens: 4})
	require.NoError(t, err)
	assert.Equal(t, 24, p.Config.BlockSize, "a block above the configured size")
	assert.ErrorContains(t, (&Engine{Target: e.Target, BlockSize: 2}).Check(), "needs a drafter")
}

// Adaptive requests share one policy memory per block size and sampling regime (what
// speculative.PolicyConfig.Memory requires), and never across them.
func TestPolicyMemoryPerRegime(t *testing.T) {
	var p Policies
	a := p.Memory(16, true)
	assert.Same(t, a, p.Memory(16, true), "same block size and regime must share a memory")
	assert.NotSame(t, a, p.Memory(16, false), "greedy and sampled decoding must not share a memory")
	assert.NotSame(t, a, p.Memory(8, true), "different block sizes must not share a memory")
}

// Greedy output through Run is the target's greedy continuation whatever the path: plain or speculative,
// every block size, with the prefix cache cold and warm, alone or in batched rounds beside others.
func TestRunIsLosslessOnEveryPath(t *testing.T) {
	e, m := fakeEngine(t, 8)
	prompt := []ports.Token{3, 1, 4, 1, 5, 9, 2, 6}
	want, err := m.GreedyContinuation(prompt, 24)
	require.NoError(t, err)
	if i := indexOf(want, 47); i >= 0 {
		want = want[:i+1]
	}
	cache, err := prefixcache.New(prefixcache.Config{Budget: 1 << 20, Every: 4}, portfake.NewClock(time.Millisecond))
	require.NoError(t, err)
	for _, bs := range []int{1, 2, 5, 8, 12, 30} { // 12 and 30: above the drafter's configured 8
		for _, withCache := range []bool{false, true} {
			t.Run(fmt.Sprintf("block %d cache %v", bs, withCache), func(t *testing.T) {
				p, err := e.Plan(Request{Prompt: prompt, MaxTokens: 24, BlockSize: bs})
				require.NoError(t, err)
				o := RunOptions{Clock: portfake.NewClock(time.Millisecond)}
				if withCache {
					o.PrefixCache = cache.Partition("")
				}
				var emitted []ports.Token
				o.Emit = func(toks []ports.Token) error { emitted = append(emitted, toks...); return nil }
				out, err := e.Run(t.Context(), p, o)
				require.NoError(t, err)
				require.NoError(t, out.Warn)
				assert.Equal(t, want, out.Tokens)
				assert.Equal(t, want, emitted)
			})
		}
	}
	assert.Positive(t, cache.Stats().Hits, "the later runs restored a cached prefix")

	sched, err := batch.New(batch.Config{}, batchClock{portfake.NewClock(time.Millisecond)}, e.Target, e.Drafter)
	require.NoError(t, err)
	var wg sync.WaitGroup
	outs := make([][]ports.Token, 6)
	errs := make([]error, 6)
	for i := range outs {
		wg.Go(func() {
			p, err := e.Plan(Request{Prompt: prompt, MaxTokens: 24, BlockSize: 1 + i})
			if err != nil {
				errs[i] = err
				return
			}
			out, err := e.Run(t.Context(), p, RunOptions{Batch: sched, PrefillChunk: 3})
			outs[i], errs[i] = out.Tokens, err
		})
	}
	wg.Wait()
	for i := range outs {
		require.NoError(t, errs[i])
		assert.Equal(t, want, outs[i], "member %d of the batch", i)
	}
}

// An emit error wrapping speculative.ErrStop (a stop string) ends the run as a stop and still caches the
// generation; any other error ends it with that error and caches nothing.
func TestRunStopsAndCaches(t *testing.T) {
	e, _ := fakeEngine(t, 4)
	prompt := []ports.Token{7, 7, 2, 3, 11}
	for _, tc := range []struct {
		name   string
		err    error
		cached bool
	}{
		{"stop string", fmt.Errorf("stop: %w", speculative.ErrStop), true},
		{"client gone", errors.New("client gone"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache, err := prefixcache.New(prefixcache.Config{Budget: 1 << 20}, portfake.NewClock(time.Millisecond))
			require.NoError(t, err)
			p, err := e.Plan(Request{Prompt: prompt, MaxTokens: 20})
			require.NoError(t, err)
			n := 0
			_, err = e.Run(t.Context(), p, RunOptions{PrefixCache: cache.Partition(""), Emit: func([]ports.Token) error {
				if n++; n == 2 {
					return tc.err
				}
				return nil
			}})
			require.ErrorIs(t, err, tc.err)
			assert.Equal(t, tc.cached, cache.Stats().Entries > 0)
		})
	}
}

// batchClock gives the fake clock the timers the scheduler waits with.
type batchClock struct{ *portfake.Clock }

func (batchClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func indexOf(toks []ports.Token, t ports.Token) int {
	for i, x := range toks {
		if x == t {
			return i
		}
	}
	return -1
}

// TestPlanTrees: the engine's tree setting reaches speculative requests (TreeAuto: trees up to the block size
// under the adaptive policy, chains for a fixed block), a request's own setting replaces it, and plain
// decoding has none.
func TestPlanTrees(t *testing.T) {
	e, _ := fakeEngine(t, 8)
	e.Tree = speculative.TreeConfig{Budget: TreeAuto, Width: 3}
	plan := func(r Request) speculative.TreeConfig {
		r.Prompt = []ports.Token{1, 2}
		p, err := e.Plan(r)
		require.NoError(t, err)
		return p.Config.Tree
	}
	assert.Equal(t, speculative.TreeConfig{Budget: 8, Width: 3}, plan(Request{Adaptive: true}))
	assert.Equal(t, speculative.TreeConfig{Budget: 12, Width: 3}, plan(Request{Adaptive: true, BlockSize: 12}))
	assert.Zero(t, plan(Request{}).Budget, "a fixed block keeps chains under TreeAuto")
	assert.Zero(t, plan(Request{Adaptive: true, BlockSize: 1}), "plain decoding")
	assert.Equal(t, speculative.TreeConfig{Budget: 5}, plan(Request{Tree: &speculative.TreeConfig{Budget: 5}}))
	e.Tree = speculative.TreeConfig{Budget: 6}
	assert.Equal(t, 6, plan(Request{}).Budget, "an explicit budget applies to fixed blocks too")
	_, err := e.Plan(Request{Prompt: []ports.Token{1, 2}, Tree: &speculative.TreeConfig{Budget: 1}})
	assert.ErrorContains(t, err, "tree budget 1")
}
