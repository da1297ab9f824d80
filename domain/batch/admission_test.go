package batch

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// linearCost prices a request of prompt tokens as a KV cache of perPosition bytes a position plus fixed bytes.
func linearCost(prompt int, perPosition, fixed int64) func(int) int64 {
	return func(tokens int) int64 { return fixed + int64(prompt+tokens)*perPosition }
}

func TestAdmit(t *testing.T) {
	tests := []struct {
		name string
		d    Demand
		want Admission
		// fits is the OverBudgetError's Fits when the request is refused (-1: admitted).
		fits int
	}{
		{name: "client limit reserved whole",
			d:    Demand{Room: 4000, MaxTokens: 20, Total: 1_000_000, Concurrency: 8, Cost: linearCost(10, 100, 0)},
			want: Admission{Tokens: 20, Bytes: 3000}, fits: -1},
		{name: "client limit over the budget names what fits",
			d:    Demand{Room: 4000, MaxTokens: 200, Total: 10_000, Concurrency: 8, Cost: linearCost(10, 100, 0)},
			fits: 90},
		{name: "no limit: the fair share, not the context",
			d:    Demand{Room: 4000, Total: 800_000, Concurrency: 8, Cost: linearCost(10, 100, 0)},
			want: Admission{Tokens: 990, Bytes: 100_000, Capped: true}, fits: -1},
		{name: "no limit: a share below the prompt is raised to the floor",
			d:    Demand{Room: 4000, Total: 800_000, Concurrency: 8, Cost: linearCost(2000, 100, 0)},
			want: Admission{Tokens: DefaultTokenFloor, Bytes: (2000 + DefaultTokenFloor) * 100, Capped: true}, fits: -1},
		{name: "no limit: the floor never passes the whole budget",
			d:    Demand{Room: 4000, Total: 10_000, Concurrency: 8, Cost: linearCost(10, 100, 0)},
			want: Admission{Tokens: 90, Bytes: 10_000, Capped: true}, fits: -1},
		{name: "no limit: a share past the room takes the room, uncapped",
			d:    Demand{Room: 50, Total: 800_000, Concurrency: 1, Cost: linearCost(10, 100, 500)},
			want: Admission{Tokens: 50, Bytes: 6500}, fits: -1},
		{name: "no limit: a prompt that cannot fit with one token",
			d:    Demand{Room: 4000, Total: 1000, Concurrency: 1, Cost: linearCost(10, 100, 0)},
			fits: 0},
		{name: "client limit with a prompt that cannot fit",
			d:    Demand{Room: 4000, MaxTokens: 5, Total: 1000, Concurrency: 1, Cost: linearCost(10, 100, 0)},
			fits: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Admit(tc.d)
			if tc.fits < 0 {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				assert.LessOrEqual(t, got.Bytes, tc.d.Total)
				return
			}
			var over *OverBudgetError
			require.ErrorAs(t, err, &over)
			assert.ErrorIs(t, err, ErrOverBudget)
			assert.Equal(t, tc.fits, over.Fits)
			assert.Greater(t, over.Need, tc.d.Total)
		})
	}
}

func TestAdmitRejectsBadDemand(t *testing.T) {
	cost := linearCost(1, 1, 0)
	for _, d := range []Demand{
		{Room: 0, Total: 10, Concurrency: 1, Cost: cost},
		{Room: 5, MaxTokens: -1, Total: 10, Concurrency: 1, Cost: cost},
		{Room: 5, Total: 0, Concurrency: 1, Cost: cost},
		{Room: 5, Total: 10, Concurrency: 0, Cost: cost},
		{Room: 5, Total: 10, Concurrency: 1},
	} {
		_, err := Admit(d)
		assert.Error(t, err, "%+v", d)
		assert.False(t, errors.Is(err, ErrOverBudget), "%+v", d)
	}
}
