package portfake_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// A batch costs one forward over all its rows on the simulated clock, records its size on every call, and
// reports an injected failure as that item's error.
func TestForwardBatchCostAndRecords(t *testing.T) {
	clk := portfake.NewClock(0)
	m := portfake.MustNew(portfake.Config{Clock: clk, ForwardCost: func(n int) time.Duration { return time.Millisecond + time.Duration(n)*time.Microsecond }})
	a, err := m.NewSession(t.Context(), nil)
	require.NoError(t, err)
	b, err := m.NewSession(t.Context(), nil)
	require.NoError(t, err)
	portfake.SessionOf(b).FailForward(1, portfake.ErrInjected)
	start := clk.Now()
	res, err := m.ForwardBatch(t.Context(), []ports.BatchItem{{Session: a, Tokens: []ports.Token{1, 2, 3}}, {Session: b, Tokens: []ports.Token{4}}})
	require.NoError(t, err)
	require.Len(t, res, 2)
	assert.NoError(t, res[0].Err)
	assert.ErrorIs(t, res[1].Err, portfake.ErrInjected, "an injected failure is the item's own")
	assert.Equal(t, time.Millisecond+3*time.Microsecond, clk.Now().Sub(start), "one forward's cost over the rows that ran")
	calls := portfake.SessionOf(a).Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, 2, calls[0].Batch)
}

func TestDraftBatchCost(t *testing.T) {
	clk := portfake.NewClock(0)
	m := portfake.MustNew(portfake.Config{})
	d, err := portfake.NewDrafter(portfake.DrafterConfig{Propose: portfake.Perfect(m), Clock: clk, DraftCost: func(bs int) time.Duration { return time.Duration(bs) * time.Millisecond }})
	require.NoError(t, err)
	x, err := d.NewSession(t.Context())
	require.NoError(t, err)
	y, err := d.NewSession(t.Context())
	require.NoError(t, err)
	start := clk.Now()
	res, err := d.DraftBatch(t.Context(), []ports.DraftItem{{Session: x, Anchor: 1, BlockSize: 4}, {Session: y, Anchor: 2, BlockSize: 2, Temperature: 0.5, Rand: portfake.NewRand(1)}})
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
	assert.Len(t, res[0].Proposal.Tokens, 3)
	assert.Len(t, res[1].Proposal.Tokens, 1)
	assert.Equal(t, 6*time.Millisecond, clk.Now().Sub(start))
	assert.Equal(t, 2, x.(*portfake.DraftSession).Calls()[0].Batch)
}
