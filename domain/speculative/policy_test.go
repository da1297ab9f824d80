package speculative

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// simRound is one simulated round.
type simRound struct {
	bs     int
	reason string
	a      int // accepted drafts (not compared by the tests that compare whole rounds)
}

// simulate drives the policy with a cost curve and a per-slot acceptance probability (which may change
// with the round number), sampling acceptance from a fixed seed.
func simulate(p *depthPolicy, rounds int, cost func(bs int) time.Duration, accept func(round, slot int) float64) []simRound {
	return simulateSized(p, rounds, cost, func(round, _, slot int) float64 { return accept(round, slot) })
}

// simulateSized is simulate with an acceptance that may also depend on the block size the slot is drafted in.
func simulateSized(p *depthPolicy, rounds int, cost func(bs int) time.Duration, accept func(round, bs, slot int) float64) []simRound {
	return simulateSizedSeed(p, rounds, cost, accept, 0)
}

func simulateSizedSeed(p *depthPolicy, rounds int, cost func(bs int) time.Duration, accept func(round, bs, slot int) float64, seed uint64) []simRound {
	rng := rand.New(rand.NewPCG(1+seed, 2))
	out := make([]simRound, 0, rounds)
	for i := range rounds {
		d := p.choose(p.maxBS)
		bs, why := d.BlockSize, d.Code
		if bs < 1 || bs > p.maxBS {
			panic("policy chose an impossible block size")
		}
		a := 0
		for a < bs-1 && rng.Float64() < accept(i, bs, a+1) {
			a++
		}
		// Split the cost between draft and verify to exercise both inputs (plain rounds draft nothing).
		c := cost(bs)
		if bs == 1 {
			p.observe(bs, a, 0, 0, c, 0)
		} else {
			p.observe(bs, a, c/10, 0, c-c/10, 0)
		}
		out = append(out, simRound{bs: bs, reason: why, a: a})
	}
	return out
}

func countReasons(rs []simRound) map[string]int {
	m := map[string]int{}
	for _, r := range rs {
		m[r.reason]++
	}
	return m
}

func TestPolicyCheapVerifyHighAcceptancePicksLargeBlocks(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{})
	cost := func(bs int) time.Duration { return 10*time.Millisecond + time.Duration(bs)*200*time.Microsecond }
	rs := simulate(p, 400, cost, func(int, int) float64 { return 0.9 })
	// Plain decoding twice (the first round after prefill is a warm-up), then the largest (the drafter's
	// configured) block.
	assert.Equal(t, simRound{bs: 1, reason: reasonExplore}, simRound{bs: rs[0].bs, reason: rs[0].reason})
	assert.Equal(t, simRound{bs: 1, reason: reasonExplore}, simRound{bs: rs[1].bs, reason: rs[1].reason})
	assert.Equal(t, simRound{bs: p.maxBS, reason: reasonExplore}, simRound{bs: rs[2].bs, reason: rs[2].reason})
	large := 0
	for _, r := range rs[100:] {
		if r.reason == reasonBest && r.bs >= 12 {
			large++
		}
	}
	assert.Greater(t, large, 250, "mostly large blocks: %v %v", countReasons(rs), hist(rs[100:]))
	assert.Zero(t, countReasons(rs[100:])[reasonFallbackAR])
}

func TestPolicyExpensiveVerifyLowAcceptanceFallsBackAndProbes(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{ProbeEvery: 10})
	cost := func(bs int) time.Duration { return time.Duration(bs) * 10 * time.Millisecond }
	rs := simulate(p, 300, cost, func(int, int) float64 { return 0.3 })
	reasons := countReasons(rs[50:])
	assert.Greater(t, reasons[reasonFallbackAR], 200, "mostly plain decoding: %v", reasons)
	assert.Positive(t, reasons[reasonProbe], "still probes: %v", reasons)
	last := -1
	for i, r := range rs {
		if r.reason == reasonFallbackAR {
			assert.Equal(t, 1, r.bs)
		}
		if r.reason == reasonProbe {
			assert.Equal(t, 2, r.bs, "in fallback the probe is the most promising (here the cheapest) block (round %d)", i)
			if last >= 0 {
				assert.GreaterOrEqual(t, i-last, 10, "probes at least ProbeEvery rounds apart (round %d)", i)
			}
			last = i
		}
	}
	// Never losing: after the exploring rounds the run commits tokens at ≥ 95 % of plain decoding's rate
	// (10 ms a token). The exploring round itself now verifies the largest block, here 16 plain steps (5% of
	// this short run on its own), and is outside the probe budget: it is the one measurement of the drafter's
	// own regime, not a probe.
	var spent time.Duration
	tokens := 0
	for _, r := range rs[3:] {
		spent += cost(r.bs)
		tokens += r.a + 1
	}
	assert.GreaterOrEqual(t, float64(tokens)*10e-3/spent.Seconds(), 0.95, "%v", countReasons(rs))
}

// TestPolicyProbeBudgetBoundsTheLoss: a drafter that is never right and a verify that costs as much as a
// plain step per row: the probes' loss stays within the budget, for short and long generations.
func TestPolicyProbeBudgetBoundsTheLoss(t *testing.T) {
	for _, rounds := range []int{64, 128, 1000} {
		for _, budget := range []float64{0, 0.05} {
			p := newDepthPolicy(16, PolicyConfig{ProbeBudget: budget})
			cost := func(bs int) time.Duration {
				if bs == 1 {
					return time.Millisecond
				}
				return 3*time.Millisecond + time.Duration(bs)*time.Millisecond
			}
			rs := simulate(p, rounds, cost, func(int, int) float64 { return 0 })
			b := budget
			if b == 0 {
				b = defaultProbeBudget
			}
			// The first speculative round (explore, the largest block) is spent before any budget exists; after
			// it, a probe runs only when its expected loss still fits the budget, so the bound holds after every
			// round, not just at the end (short generations included), up to one probe: the exploring round
			// measures only the largest block, so the first probe's cost is an interpolation between it and
			// plain decoding, and may fall short of what the probe then costs (here the 3 ms a speculative
			// round pays beyond its rows).
			explore := cost(p.maxBS) - time.Millisecond
			var worst time.Duration
			for bs := 2; bs <= p.maxBS; bs++ {
				worst = max(worst, cost(bs)-time.Millisecond)
			}
			var spent time.Duration
			tokens := 0
			for i, r := range rs {
				spent += cost(r.bs)
				tokens += r.a + 1
				bound := time.Duration(float64(tokens)*float64(time.Millisecond)*(1+b)) + explore + worst
				require.LessOrEqual(t, spent, bound, "rounds %d budget %v, after round %d: %v", rounds, budget, i, countReasons(rs))
			}
		}
	}
}

func TestPolicyRecoversAfterRegimeChange(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{ProbeEvery: 8})
	cost := func(bs int) time.Duration { return 10*time.Millisecond + time.Duration(bs)*time.Millisecond }
	const change = 300
	rs := simulate(p, 600, cost, func(round, _ int) float64 {
		if round < change {
			return 0.05
		}
		return 0.95
	})
	before := countReasons(rs[100:change])
	assert.Greater(t, before[reasonFallbackAR], 150, "bad drafts: plain decoding %v", before)
	recovered := -1
	for i := change; i < len(rs); i++ {
		if rs[i].reason == reasonBest && rs[i].bs >= 8 {
			recovered = i
			break
		}
	}
	require.NotEqual(t, -1, recovered, "never recovered")
	assert.LessOrEqual(t, recovered-change, 2*8, "speculates again within two probe intervals")
	// The throughput curve is flat near its optimum (bs 10..16 within 7 %), so any of those is right.
	after := 0
	for _, r := range rs[change+50:] {
		if r.bs >= 10 {
			after++
		}
	}
	assert.Greater(t, after, 200, "of 250 rounds")
}

func TestPolicyPicksAnalyticOptimum(t *testing.T) {
	// Exactly 5 drafts accepted every round: E[committed | bs] = min(bs, 6); cost 10+bs ms, so the
	// throughput min(bs,6)/(10+bs) peaks at bs = 6.
	p := newDepthPolicy(16, PolicyConfig{ProbeEvery: 1000})
	cost := func(bs int) time.Duration { return time.Duration(10+bs) * time.Millisecond }
	rs := simulate(p, 200, cost, func(_, slot int) float64 {
		if slot <= 5 {
			return 1
		}
		return 0
	})
	for _, r := range rs[50:] {
		assert.Equal(t, simRound{bs: 6, reason: reasonBest, a: r.a}, r)
	}
}

func TestPolicyModerateRegimePicksMiddleBlock(t *testing.T) {
	// Acceptance 0.7, cost 10+2·bs: the optimum is bs 4 (rates 0.137, 0.141, 0.139 at 3, 4, 5).
	p := newDepthPolicy(16, PolicyConfig{})
	cost := func(bs int) time.Duration { return time.Duration(10+2*bs) * time.Millisecond }
	rs := simulate(p, 600, cost, func(int, int) float64 { return 0.7 })
	mid := 0
	for _, r := range rs[100:] {
		if r.reason == reasonBest && r.bs >= 3 && r.bs <= 6 {
			mid++
		}
	}
	assert.Greater(t, mid, 350, "%v", countReasons(rs))
}

// TestPolicyPricesDraftsByTheirSize: a drafter drafts exactly bs slots, so the policy prices an unmeasured
// block's draft from the measured ones' slope, below and above them, not as the nearest measured draft.
func TestPolicyPricesDraftsByTheirSize(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{})
	ms := time.Millisecond
	p.observe(1, 0, 0, 0, 10*ms, 0) // warm-up round: not a sample
	p.observe(1, 0, 0, 0, 10*ms, 0)
	p.observe(4, 3, 4*ms, 0, 12*ms, 0)
	p.observe(8, 7, 8*ms, 0, 14*ms, 0)
	for _, c := range []struct {
		bs   int
		want time.Duration // draft (1 ms a slot, as measured at 4 and 8) + verify (interpolated / extrapolated)
	}{
		{2, 2*ms + 10*ms + 2*ms/3},
		{4, 4*ms + 12*ms},
		{6, 6*ms + 13*ms},
		{8, 8*ms + 14*ms},
		{16, 16*ms + 18*ms},
	} {
		assert.InDelta(t, float64(c.want), p.costOf(c.bs), 1, "block %d", c.bs)
	}
	// With one measured draft there is no slope yet: other sizes' drafts are priced as that one.
	q := newDepthPolicy(16, PolicyConfig{})
	q.observe(1, 0, 0, 0, 10*ms, 0)
	q.observe(1, 0, 0, 0, 10*ms, 0)
	q.observe(8, 7, 8*ms, 0, 14*ms, 0)
	assert.InDelta(t, float64(8*ms+10*ms+4*ms/7), q.costOf(2), 1)
}

func TestPolicyRespectsLimit(t *testing.T) {
	p := newDepthPolicy(8, PolicyConfig{})
	d := p.choose(3)
	bs, why := d.BlockSize, d.Code
	assert.Equal(t, 1, bs, "the first rounds measure plain decoding")
	assert.Equal(t, reasonExplore, why)
	p.observe(1, 0, 0, 0, time.Millisecond, 0)
	d = p.choose(3)
	bs, why = d.BlockSize, d.Code
	assert.Equal(t, 1, bs, "the first plain round was a warm-up: measured again")
	assert.Equal(t, reasonExplore, why)
	p.observe(1, 0, 0, 0, time.Millisecond, 0)
	d = p.choose(3)
	bs, why = d.BlockSize, d.Code
	assert.Equal(t, 3, bs)
	assert.Equal(t, reasonLength, why)
	one := newDepthPolicy(1, PolicyConfig{})
	d = one.choose(1)
	bs, why = d.BlockSize, d.Code
	assert.Equal(t, 1, bs)
	assert.Equal(t, reasonFixed, why)
	one.observe(5, 3, 1, 1, 1, 1) // out of range: ignored, no panic
}

func TestAdaptiveGeneration(t *testing.T) {
	prompt := testPrompt(6, 32)
	tests := []struct {
		name       string
		verify     func(n int) time.Duration
		propose    func(m *portfake.Model) portfake.Proposer
		wantLarge  bool
		wantNoSpec bool
	}{
		{"cheap verify perfect drafts", func(n int) time.Duration { return time.Duration(1000+n) * time.Microsecond },
			func(m *portfake.Model) portfake.Proposer { return portfake.Perfect(m) }, true, false},
		{"dear verify random drafts", func(n int) time.Duration { return time.Duration(n) * time.Millisecond },
			func(*portfake.Model) portfake.Proposer { return portfake.RandomTokens(32, 5) }, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := portfake.NewClock(0)
			cfg := portfake.Config{Tape: true, Clock: clock, ForwardCost: tt.verify}
			m := portfake.MustNew(cfg)
			r := newRig(t, cfg, tt.propose(m), portfake.DrafterConfig{BlockSize: 8, Clock: clock,
				DraftCost: func(int) time.Duration { return 100 * time.Microsecond }})
			dec, err := New(Config{BlockSize: 8, Adaptive: true, MaxTokens: 300, Policy: PolicyConfig{ProbeEvery: 10}}, clock, nil)
			require.NoError(t, err)
			seq := append([]ports.Token(nil), prompt...)
			res, err := dec.Generate(t.Context(), r.sess, r.draft, prompt, func(c []ports.Token) error {
				seq = append(seq, c...)
				r.requireCommitted(t, seq)
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, oracle(t, m, prompt, 300), res.Tokens)
			spec, large, fallback := 0, 0, 0
			for _, rs := range res.Stats.Rounds {
				if rs.BlockSize > 1 {
					spec++
				}
				if rs.BlockSize >= 6 {
					large++
				}
				if rs.Policy == reasonFallbackAR {
					fallback++
				}
			}
			drafting := 0
			for _, c := range r.draft.Calls() {
				if c.BS > 1 {
					drafting++
				}
			}
			assert.Equal(t, spec, drafting, "plain rounds make no drafting call")
			if tt.wantLarge {
				assert.Greater(t, large, len(res.Stats.Rounds)*3/4)
			}
			if tt.wantNoSpec {
				assert.Greater(t, fallback, len(res.Stats.Rounds)*3/4)
				assert.Positive(t, spec, "probes still speculate now and then")
			}
		})
	}
}

func hist(rs []simRound) map[int]int {
	m := map[int]int{}
	for _, r := range rs {
		m[r.bs]++
	}
	return m
}

// TestPolicyMemoryCarriesAcrossGenerations: with a shared PolicyMemory, the second generation starts from the
// first one's measurements (no exploring rounds, plain decoding from its first round when drafts never pay),
// stays lossless, and a memory for another largest block is not reused.
func TestPolicyMemoryCarriesAcrossGenerations(t *testing.T) {
	prompt := testPrompt(6, 32)
	mem := NewPolicyMemory()
	run := func(bs int) Result {
		clock := portfake.NewClock(0)
		cfg := portfake.Config{Tape: true, Clock: clock, ForwardCost: func(n int) time.Duration { return time.Duration(n) * time.Millisecond }}
		m := portfake.MustNew(cfg)
		r := newRig(t, cfg, portfake.RandomTokens(32, 5), portfake.DrafterConfig{BlockSize: 8, Clock: clock,
			DraftCost: func(int) time.Duration { return 100 * time.Microsecond }})
		dec, err := New(Config{BlockSize: bs, Adaptive: true, MaxTokens: 60, Policy: PolicyConfig{Memory: mem}}, clock, nil)
		require.NoError(t, err)
		res, err := dec.Generate(t.Context(), r.sess, r.draft, prompt, func([]ports.Token) error { return nil })
		require.NoError(t, err)
		assert.Equal(t, oracle(t, m, prompt, 60), res.Tokens)
		return res
	}
	reasons := func(res Result) map[string]int {
		m := map[string]int{}
		for _, rs := range res.Stats.Rounds {
			m[rs.Policy]++
		}
		return m
	}
	first := run(8)
	assert.Equal(t, 3, reasons(first)[reasonExplore], "%v", reasons(first))
	second := run(8)
	assert.Zero(t, reasons(second)[reasonExplore], "%v", reasons(second))
	assert.Equal(t, reasonFallbackAR, second.Stats.Rounds[0].Policy)
	other := run(4)
	assert.Equal(t, 3, reasons(other)[reasonExplore], "another largest block explores anew: %v", reasons(other))
}

// TestPolicyWarmUpRoundDoesNotPinSpeculation: the first plain round after prefill costs several steady steps
// (one-off warm-up); it must not make a useless drafter look worth running. Plain decoding is measured again and
// the policy settles on it from the first choice on: every round after the exploring ones that is not a probe
// is plain. (Probes may now come within these 48 rounds: the exploring round of the largest block is not
// charged to the probe budget.)
func TestPolicyWarmUpRoundDoesNotPinSpeculation(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{})
	first := true
	cost := func(bs int) time.Duration {
		if bs == 1 {
			if first {
				first = false
				return 60 * time.Millisecond
			}
			return 24 * time.Millisecond
		}
		return 30*time.Millisecond + time.Duration(bs)*3*time.Millisecond
	}
	rs := simulate(p, 48, cost, func(int, int) float64 { return 0 })
	for i, r := range rs[3:] {
		if r.reason != reasonProbe {
			assert.Equal(t, simRound{bs: 1, reason: reasonFallbackAR}, simRound{bs: r.bs, reason: r.reason}, "round %d: %v", i+3, countReasons(rs))
		}
	}
}

// TestPolicyWarmUpRoundOfLaterGenerations: with a memory, every generation's first plain round (warm-up after
// its prefill) is left out of the plain-decoding cost, not only the first generation's.
func TestPolicyWarmUpRoundOfLaterGenerations(t *testing.T) {
	mem := NewPolicyMemory()
	p := mem.load(8, PolicyConfig{})
	p.observe(1, 0, 0, 0, 60*time.Millisecond, 0)
	p.observe(1, 0, 0, 0, 24*time.Millisecond, 0)
	require.True(t, p.verify[0].ok)
	assert.Equal(t, float64(24*time.Millisecond), p.verify[0].v, "the first round was a warm-up")
	mem.store(p)

	q := mem.load(8, PolicyConfig{})
	q.observe(1, 0, 0, 0, 60*time.Millisecond, 0)
	assert.Equal(t, float64(24*time.Millisecond), q.verify[0].v, "a later generation's first round is a warm-up too")
	q.observe(1, 0, 0, 0, 20*time.Millisecond, 0)
	assert.Less(t, q.verify[0].v, float64(24*time.Millisecond), "later rounds are samples")
}

// TestPendingTapsStayBounded: while the policy decodes plainly, the taps waiting for the drafter stay within
// MaxPendingRounds (the oldest are fed one per round, timed as that round's drafting), the drafter's context
// stays the committed prefix, and the output is unchanged.
func TestPendingTapsStayBounded(t *testing.T) {
	prompt := testPrompt(6, 32)
	const maxPending = 4
	clock := portfake.NewClock(0)
	cfg := portfake.Config{Tape: true, Clock: clock, ForwardCost: func(n int) time.Duration { return time.Duration(n) * time.Millisecond }}
	m := portfake.MustNew(cfg)
	r := newRig(t, cfg, portfake.RandomTokens(32, 5), portfake.DrafterConfig{BlockSize: 8, Clock: clock,
		DraftCost: func(int) time.Duration { return 100 * time.Microsecond }})
	dec, err := New(Config{BlockSize: 8, Adaptive: true, MaxTokens: 200, Policy: PolicyConfig{MaxPendingRounds: maxPending}}, clock, nil)
	require.NoError(t, err)
	seq := append([]ports.Token(nil), prompt...)
	emits, maxLag := 0, 0
	res, err := dec.Generate(t.Context(), r.sess, r.draft, prompt, func(c []ports.Token) error {
		seq = append(seq, c...)
		r.requireCommitted(t, seq)
		// From the 11th emit on the prefill's taps have been fed too (they are the oldest entry).
		if emits++; emits > 10 {
			maxLag = max(maxLag, len(seq)-1-r.draft.Len())
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, oracle(t, m, prompt, 200), res.Tokens)
	// At an emit the round's own feed has not run yet (it follows the emit): one entry more.
	assert.LessOrEqual(t, maxLag, maxPending+1, "positions whose taps still wait for the drafter")
	fed := 0
	for _, rs := range res.Stats.Rounds {
		if rs.BlockSize == 1 && rs.DraftTime > 0 {
			fed++
		}
	}
	assert.Greater(t, fed, len(res.Stats.Rounds)/2, "plain rounds past the bound feed the drafter and time it")
	_, err = New(Config{BlockSize: 8, Adaptive: true, MaxTokens: 10, Policy: PolicyConfig{MaxPendingRounds: -1}}, clock, nil)
	assert.ErrorContains(t, err, "max pending rounds -1")
}

// fakeBatch prices rounds of a batch of 1+others sequences each verifying the same rows, with a forward
// costing forward(total rows) and a draft phase of draft when they draft.
type fakeBatch struct {
	others  int
	forward func(rows int) time.Duration
	draft   time.Duration
	alone   bool
}

func (f fakeBatch) RoundCost(rows int) (float64, float64, bool) {
	if f.alone {
		return 0, 0, false
	}
	ns := float64(f.forward((f.others + 1) * rows))
	if rows > 1 {
		ns += float64(f.draft)
	}
	return ns, float64(f.others), true
}

// TestPolicyPricesBlocksInTheBatch: the same measurements lead to different block sizes under different
// batches. Alone (or with no estimate) the sequence's own costs decide, and speculation pays. In a batch
// whose forward is compute bound (time proportional to the rows), a block's extra rows slow every sequence
// of the round, and the sequence decodes plainly; in one whose forward costs the same for any row count
// (weights streamed once), the drafts are nearly free and it speculates with a large block.
func TestPolicyPricesBlocksInTheBatch(t *testing.T) {
	cost := func(bs int) time.Duration { return 10*time.Millisecond + time.Duration(bs)*500*time.Microsecond }
	accept := func(int, int) float64 { return 0.8 }
	run := func(b BatchCost) []simRound {
		p := newDepthPolicy(8, PolicyConfig{Batch: b})
		return simulate(p, 300, cost, accept)
	}
	last := func(rs []simRound) simRound { return rs[len(rs)-1] }
	solo := run(nil)
	require.Greater(t, last(solo).bs, 1, "alone, speculation pays: %v", last(solo))
	assert.Equal(t, solo, run(fakeBatch{alone: true}), "without an estimate the policy is the solo one")

	computeBound := run(fakeBatch{others: 7, draft: time.Millisecond,
		forward: func(rows int) time.Duration { return time.Duration(rows) * 10 * time.Millisecond }})
	assert.Equal(t, simRound{bs: 1, reason: reasonFallbackAR}, last(computeBound), "compute bound: a block slows the whole batch")
	soloProbes := countReasons(run(fakeBatch{others: 0, draft: time.Millisecond,
		forward: func(rows int) time.Duration { return time.Duration(rows) * 10 * time.Millisecond }}))[reasonProbe]
	batchProbes := countReasons(computeBound)[reasonProbe]
	require.Positive(t, soloProbes)
	assert.Less(t, batchProbes, soloProbes, "beside 7 others a sequence probes less often (its probes delay them all)")

	weightBound := run(fakeBatch{others: 7, draft: time.Millisecond,
		forward: func(rows int) time.Duration { return 10 * time.Millisecond }})
	assert.Equal(t, reasonBest, last(weightBound).reason)
	assert.Equal(t, 8, last(weightBound).bs, "weight bound: the largest block rides along for free")
}

// TestBatchedProbesStayWithinTheBudget: a probe in a batched round delays every sequence of the round, so its
// loss counts once per sequence. Beside 7 others, in a batch where speculation does not pay, the time all
// of one sequence's probes cost the batch (each probe's extra time, eight times) stays within the probe budget
// of the sequence's own decoding time, plus one probe: the batch's probes together then cost each sequence
// about the budget, as one sequence's probes cost it alone.
func TestBatchedProbesStayWithinTheBudget(t *testing.T) {
	cost := func(bs int) time.Duration { return time.Duration(bs) * 10 * time.Millisecond }
	b := fakeBatch{others: 7, draft: 2 * time.Millisecond, forward: func(rows int) time.Duration { return time.Duration(rows) * 10 * time.Millisecond }}
	p := newDepthPolicy(8, PolicyConfig{Batch: b})
	rs := simulate(p, 3000, cost, func(int, int) float64 { return 0.5 })
	var elapsed, lost, worst float64
	probes := 0
	for _, r := range rs {
		c := float64(cost(r.bs))
		elapsed += c
		if r.reason == reasonProbe && r.bs > 1 {
			probes++
			l := 8 * max(0, c-float64(r.a+1)*float64(cost(1)))
			lost += l
			worst = max(worst, l)
		}
	}
	require.Positive(t, probes, "the sequence still probes")
	assert.Equal(t, reasonFallbackAR, rs[len(rs)-1].reason)
	assert.LessOrEqual(t, lost, defaultProbeBudget*elapsed+worst, "%d probes cost the batch %.0f ms of %.0f ms", probes, lost/1e6, elapsed/1e6)
}

// TestBatchedPlainProbesAreNotHeldBack: a plain-decoding probe while speculating adds nothing to the round the
// others share, so it is charged as a solo probe: beside 7 others in a batch where the largest block rides
// along for free, the baseline is refreshed about every second probe interval (16 rounds × 8 sequences; the
// probes in between measure the runner-up block size, since acceptance is estimated per size, where before
// every probe beside the largest block was plain).
func TestBatchedPlainProbesAreNotHeldBack(t *testing.T) {
	cost := func(bs int) time.Duration { return 10*time.Millisecond + time.Duration(bs)*500*time.Microsecond }
	b := fakeBatch{others: 7, draft: time.Millisecond, forward: func(int) time.Duration { return 10 * time.Millisecond }}
	p := newDepthPolicy(8, PolicyConfig{Batch: b})
	const rounds = 6000
	rs := simulate(p, rounds, cost, func(int, int) float64 { return 0.8 })
	plain := 0
	for _, r := range rs {
		if r.reason == reasonProbe && r.bs == 1 {
			plain++
		}
	}
	assert.Equal(t, 8, rs[len(rs)-1].bs)
	assert.GreaterOrEqual(t, plain, rounds/(defaultProbeEvery*8)/2*8/10, "plain probes in %d rounds", rounds)
}
