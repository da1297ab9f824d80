package speculative

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// loadedRun drives the policy through rounds whose every cost is the quiet cost times the machine's load at
// that round (another process taking the CPU in bursts), and returns the tokens committed per second of
// simulated time, with plain decoding's own rate under the same load trace for comparison.
func loadedRun(p *depthPolicy, rounds int, quiet func(bs int) time.Duration, accept float64, load func(round int) float64, seed uint64) (rate, plainRate float64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	var spent, plainSpent float64
	tokens := 0
	for i := range rounds {
		d := p.choose(p.maxBS)
		bs := d.BlockSize
		a := 0
		for a < bs-1 && rng.Float64() < accept {
			a++
		}
		l := load(i)
		c := time.Duration(float64(quiet(bs)) * l)
		if bs == 1 {
			p.observe(1, 0, 0, 0, c, 0)
		} else {
			p.observe(bs, a, c/5, 0, c-c/5, 0)
		}
		spent += float64(c)
		tokens += a + 1
		plainSpent += float64(quiet(1)) * l * float64(a+1) // plain decoding would have paid one step a token
	}
	return float64(tokens) / spent, float64(tokens) / plainSpent
}

// burstyLoad is a CPU hog that comes and goes: phases of 1 to 6 rounds at load 1 (quiet) or hog×.
func burstyLoad(rounds int, hog float64, seed uint64) func(int) float64 {
	rng := rand.New(rand.NewPCG(seed, 11))
	trace := make([]float64, rounds)
	for i := 0; i < rounds; {
		l := 1.0
		if rng.IntN(2) == 0 {
			l = hog
		}
		for n := 1 + rng.IntN(6); n > 0 && i < rounds; n-- {
			trace[i] = l
			i++
		}
	}
	return func(i int) float64 { return trace[i] }
}

// spikyLoad is a mostly quiet machine where a round is now and then preempted for a whole time slice: load
// spike× with probability prob.
func spikyLoad(rounds int, spike, prob float64, seed uint64) func(int) float64 {
	rng := rand.New(rand.NewPCG(seed, 13))
	trace := make([]float64, rounds)
	for i := range trace {
		trace[i] = 1
		if rng.Float64() < prob {
			trace[i] = spike
		}
	}
	return func(i int) float64 { return trace[i] }
}

// TestPolicyHoldsUpUnderContention (issue 37 item 5): with another process loading the CPU in bursts, the
// adaptive policy never does worse than 0.95× plain decoding under the same load, when speculation does not pay
// (it must stay plain: a speculative probe measured in a quiet moment must not look cheap beside plain steps
// measured under the hog) and when it does (it must keep speculating).
func TestPolicyHoldsUpUnderContention(t *testing.T) {
	const rounds = 10000
	cases := []struct {
		name   string
		quiet  func(bs int) time.Duration
		accept float64
		pays   bool
	}{
		// A 16-row verify costs 7 plain steps and slots are accepted 20% of the time: plain decoding is best
		// (block 2, the nearest to paying, commits 1.2 tokens for 1.4 steps).
		{"speculation does not pay", func(bs int) time.Duration { return time.Duration(100+40*(bs-1)) * time.Microsecond }, 0.2, false},
		// A cheap verify and good acceptance: speculation pays about 2×.
		{"speculation pays", func(bs int) time.Duration { return time.Duration(100+8*(bs-1)) * time.Microsecond }, 0.8, true},
	}
	for _, c := range cases {
		loads := map[string]func(seed uint64) func(int) float64{
			"bursts 2x":     func(s uint64) func(int) float64 { return burstyLoad(rounds, 2, s) },
			"bursts 4x":     func(s uint64) func(int) float64 { return burstyLoad(rounds, 4, s) },
			"bursts 8x":     func(s uint64) func(int) float64 { return burstyLoad(rounds, 8, s) },
			"spikes 50x 2%": func(s uint64) func(int) float64 { return spikyLoad(rounds, 50, 0.02, s) },
			"spikes 20x 5%": func(s uint64) func(int) float64 { return spikyLoad(rounds, 20, 0.05, s) },
		}
		for name, load := range loads {
			for seed := uint64(1); seed <= 3; seed++ {
				t.Run(fmt.Sprintf("%s/%s/seed%d", c.name, name, seed), func(t *testing.T) {
					p := newDepthPolicy(16, PolicyConfig{})
					rate, plain := loadedRun(p, rounds, c.quiet, c.accept, load(seed), seed)
					ratio := rate / plain
					assert.GreaterOrEqual(t, ratio, 0.95, "adaptive at %.2f× plain decoding under the hog", ratio)
					if c.pays {
						assert.Greater(t, ratio, 1.3, "speculation still used where it pays")
					}
				})
			}
		}
	}
}
