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
