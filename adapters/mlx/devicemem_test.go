package mlx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports"
)

// DeviceMemory reads MLX's allocator: a loaded target's weights are live arrays, a forward's buffers raise the
// peak at least to what is active, and the figures are the process's (every reading is of the same allocator).
func TestDeviceMemory(t *testing.T) {
	requireMLX(t)
	tg := loadFixture(t, fixture{spec: synth.TargetSpec{Family: "qwen3", Seed: 7, Layers: 1, Vocab: 96, Context: 16}})
	s, err := tg.NewSession(t.Context(), nil)
	require.NoError(t, err)
	_, err = s.Forward(t.Context(), []ports.Token{1, 2, 3}, ports.ForwardOptions{})
	require.NoError(t, err)
	m, err := tg.DeviceMemory()
	require.NoError(t, err)
	assert.Equal(t, "mlx", m.Backend)
	assert.Positive(t, m.Active, "the weights are live arrays")
	assert.GreaterOrEqual(t, m.Peak, m.Active)
	assert.GreaterOrEqual(t, m.Cache, int64(0))
	s.Close()
	require.NoError(t, tg.Close())
	after, err := tg.DeviceMemory()
	require.NoError(t, err, "the allocator outlives a closed target")
	assert.GreaterOrEqual(t, after.Peak, m.Peak, "the peak never falls")
}
