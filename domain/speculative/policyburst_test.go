package speculative

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPolicyRefreshesItsBaselineAfterABurst: a burst of slow rounds while the policy decodes plainly (another
// process taking the CPU for a few milliseconds) inflates its estimate of a plain step, so that a block of 2,
// which loses to plain decoding on a quiet machine, looks better. The policy must measure plain decoding again
// soon (within staleProbes probe intervals of its last measurement, and the next probe's turn) however much
// its probes have spent, and not speculate at a loss for the rest of
// the generation. (Measured on gocoder's chat prompts: seven slow plain steps, then a plain probe preempted
// for 11 ms used up the probe budget, and a block of 2 ran for hundreds of rounds at 0.85× plain decoding,
// every probe held back.)
func TestPolicyRefreshesItsBaselineAfterABurst(t *testing.T) {
	quiet := func(bs int) time.Duration {
		if bs == 1 {
			return 1100 * time.Microsecond
		}
		return time.Duration(1100+550*(bs-1)) * time.Microsecond
	}
	rng := rand.New(rand.NewPCG(3, 7))
	// The policy as it was in the measured run: falling back to plain decoding.
	p := newDepthPolicy(16, PolicyConfig{})
	round := func(load float64) Decision {
		d := p.choose(p.maxBS)
		a := 0
		for a < d.BlockSize-1 && rng.Float64() < 0.3 {
			a++
		}
		c := time.Duration(float64(quiet(d.BlockSize)) * load)
		if d.BlockSize == 1 {
			p.observe(1, 0, 0, 0, c, 0)
		} else {
			p.observe(d.BlockSize, a, c/5, 0, c-c/5, 0)
		}
		return d
	}
	for range 600 {
		round(1)
	}
	require.Equal(t, 1, p.choose(p.maxBS).BlockSize, "plain decoding, the quiet machine's choice")
	// A burst of plain steps long enough to move even a robust estimate: 12 at 2.5–11× the quiet cost.
	for i := range 12 {
		p.observe(1, 0, 0, 0, time.Duration(float64(quiet(1))*([]float64{1.7, 2.7, 3.8, 2.4, 1.5, 4.3, 10, 2.5}[i%8]+1)), 0)
	}
	require.Greater(t, p.costOf(1), 2*float64(quiet(1)), "the burst inflated the plain step's estimate")
	p.spent = 10 * p.budget * p.elapsed // the probes' budget used up (the 11 ms probe)
	bs, _ := p.best(1)
	require.Greater(t, bs, 1, "beside the inflated plain step a speculative block looks better")
	plainAt := -1
	for i := range (staleProbes + 2) * p.probeEvery {
		if d := round(1); d.BlockSize == 1 {
			plainAt = i
			break
		}
	}
	assert.NotEqual(t, -1, plainAt, "plain decoding measured again within %d probe intervals", staleProbes+2)
	speculative := 0
	for range 400 {
		if round(1).BlockSize > 1 {
			speculative++
		}
	}
	assert.Less(t, speculative, 60, "back to plain decoding after the burst: %d of 400 rounds speculative", speculative)
}

// TestPolicyRefreshesItsBaselineUnderATree: the same guard where a tree is the choice. Its probes take turns
// (a chain, plain decoding, another tree); a chain the spent budget holds back must not hold the plain probe
// back with it, and a stale plain step is probed first.
func TestPolicyRefreshesItsBaselineUnderATree(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{})
	p.enableTrees([]int{4, 8})
	observe := func(d Decision) { observeArms(p, d, 3) }
	for range 300 {
		observe(p.choose(p.maxBS))
	}
	require.Equal(t, 4, p.choose(p.maxBS).Tree, "the tree of 4 nodes is the choice (4 tokens in 2.5 ms)")
	p.spent = 10 * p.budget * p.elapsed
	for _, turn := range []int{0, 1, 2} {
		p.probes = turn
		plainAt := -1
		for i := range (staleProbes + 3) * p.probeEvery {
			d := p.choose(p.maxBS)
			observe(d)
			if d.BlockSize == 1 {
				plainAt = i
				break
			}
		}
		assert.NotEqual(t, -1, plainAt, "probe turn %d: plain decoding measured again within %d probe intervals", turn, staleProbes+3)
	}
}
