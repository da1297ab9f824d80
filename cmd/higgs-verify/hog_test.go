package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startHogs's processes spin (they use CPU time while they run) and end when stopped, by their input closing
// rather than the kill fallback; --hog below 0 is refused before any model loads.
func TestHogs(t *testing.T) {
	stop, err := startHogs(2)
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond)
	start := time.Now()
	cpu, err := stop()
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 2*time.Second, "the hogs end when their input closes")
	assert.Greater(t, cpu, 100*time.Millisecond, "the hogs spun")

	stop, err = startHogs(0)
	require.NoError(t, err)
	cpu, err = stop()
	require.NoError(t, err)
	assert.Zero(t, cpu)

	r := runCLI(t, "bench", "--hog", "-1")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--hog -1 must be ≥ 0")
}
