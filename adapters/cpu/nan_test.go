package cpu

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/internal/golden"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// nanCheckpoint copies a golden model with its final norm weights set to NaN, so every logit is NaN.
func nanCheckpoint(t *testing.T) string {
	t.Helper()
	src := filepath.Join(golden.Dir(), "qwen3_next_dense")
	if _, err := os.Stat(filepath.Join(src, "model.safetensors")); err != nil {
		t.Skipf("golden %s absent: %v", src, err)
	}
	ts := testmodel.Tensors(t, src)
	for _, c := range ts {
		if c.Name == "model.norm.weight" {
			require.Equal(t, safetensors.F32, c.DType)
			nan := math.Float32bits(float32(math.NaN()))
			for i := 0; i+4 <= len(c.Data); i += 4 {
				c.Data[i], c.Data[i+1], c.Data[i+2], c.Data[i+3] = byte(nan), byte(nan>>8), byte(nan>>16), byte(nan>>24)
			}
		}
	}
	return testmodel.WithTensors(t, src, ts)
}

// A forward whose logits are all NaN (corrupt weights) is an error naming the position, not a greedy token of
// -1 that the decoder would commit and feed back as input.
func TestAllNaNLogitsAreAnError(t *testing.T) {
	tg, err := Load(t.Context(), nanCheckpoint(t), LoadOptions{Threads: 1})
	require.NoError(t, err)
	defer tg.Close()
	s, err := tg.NewSession(t.Context(), nil)
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Forward(t.Context(), []ports.Token{1, 2}, ports.ForwardOptions{})
	require.Error(t, err, "greedy %v", res.Greedy)
	assert.Contains(t, err.Error(), "no finite logit")
	assert.Contains(t, err.Error(), "position 0")
}
