package ring

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// The timeout's error names the rank the round waited on: with 3+ ranks the first whose acknowledgement is
// missing, then the last rank's answer; on a worker its input or the acknowledgement it relays.
func TestPipelineLostNamesRank(t *testing.T) {
	tests := []struct {
		rank, size, waiting int
		want                string
	}{
		{0, 2, 1, "no answer from rank 1 within"},
		{0, 3, 0, "no answer from rank 1 within"},
		{0, 3, 1, "no answer from rank 1 within"},
		{0, 3, 2, "no answer from rank 2 within 1s (ranks 1..1 acknowledged"},
		{0, 4, 3, "no answer from rank 3 within 1s (ranks 1..2 acknowledged"},
		{0, 3, 3, "no answer from rank 2 within 1s (every worker acknowledged"},
		{1, 3, 0, "rank 1: no message from rank 0 within"},
		{1, 4, 3, "rank 1: no acknowledgement from rank 3 within"},
		{2, 3, 1, "rank 2: no message from rank 1 within"},
	}
	for _, tc := range tests {
		p := &Peer{Rank: tc.rank, Size: tc.size}
		p.Waiting.Store(int32(tc.waiting))
		err := p.Lost(time.Second)
		require.ErrorIs(t, err, ErrRankLost)
		require.ErrorIs(t, err, ports.ErrBackendLost)
		assert.Contains(t, err.Error(), tc.want, "rank %d of %d waiting on %d", tc.rank, tc.size, tc.waiting)
	}
}
