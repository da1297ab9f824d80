package cpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArenaRecyclesAndStaysBounded(t *testing.T) {
	var a arena
	first := a.get(100)
	first[0] = 7
	a.reset()
	again := a.get(80)
	assert.Same(t, &first[0], &again[0], "the same slot is reused when large enough")
	assert.Zero(t, again[0], "a recycled buffer comes back zeroed")
	// Passes whose requests change size and order (as MoE routing does) never push the arena past its budget.
	for pass := range 200 {
		a.reset()
		for i := range 64 {
			a.get(1 + (pass*7919+i*104729)%maxArena)
		}
		require.LessOrEqual(t, a.held, arenaBudget)
	}
	big := a.get(maxArena + 1)
	assert.Len(t, big, maxArena+1, "an over-size request is served, not kept")
	var none *arena
	assert.Len(t, none.get(3), 3, "a nil arena allocates")
}
