package serve

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// recordingPricer prices every session at bytes and records the demands it was asked.
type recordingPricer struct {
	bytes int64
	asked []ports.MemoryDemand
}

func (r *recordingPricer) SessionBytes(d ports.MemoryDemand) int64 {
	r.asked = append(r.asked, d)
	return r.bytes
}

// TestMemoryPricingAsksTheBackends: a request's price is its target session's and, when it speculates, its
// draft session's, asked with the positions it can reach, its largest forward and its verify block.
func TestMemoryPricingAsksTheBackends(t *testing.T) {
	tg, dr := &recordingPricer{bytes: 1000}, &recordingPricer{bytes: 10}
	m := memoryPricing{target: tg, drafter: dr, taps: 3}
	assert.Equal(t, int64(1010), m.requestBytes(100, 50, 4, 32))
	want := ports.MemoryDemand{Positions: 154, Rows: 32, Block: 4, Speculative: true, TapLayers: 3}
	assert.Equal(t, []ports.MemoryDemand{want}, tg.asked)
	assert.Equal(t, []ports.MemoryDemand{want}, dr.asked)

	// Plain decoding asks no draft session; an unchunked prefill is the whole prompt.
	assert.Equal(t, int64(1000), m.requestBytes(100, 50, 1, 0))
	assert.Equal(t, ports.MemoryDemand{Positions: 151, Rows: 100, Block: 1}, tg.asked[1])
	assert.Len(t, dr.asked, 1)
}

// portfakeWithout hides the toy target's memory pricing, as a backend without the ability.
type portfakeWithout struct{ ports.Target }

// TestMemoryPricingFallsBackToAnEstimate: a backend that prices its own sessions is asked (not estimated); one
// without the ability is estimated from ModelInfo, and says so (the engine-ready log's memory_estimated).
func TestMemoryPricingFallsBackToAnEstimate(t *testing.T) {
	eng, tg := srvEngine(4096, 0, true)
	tg.Price = portfake.Price{PerPosition: 1000}
	info := eng.Target.Info()
	own := pricingFor(eng, info)
	assert.False(t, own.Estimated)
	assert.Equal(t, int64(74_000), own.requestBytes(30, 40, 4, 0), "the toy target's 1000 bytes a position; its drafter's nothing")

	eng.Target = portfakeWithout{eng.Target}
	est := pricingFor(eng, info)
	assert.True(t, est.Estimated)
	assert.Greater(t, est.requestBytes(30, 40, 4, 0), est.requestBytes(30, 20, 4, 0))
	assert.Greater(t, est.requestBytes(30, 40, 4, 0), est.requestBytes(30, 40, 1, 0), "speculation adds the drafter's context")
}
