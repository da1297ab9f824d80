package portfake_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

func TestDist(t *testing.T) {
	_, err := portfake.NewDist([]float64{0, 0})
	require.Error(t, err)
	_, err = portfake.NewDist([]float64{1, -1})
	require.Error(t, err)
	d, err := portfake.NewDist([]float64{1, 2, 1})
	require.NoError(t, err)
	assert.Equal(t, []float64{0.25, 0.5, 0.25}, d.Probs())
	assert.Zero(t, d.Prob(7))
	assert.Zero(t, d.Prob(ports.NoToken))
	tests := []struct {
		u       float64
		exclude ports.Token
		want    ports.Token
	}{
		{0, ports.NoToken, 0}, {0.24, ports.NoToken, 0}, {0.25, ports.NoToken, 1}, {0.99, ports.NoToken, 2},
		{0.49, 1, 0}, {0.5, 1, 2}, {0.1, 0, 1}, {0.7, 0, 2},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, d.Sample(tt.u, tt.exclude), "u=%v exclude=%d", tt.u, tt.exclude)
	}
	point, err := portfake.NewDist([]float64{0, 1})
	require.NoError(t, err)
	assert.Equal(t, ports.NoToken, point.Sample(0.3, 1), "no mass left")
}

func TestModelOracleMatchesSession(t *testing.T) {
	m := portfake.MustNew(portfake.Config{Tape: true, Vocab: 16})
	history := []ports.Token{3, 1, 4, 1, 5, 9, 2, 6}
	params := ports.SamplingParams{Temperature: 0.7, TopK: 5, TopP: 0.9, MinP: 0.05}
	s, err := m.NewSession(t.Context(), nil)
	require.NoError(t, err)
	fr, err := s.Forward(t.Context(), history, ports.ForwardOptions{Sampling: &params})
	require.NoError(t, err)
	for i := range history {
		want, err := m.Dist(history[:i+1], params)
		require.NoError(t, err)
		assert.Equal(t, want.Probs(), fr.Dists[i].(*portfake.Dist).Probs(), "position %d", i)
		g, err := m.Greedy(history[:i+1])
		require.NoError(t, err)
		assert.Equal(t, g, fr.Greedy[i])
		kept := 0
		for _, p := range want.Probs() {
			if p > 0 {
				kept++
			}
		}
		assert.LessOrEqual(t, kept, 5, "top-k 5")
	}
	_, err = m.Dist(nil, params)
	assert.Error(t, err)
	_, err = m.Dist([]ports.Token{99}, params)
	assert.Error(t, err)
}

func TestSessionEnforcesRollback(t *testing.T) {
	m := portfake.MustNew(portfake.Config{Tape: true})
	s, err := m.NewSession(t.Context(), []int{0})
	require.NoError(t, err)
	fs := portfake.SessionOf(s)
	require.NotNil(t, fs)
	fr, err := s.Forward(t.Context(), []ports.Token{1, 2, 3}, ports.ForwardOptions{Taps: true, RecordTape: true})
	require.NoError(t, err)
	taps := fr.Taps.(*portfake.Taps)
	require.NoError(t, taps.Valid())
	require.NoError(t, s.TrimKV(1))
	_, err = s.Forward(t.Context(), []ports.Token{4}, ports.ForwardOptions{})
	assert.ErrorContains(t, err, "roll back before Forward", "recurrent layers left at the block end")
	// The failed Forward did not run; the tape is still the latest.
	require.NoError(t, s.(ports.TapeReplayer).ReplayTape(t.Context(), fr.Tape, 1))
	_, err = s.Forward(t.Context(), []ports.Token{4}, ports.ForwardOptions{})
	require.NoError(t, err)
	assert.ErrorContains(t, taps.Valid(), "missing Detach", "taps die at the next Forward")
	assert.ErrorContains(t, s.(ports.TapeReplayer).ReplayTape(t.Context(), fr.Tape, 1), "latest Forward")
	assert.Equal(t, portfake.Counts{Trims: 1, Replays: 1}, fs.Counts())

	other, err := m.NewSession(t.Context(), nil)
	require.NoError(t, err)
	snap, err := other.Snapshot()
	require.NoError(t, err)
	assert.Error(t, s.Restore(snap), "foreign snapshot")
	require.NoError(t, s.Close())
	_, err = s.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	assert.Error(t, err, "closed session")

	boom := errors.New("boom")
	f := portfake.SessionOf(other)
	f.FailForward(2, boom)
	_, err = other.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	require.NoError(t, err)
	_, err = other.Forward(t.Context(), []ports.Token{1}, ports.ForwardOptions{})
	assert.ErrorIs(t, err, boom)
	assert.Len(t, f.Calls(), 2)
}

func TestDraftSessionChecksContext(t *testing.T) {
	m := portfake.MustNew(portfake.Config{})
	dr, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, Propose: portfake.Perfect(m), LeaveNoise: true, FailOn: 5})
	require.NoError(t, err)
	s, err := m.NewSession(t.Context(), dr.TapLayers())
	require.NoError(t, err)
	fr, err := s.Forward(t.Context(), []ports.Token{1, 2, 3, 4}, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	ds, err := dr.NewSession(t.Context())
	require.NoError(t, err)
	d := ds.(*portfake.DraftSession)
	// Skipping context rows is caught.
	_, err = s.Forward(t.Context(), []ports.Token{5}, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	_, err = d.Draft(t.Context(), 5, fr.Taps, 4)
	assert.ErrorContains(t, err, "missing Detach", "stale taps are refused")
	fr2, err := s.Forward(t.Context(), []ports.Token{6, 7}, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	_, err = d.Draft(t.Context(), 7, fr2.Taps, 4)
	assert.ErrorContains(t, err, "position 5, want 0", "rows must start at the cached length")
	s2, err := m.NewSession(t.Context(), dr.TapLayers())
	require.NoError(t, err)
	fr3, err := s2.Forward(t.Context(), []ports.Token{1, 2, 3}, ports.ForwardOptions{Taps: true})
	require.NoError(t, err)
	prop, err := d.Draft(t.Context(), 9, fr3.Taps, 4)
	require.NoError(t, err)
	want, err := m.GreedyContinuation([]ports.Token{1, 2, 3, 9}, 3)
	require.NoError(t, err)
	assert.Equal(t, want, prop.Tokens, "perfect drafter follows the target")
	assert.Equal(t, 3+4, d.Len(), "LeaveNoise leaves the noise block")
	_, err = d.Draft(t.Context(), 9, nil, 2)
	assert.ErrorContains(t, err, "Crop")
	require.NoError(t, d.Crop(3))
	assert.Equal(t, []ports.Token{1, 2, 3}, d.Context())
	_, err = d.Draft(t.Context(), 9, nil, 2)
	assert.ErrorIs(t, err, portfake.ErrInjected, "call 5 fails")
	assert.Len(t, d.Calls(), 5)
}

func TestClockAndRand(t *testing.T) {
	c := portfake.NewClock(time.Second)
	t0 := c.Now()
	assert.Equal(t, time.Second, c.Now().Sub(t0))
	c.Advance(time.Minute)
	assert.Equal(t, 2*time.Second+time.Minute, c.Now().Sub(t0))
	a, b := portfake.NewRand(3), portfake.NewRand(3)
	for range 10 {
		x := a.Float64()
		assert.Equal(t, x, b.Float64())
		assert.True(t, x >= 0 && x < 1)
	}
}
