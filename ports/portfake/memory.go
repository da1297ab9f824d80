package portfake

import "github.com/higgs-go/higgs/ports"

var (
	_ ports.MemoryPricer = (*Model)(nil)
	_ ports.MemoryPricer = (*Drafter)(nil)
)

// Price is a scripted memory price, linear in a ports.MemoryDemand, for tests of memory admission: what a
// toy session claims to hold. The zero Price prices nothing.
type Price struct {
	// PerPosition is charged for every position the sequence can reach, PerRow for every row of its
	// largest forward, PerBlockRow for every row of its verify block, PerTap for every position and tapped
	// layer of a speculating sequence, and Fixed once per session.
	PerPosition, PerRow, PerBlockRow, PerTap, Fixed int64
}

// SessionBytes is p's price of d.
func (p Price) SessionBytes(d ports.MemoryDemand) int64 {
	n := p.Fixed + int64(d.Positions)*p.PerPosition + int64(d.Rows)*p.PerRow + int64(d.Block)*p.PerBlockRow
	if d.Speculative {
		n += int64(d.Positions*d.TapLayers) * p.PerTap
	}
	return n
}

// SessionBytes prices a target session by Config.Memory (ports.MemoryPricer).
func (m *Model) SessionBytes(d ports.MemoryDemand) int64 { return m.cfg.Memory.SessionBytes(d) }

// SessionBytes prices a draft session by DrafterConfig.Memory (ports.MemoryPricer); 0 for a sequence that
// does not speculate (it has no draft session).
func (d *Drafter) SessionBytes(dm ports.MemoryDemand) int64 {
	if !dm.Speculative {
		return 0
	}
	return d.cfg.Memory.SessionBytes(dm)
}
