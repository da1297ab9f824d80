package mlx

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// Without libmlxc every entry point fails with the one ErrUnavailable error (wrapping errors.ErrUnsupported)
// and nothing panics.
func TestUnavailable(t *testing.T) {
	if Available() == nil {
		t.Skip("libmlxc is present; this test covers machines without it")
	}
	err := Available()
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.ErrorIs(t, err, ErrUnavailable)
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 1})
	_, err = Load(t.Context(), dir, LoadOptions{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.ErrorContains(t, err, "libmlxc not found")
	_, err = LoadDrafter(t.Context(), dir, nil, DrafterOptions{})
	assert.Error(t, err)
}
