package speculative

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// randomRanked is portfake.Ranked with the greedy token's rank drawn afresh at every slot from a seeded source:
// rank r with probability weights[r], past the width otherwise. A round's accepted length then varies as a real
// drafter's does, so one round says little about a tree's yield.
func randomRanked(m *portfake.Model, width int, weights []float64, calibrated bool, seed uint64) portfake.Proposer {
	rnd := rand.New(rand.NewPCG(seed, 7))
	return func(history []ports.Token, bs int) (ports.Proposal, error) {
		truth, err := m.GreedyContinuation(history, bs-1)
		if err != nil {
			return ports.Proposal{}, err
		}
		var p ports.Proposal
		for _, g := range truth {
			r, u := width, rnd.Float64()
			for i, w := range weights {
				if u < w {
					r = i
					break
				}
				u -= w
			}
			cands := make([]ports.Candidate, 0, width)
			other := g
			for j := range width {
				tok := g
				if j != r {
					other = (other + 1) % ports.Token(m.Info().VocabSize)
					tok = other
				}
				prob := 1 / float64(int(2)<<j)
				if calibrated && j < len(weights) {
					prob = weights[j]
				}
				cands = append(cands, ports.Candidate{Token: tok, Prob: prob})
			}
			p.Tokens = append(p.Tokens, cands[0].Token)
			p.Top = append(p.Top, cands)
		}
		return p, nil
	}
}

// serverScenario is a drafter and a target's costs, run over a server's worth of requests.
type serverScenario struct {
	weights    []float64 // randomRanked's rank weights
	calibrated bool      // the candidates' probabilities are the rank weights (else 1/2, 1/4, …)
	forward    func(rows int) time.Duration
	draft      time.Duration // a block's final draft call
}

// serverVariants are the fixed choices a server could be configured with, and the adaptive policy weighing
// them all (the last).
var serverVariants = []struct {
	name string
	cfg  Config
}{
	{"plain", Config{BlockSize: 1}},
	{"chain 16", Config{BlockSize: 16}},
	{"tree 4", Config{BlockSize: 16, Tree: TreeConfig{Budget: 4, Width: 4}}},
	{"tree 8", Config{BlockSize: 16, Tree: TreeConfig{Budget: 8, Width: 4}}},
	{"tree 16", Config{BlockSize: 16, Tree: TreeConfig{Budget: 16, Width: 4}}},
	{"adaptive", Config{BlockSize: 16, Adaptive: true, Tree: TreeConfig{Budget: 16, Width: 4}}},
}

// runServer decodes gens requests of tokens each with every variant (one remembered policy per variant, as a
// server keeps) and returns each variant's total decode time and, for the adaptive policy, how many rounds it
// ran of each kind (policy reason/block size, "t" for a tree). Every output is checked against plain decoding.
func runServer(t *testing.T, sc serverScenario, seed uint64, gens, tokens int) (map[string]time.Duration, map[string]int) {
	t.Helper()
	times, rounds := map[string]time.Duration{}, map[string]int{}
	for _, v := range serverVariants {
		mem := NewPolicyMemory()
		for g := range gens {
			clock := portfake.NewClock(0)
			mcfg := portfake.Config{Tape: true, Clock: clock, ForwardCost: sc.forward}
			m := portfake.MustNew(mcfg)
			prop := randomRanked(m, 4, sc.weights, sc.calibrated, seed*100+uint64(g))
			r := newRig(t, mcfg, prop, portfake.DrafterConfig{BlockSize: 16, Clock: clock, DraftCost: func(bs int) time.Duration {
				if bs == 1 {
					return 30 * time.Microsecond // a context-only catch-up call
				}
				return sc.draft
			}})
			cfg := v.cfg
			cfg.MaxTokens, cfg.Policy.Memory = tokens, mem
			dec, err := New(cfg, clock, nil)
			require.NoError(t, err)
			prompt := testPrompt(5+g+int(seed), 32)
			var draft ports.DraftSession
			if cfg.BlockSize > 1 {
				draft = r.draft
			}
			res, err := dec.Generate(t.Context(), r.sess, draft, prompt, func([]ports.Token) error { return nil })
			require.NoError(t, err)
			want, err := m.GreedyContinuation(prompt, tokens)
			require.NoError(t, err)
			require.Equal(t, want, res.Tokens, "%s: the policy only chooses; the output is plain decoding's", v.name)
			times[v.name] += res.Stats.DecodeTime
			if v.name == "adaptive" {
				for _, rs := range res.Stats.Rounds {
					key := fmt.Sprintf("%s/%d", rs.Policy, rs.BlockSize)
					if rs.Tree != nil {
						key = fmt.Sprintf("%s/t%d", rs.Policy, rs.Decision.Tree)
					}
					rounds[key]++
				}
			}
		}
	}
	return times, rounds
}

// bestFixed returns the fastest fixed variant and its time.
func bestFixed(times map[string]time.Duration) (string, time.Duration) {
	name, best := "", time.Duration(0)
	for _, v := range serverVariants[:len(serverVariants)-1] {
		if best == 0 || times[v.name] < best {
			name, best = v.name, times[v.name]
		}
	}
	return name, best
}

func roundsLine(rounds map[string]int) string {
	keys := make([]string, 0, len(rounds))
	for k := range rounds {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s:%d", k, rounds[k])
	}
	return b.String()
}

// gocoderForward is a target's forward cost like gocoder's on a CPU: a plain step 1.25 ms, a 16-row verify
// about three and a half plain steps.
func gocoderForward(rows int) time.Duration { return time.Duration(1050+200*rows) * time.Microsecond }

// TestPolicyServerTax: over a server's worth of requests (one remembered policy, 12 × 128 tokens) with a
// drafter and costs like gocoder's on a CPU, the adaptive policy decodes within a few percent of the best
// fixed choice. In "tree pays" a verification tree runs 1.08–1.12× plain decoding (as a fixed 8-node tree does
// on gocoder) while every chain loses to plain decoding: acceptance varies from round to round, so a few
// unlucky rounds must not rule the tree out (before the tree arms kept their yield with its error, the policy
// ran 1.08–1.15× the fixed tree's time on these seeds). In "nothing pays" plain decoding is the best choice,
// and what the adaptive policy loses to it — exploring, probes, misjudged rounds — is its tax (2.5–4% before
// the probe budget shrank while probes confirm plain decoding, and trees were explored on their evidence).
func TestPolicyServerTax(t *testing.T) {
	const gens, tokens = 12, 128
	seeds := []uint64{1, 2, 3, 4, 5}
	cases := []struct {
		name      string
		sc        serverScenario
		wantBest  string  // the best fixed choice the scenario is built for (its name's prefix)
		maxToBest float64 // adaptive's time ÷ the best fixed choice's, at most, on every seed
		maxMean   float64 // … and on average over the seeds
	}{
		// The greedy token is the drafter's first candidate at 65% of slots and its second at 25%, with
		// probabilities that say so: chains stop early, trees branch where it pays.
		{"tree pays", serverScenario{weights: []float64{0.65, 0.25, 0.05, 0.02}, calibrated: true, forward: gocoderForward, draft: 850 * time.Microsecond},
			"tree", 1.035, 1.02},
		// The first candidate at 66% of slots, the others rarely, the probabilities 1/2, 1/4, …: a tree 8
		// runs about 0.87× plain decoding, a chain of 16 0.7×.
		{"nothing pays", serverScenario{weights: []float64{0.66, 0.1, 0.04, 0.02}, forward: gocoderForward, draft: 1100 * time.Microsecond},
			"plain", 1.025, 1.02},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sum float64
			for _, seed := range seeds {
				t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
					times, rounds := runServer(t, c.sc, seed, gens, tokens)
					name, best := bestFixed(times)
					toBest := float64(times["adaptive"]) / float64(best)
					sum += toBest
					t.Logf("decode times %v; adaptive %.3f× the best fixed choice (%s), %.3f× plain; plain ÷ tree 8 %.3f; adaptive rounds%s",
						times, toBest, name, float64(times["adaptive"])/float64(times["plain"]),
						float64(times["plain"])/float64(times["tree 8"]), roundsLine(rounds))
					require.True(t, strings.HasPrefix(name, c.wantBest), "the scenario's best fixed choice is %s, want %s", name, c.wantBest)
					if c.wantBest == "tree" {
						require.GreaterOrEqual(t, float64(times["plain"])/float64(best), 1.05, "the tree pays")
					}
					assert.LessOrEqual(t, toBest, c.maxToBest, "adaptive ÷ the best fixed choice (%s)", name)
				})
			}
			mean := sum / float64(len(seeds))
			t.Logf("adaptive ÷ the best fixed choice, mean over %d seeds: %.3f", len(seeds), mean)
			assert.LessOrEqual(t, mean, c.maxMean, "adaptive ÷ the best fixed choice, mean over the seeds")
		})
	}
}

// TestTreeYieldMean: a tree arm's yield average takes its first samples evenly (one unlucky first round does
// not set it), has a spread before its samples show one, and starts again when the yield shifts for good —
// but not on a stationary yield's noise.
func TestTreeYieldMean(t *testing.T) {
	const decay = defaultDecay * treeDecayShare
	var m mean
	for _, x := range []float64{0, 3, 3, 3} {
		m.add(x, decay)
	}
	assert.InDelta(t, 2.25, m.v, 1e-12, "the first samples averaged evenly")
	var zeros mean
	zeros.add(0, decay)
	zeros.add(0, decay)
	assert.Positive(t, zeros.spread(), "two rounds that accepted nothing still leave doubt")

	// A yield of 0–4 accepted drafts (mean 2.1), then a regime where trees accept little (mean 0.3).
	rnd := rand.New(rand.NewPCG(3, 4))
	draw := func(weights []float64) float64 {
		u := rnd.Float64()
		for i, w := range weights {
			if u < w {
				return float64(i)
			}
			u -= w
		}
		return float64(len(weights))
	}
	good, poor := []float64{0.15, 0.2, 0.2, 0.2}, []float64{0.75, 0.2}
	var y mean
	restarts := 0
	for range 5000 {
		n := y.n
		y.add(draw(good), decay)
		if y.n < n {
			restarts++
		}
	}
	assert.Zero(t, restarts, "a stationary yield never starts the average again")
	assert.InDelta(t, 2.1, y.v, 0.25)
	followed := 0
	for y.v > 1 {
		y.add(draw(poor), decay)
		followed++
		require.Less(t, followed, 100, "the average never followed the new regime: %v", y)
	}
	assert.LessOrEqual(t, followed, 15, "rounds until the average falls below 1 accepted draft")
	t.Logf("followed the new regime in %d rounds", followed)
}

// simulateTrees drives a policy weighing trees of budgets 4, 8 and 16 over a 16-slot block: a tree round of
// budget b accepts tree(round, b) drafts (drawn by the caller) and costs a draft of 0.5 ms and a forward of
// b rows; a chain round of bs accepts each slot with probability chain(round) and costs a forward of bs rows,
// and a draft of 0.5 ms unless plain. A forward of n rows costs 1 + 0.1·n ms.
func simulateTrees(p *depthPolicy, rounds int, tree func(round, budget int) int, chain func(round int) float64, seed uint64) []simRound {
	rng := rand.New(rand.NewPCG(seed, 5))
	p.enableTrees(TreeConfig{Budget: 16}.budgets())
	forward := func(rows int) time.Duration { return time.Millisecond + time.Duration(rows)*100*time.Microsecond }
	const draft = 500 * time.Microsecond
	out := make([]simRound, 0, rounds)
	for i := range rounds {
		d := p.choose(p.maxBS)
		r := simRound{bs: d.BlockSize, reason: d.Code}
		switch {
		case d.Tree > 0:
			r.bs = -d.Tree // a tree round, by its budget
			r.a = tree(i, d.Tree)
			p.observeTree(d.Tree, d.BlockSize, r.a, draft, 0, forward(d.Tree))
		case d.BlockSize == 1:
			p.observe(1, 0, 0, 0, forward(1), 0)
		default:
			for r.a < d.BlockSize-1 && rng.Float64() < chain(i) {
				r.a++
			}
			p.observe(d.BlockSize, r.a, draft, 0, forward(d.BlockSize), 0)
		}
		out = append(out, r)
	}
	return out
}

// TestPolicyLeavesATreeThatStopsPaying: trees accept 1–4 drafts a round (2.25–3.5 on average by budget: 1.5–1.7×
// plain decoding's rate, where chains lose), then the regime changes and they accept 0.3 (0.5–0.7×). The
// policy settles on trees, and after the change leaves them within a few dozen rounds (each tree's long
// yield average starts again once its shift is plain, and every tree is tried until its own average has
// followed; without the shift test the policy kept to trees for 180–280 rounds), not after the hundreds its
// window spans; it then decodes plainly.
func TestPolicyLeavesATreeThatStopsPaying(t *testing.T) {
	const change = 600
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 6))
			yield := func(round, budget int) int {
				if round >= change {
					return b2i(rng.Float64() < 0.3)
				}
				// 1–4 accepted drafts, more in larger trees.
				return min(1+rng.IntN(4)+budget/16, budget-1)
			}
			p := newDepthPolicy(16, PolicyConfig{})
			rs := simulateTrees(p, 1000, yield, func(int) float64 { return 0.3 }, seed)
			trees := 0
			for _, r := range rs[200:change] {
				if r.bs < 0 {
					trees++
				}
			}
			assert.Greater(t, trees, (change-200)*9/10, "trees while they pay: %v", hist(rs[200:change]))
			last := change
			for i, r := range rs[change:] {
				if r.bs < 0 && r.reason == reasonBest {
					last = change + i
				}
			}
			t.Logf("trees chosen until %d rounds after the change", last-change)
			assert.LessOrEqual(t, last-change, 40, "trees chosen until %d rounds after the change", last-change)
			assert.Greater(t, countReasons(rs[change+100:])[reasonFallbackAR], 250, "then plain decoding: %v", countReasons(rs[change+100:]))
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestPolicyProbeShareFallsWhileProbesConfirm: with a drafter that is never right the probes keep confirming
// plain decoding, and the share of the probe budget in force falls to its floor, and with it what the probes
// lose over a long run; once the drafter is right the policy speculates again and probes at the whole budget.
func TestPolicyProbeShareFallsWhileProbesConfirm(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{})
	cost := func(bs int) time.Duration {
		if bs == 1 {
			return time.Millisecond
		}
		return 2*time.Millisecond + time.Duration(bs)*100*time.Microsecond
	}
	simulate(p, 1000, cost, func(int, int) float64 { return 0 })
	assert.InDelta(t, p.budget*probeFloor, p.share, 1e-12, "the share at its floor")
	spent, elapsed := p.spent, p.elapsed
	rs := simulate(p, 5000, cost, func(int, int) float64 { return 0 })
	assert.Positive(t, countReasons(rs)[reasonProbe], "still probes")
	lost := (p.spent - spent) / (p.elapsed - elapsed)
	t.Logf("probes lost %.2f%% of decoding time over 5000 rounds at the floor", 100*lost)
	assert.Less(t, lost, p.budget/2, "the probes' lasting tax, under half the budget (the whole budget before it fell)")

	rs = simulate(p, 300, cost, func(int, int) float64 { return 0.95 })
	assert.Greater(t, countReasons(rs[100:])[reasonBest], 150, "speculating again: %v", countReasons(rs))
	assert.InDelta(t, p.budget, p.share, 1e-12, "the whole budget while speculating")
}
