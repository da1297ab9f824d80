package portfake_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// TestPriceIsLinearInTheDemand: the scripted memory price charges each field of the demand, a draft session
// only when the sequence speculates.
func TestPriceIsLinearInTheDemand(t *testing.T) {
	p := portfake.Price{PerPosition: 1000, PerRow: 100, PerBlockRow: 10, PerTap: 2, Fixed: 7}
	d := ports.MemoryDemand{Positions: 50, Rows: 8, Block: 4, Speculative: true, TapLayers: 3}
	assert.Equal(t, int64(7+50*1000+8*100+4*10+50*3*2), p.SessionBytes(d))
	m := portfake.MustNew(portfake.Config{Memory: p})
	assert.Equal(t, p.SessionBytes(d), m.SessionBytes(d))
	dr, err := portfake.NewDrafter(portfake.DrafterConfig{Propose: portfake.Fixed(1), Memory: p})
	require.NoError(t, err)
	assert.Equal(t, p.SessionBytes(d), dr.SessionBytes(d))
	d.Speculative = false
	assert.Equal(t, int64(7+50*1000+8*100+4*10), m.SessionBytes(d))
	assert.Zero(t, dr.SessionBytes(d), "no draft session without speculation")
}
