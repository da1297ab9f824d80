package generation

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/domain/prefixcache"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// runLogprobs runs p and returns the tokens and the log-probabilities Run emitted with them.
func runLogprobs(t *testing.T, e *Engine, p Plan, o RunOptions) ([]ports.Token, []ports.TokenLogprob) {
	t.Helper()
	var toks []ports.Token
	var lps []ports.TokenLogprob
	o.EmitLogprobs = func(ts []ports.Token, ls []ports.TokenLogprob) error {
		require.Len(t, ls, len(ts))
		toks, lps = append(toks, ts...), append(lps, ls...)
		return nil
	}
	out, err := e.Run(t.Context(), p, o)
	require.NoError(t, err)
	require.Equal(t, out.Tokens, toks)
	return toks, lps
}

// logSoftmax is the direct computation: log softmax of the row the toy model gives after history, as the
// session hands it out (float32).
func logSoftmax(t *testing.T, m *portfake.Model, history []ports.Token) []float64 {
	t.Helper()
	lg, err := m.Logits(history)
	require.NoError(t, err)
	mx := math.Inf(-1)
	for _, v := range lg {
		mx = max(mx, float64(float32(v)))
	}
	var sum float64
	for _, v := range lg {
		sum += math.Exp(float64(float32(v)) - mx)
	}
	out := make([]float64, len(lg))
	for j, v := range lg {
		out[j] = float64(float32(v)) - mx - math.Log(sum)
	}
	return out
}

// Every generated token's log-probability is the target's own at its position: the same bits with and without
// a drafter, at every block size, under the adaptive policy, after a prefix-cache hit, batched with other
// requests, greedy or sampled — and equal to the log-softmax of the target's logits there.
func TestRunLogprobsExactUnderSpeculation(t *testing.T) {
	e, m := fakeEngine(t, 8)
	prompt := []ports.Token{3, 1, 4, 1, 5, 9, 2, 6}
	const top = 5
	base, err := e.Plan(Request{Prompt: prompt, MaxTokens: 24, BlockSize: 1, Logprobs: true, TopLogprobs: top})
	require.NoError(t, err)
	want, wantLP := runLogprobs(t, e, base, RunOptions{})
	require.NotEmpty(t, want)
	for i, lp := range wantLP {
		ls := logSoftmax(t, m, append(append([]ports.Token{}, prompt...), want[:i]...))
		assert.Equal(t, want[i], lp.Token)
		assert.InDelta(t, ls[want[i]], lp.Logprob, 1e-9, "token %d", i)
		require.Len(t, lp.Top, top)
		for j, alt := range lp.Top {
			assert.InDelta(t, ls[alt.Token], alt.Logprob, 1e-9)
			if j > 0 {
				assert.GreaterOrEqual(t, lp.Top[j-1].Logprob, alt.Logprob, "sorted")
			}
		}
		assert.Equal(t, lp.Top[0].Token, want[i], "greedy: the chosen token is the most likely")
	}

	cache, err := prefixcache.New(prefixcache.Config{Budget: 1 << 20, Every: 4}, portfake.NewClock(time.Millisecond))
	require.NoError(t, err)
	for _, tc := range []struct {
		bs       int
		adaptive bool
		rollback speculative.RollbackMode
	}{{1, false, 0}, {2, false, 0}, {4, false, 0}, {8, false, 0}, {8, true, 0}, {4, false, speculative.RollbackRecompute},
		{8, false, speculative.RollbackReplay}} {
		for _, withCache := range []bool{false, true} {
			t.Run(fmt.Sprintf("block %d adaptive %v rollback %v cache %v", tc.bs, tc.adaptive, tc.rollback, withCache), func(t *testing.T) {
				p, err := e.Plan(Request{Prompt: prompt, MaxTokens: 24, BlockSize: tc.bs, Adaptive: tc.adaptive,
					Rollback: tc.rollback, Logprobs: true, TopLogprobs: top})
				require.NoError(t, err)
				o := RunOptions{Clock: portfake.NewClock(time.Millisecond)}
				if withCache {
					o.PrefixCache = cache.Partition("")
				}
				got, lps := runLogprobs(t, e, p, o)
				assert.Equal(t, want, got)
				assert.Equal(t, wantLP, lps)
			})
		}
	}
	assert.Positive(t, cache.Stats().Hits, "later runs restored a cached prefix")

	t.Run("batched", func(t *testing.T) {
		sched, err := batch.New(batch.Config{}, batchClock{portfake.NewClock(time.Millisecond)}, e.Target, e.Drafter)
		require.NoError(t, err)
		var wg sync.WaitGroup
		toks := make([][]ports.Token, 6)
		lps := make([][]ports.TokenLogprob, 6)
		for i := range toks {
			wg.Go(func() {
				p, err := e.Plan(Request{Prompt: prompt, MaxTokens: 24, BlockSize: 1 + i, Logprobs: true, TopLogprobs: top})
				if !assert.NoError(t, err) {
					return
				}
				toks[i], lps[i] = runLogprobs(t, e, p, RunOptions{Batch: sched, PrefillChunk: 3})
			})
		}
		wg.Wait()
		for i := range toks {
			assert.Equal(t, want, toks[i], "member %d", i)
			assert.Equal(t, wantLP, lps[i], "member %d", i)
		}
	})

	// Sampling changes which tokens come out, never the log-probabilities of a given sequence: they are of the
	// target's distribution at temperature 1, whatever the request's transforms.
	t.Run("sampled", func(t *testing.T) {
		var first []ports.TokenLogprob
		for _, bs := range []int{1, 3, 8} {
			p, err := e.Plan(Request{Prompt: prompt, MaxTokens: 24, BlockSize: bs, Sampling: ports.SamplingParams{Temperature: 0.7, TopK: 5},
				Seed: 11, Verify: speculative.VerifyMatch, Logprobs: true, TopLogprobs: 2})
			require.NoError(t, err)
			got, lps := runLogprobs(t, e, p, RunOptions{})
			for i, lp := range lps {
				ls := logSoftmax(t, m, append(append([]ports.Token{}, prompt...), got[:i]...))
				assert.InDelta(t, ls[got[i]], lp.Logprob, 1e-9)
			}
			if first == nil {
				first = lps
			} else {
				assert.Equal(t, first, lps, "seeded (sample-and-match): the same tokens and values at block %d", bs)
			}
		}
	})
}

// Under a constraint the log-probabilities are of the masked distribution the decoder verified against:
// tokens the grammar forbids are never listed, and the allowed ones' probabilities sum to 1.
func TestRunLogprobsUnderConstraint(t *testing.T) {
	g, err := grammar.CompileSchema(t.Context(), []byte(`{"enum":["ab","ba","aab","b"]}`))
	require.NoError(t, err)
	mt, err := grammar.NewMatcher(g, grammar.NewVocab(distVocab), []int32{distEOS})
	require.NoError(t, err)
	model := portfake.MustNew(portfake.Config{Vocab: len(distVocab), Seed: 5, Sharpness: 2, EOS: []ports.Token{distEOS}, Tape: true})
	d, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, Propose: portfake.RandomTokens(len(distVocab), 9)})
	require.NoError(t, err)
	e := &Engine{Target: model, Drafter: d}
	prompt := []ports.Token{1, 2, 3}
	var first []ports.TokenLogprob
	for _, bs := range []int{1, 2, 4} {
		p, err := e.Plan(Request{Prompt: prompt, MaxTokens: 12, BlockSize: bs, Constraint: mt, Logprobs: true, TopLogprobs: ports.MaxTopLogprobs})
		require.NoError(t, err)
		toks, lps := runLogprobs(t, e, p, RunOptions{})
		require.NotEmpty(t, toks)
		for i, lp := range lps {
			var sum float64
			listed := false
			for _, alt := range lp.Top {
				sum += math.Exp(alt.Logprob)
				listed = listed || alt.Token == toks[i]
			}
			assert.InDelta(t, 1, sum, 1e-9, "position %d: the allowed tokens carry all the mass", i)
			assert.Less(t, len(lp.Top), len(distVocab), "position %d: some tokens are forbidden", i)
			assert.True(t, listed)
		}
		if first == nil {
			first = lps
		} else {
			assert.Equal(t, first, lps, "block %d", bs)
		}
	}
}

func TestPlanChecksTopLogprobs(t *testing.T) {
	e, _ := fakeEngine(t, 4)
	for _, req := range []Request{
		{Prompt: []ports.Token{1}, Logprobs: true, TopLogprobs: 21},
		{Prompt: []ports.Token{1}, Logprobs: true, TopLogprobs: -1},
		{Prompt: []ports.Token{1}, TopLogprobs: 2},
	} {
		_, err := e.Plan(req)
		var re *ports.RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, "top_logprobs", re.Param)
	}
}
