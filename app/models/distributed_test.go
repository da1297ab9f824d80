package models

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pipeline gets the operator's rank timeout (DefaultRankTimeout when unset) and the long round timeout
// that only a live but stuck rank reaches; a negative rank timeout is refused.
func TestDistOptions(t *testing.T) {
	assert.Equal(t, 10*time.Second, DefaultRankTimeout)
	o := distOptions(true, 0)
	assert.Equal(t, DefaultRankTimeout, o.RankTimeout)
	assert.Equal(t, distRoundTimeout, o.Timeout)
	assert.Greater(t, o.Timeout, 10*o.RankTimeout, "the round timeout leaves a slow rank room; losses are the heartbeats'")
	assert.True(t, o.DrafterHead)
	assert.Equal(t, 3*time.Second, distOptions(false, 3*time.Second).RankTimeout)
	err := ModelConfig{Backend: BackendMLX, Distributed: true, RankTimeout: -time.Second}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank timeout -1s must be ≥ 0")
	require.NoError(t, ModelConfig{Backend: BackendMLX, Distributed: true, RankTimeout: 2 * time.Second}.Validate())
}
