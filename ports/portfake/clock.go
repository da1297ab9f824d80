package portfake

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.Clock        = (*Clock)(nil)
	_ ports.PositionRand = (*Rand)(nil)
)

// Clock is a manual clock: Now returns the current fake time and then advances it by Step. Fakes given the
// clock (Config.Clock, DrafterConfig.Clock) advance it by their simulated costs, so measured durations are
// exact and reproducible. Safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

// NewClock returns a clock at a fixed epoch that advances by step after every Now (0: only by Advance).
func NewClock(step time.Duration) *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), step: step}
}

// Now returns the fake time, then advances it by the step.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Rand is a seeded source implementing ports.PositionRand: a PCG stream for Float64 and a hash of (seed,
// position) for Uniform. Float64 is not safe for concurrent use.
type Rand struct {
	r    *rand.Rand
	seed uint64
}

// NewRand returns a source seeded with seed.
func NewRand(seed uint64) *Rand {
	return &Rand{r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), seed: seed}
}

// Float64 returns the next uniform number in [0, 1) of the stream.
func (r *Rand) Float64() float64 { return r.r.Float64() }

// Uniform returns the uniform number in [0, 1) of position pos, a pure function of the seed and pos.
func (r *Rand) Uniform(pos int) float64 { return unit(hash(r.seed, 0x706f73, uint64(pos))) }

// mix is splitmix64's finaliser, the fakes' deterministic hash.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// hash combines values into one deterministic hash.
func hash(vs ...uint64) uint64 {
	h := uint64(0x51ed2701)
	for _, v := range vs {
		h = mix(h ^ v)
	}
	return h
}

// unit maps a hash to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }
