package verify_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/app/modeltools"
	"github.com/higgs-go/higgs/app/verify"
)

// TestReadWeightFootprint: the same synth target stored in bf16, f32 and 4-bit has the same per-token
// multiply-accumulates (all weights but the untied input embedding) and bytes in the stored widths' order; a
// config.json that states the quantization gives the same count as the shapes; a missing config is an error.
func TestReadWeightFootprint(t *testing.T) {
	const vocab, hidden = 256, 64
	var fps []verify.WeightFootprint
	var q4dir string
	for _, tc := range []struct {
		name string
		q    *quant.Spec
		f32  bool
	}{{"f32", nil, true}, {"bf16", nil, false}, {"q4", &quant.Spec{Bits: 4, GroupSize: 32}, false}} {
		dir := t.TempDir()
		res, err := modeltools.Synth(t.Context(), modeltools.SynthOptions{Out: dir, Wide: 1, Layers: 2, Vocab: vocab, Quant: tc.q, F32: tc.f32, Seed: 1})
		require.NoError(t, err, tc.name)
		fp, err := verify.ReadWeightFootprint(res.Target)
		require.NoError(t, err, tc.name)
		assert.Equal(t, res.Params-vocab*hidden, fp.Params, "%s: untied embedding left out", tc.name)
		fps = append(fps, fp)
		if tc.q != nil {
			q4dir = res.Target
		}
	}
	assert.Greater(t, fps[0].Bytes, fps[1].Bytes, "f32 > bf16")
	assert.Greater(t, fps[1].Bytes, fps[2].Bytes, "bf16 > q4")
	assert.InEpsilon(t, float64(fps[1].Params*2), float64(fps[1].Bytes), 0.05, "bf16: about two bytes a weight (a few small tensors stay f32)")

	cfg := filepath.Join(q4dir, "config.json")
	raw, err := os.ReadFile(cfg)
	require.NoError(t, err)
	stated := strings.Replace(string(raw), "{", `{"quantization": {"group_size": 32, "bits": 4},`, 1)
	require.NoError(t, os.WriteFile(cfg, []byte(stated), 0o644))
	fp, err := verify.ReadWeightFootprint(q4dir)
	require.NoError(t, err)
	assert.Equal(t, fps[2], fp, "stated and inferred quantization agree")

	_, err = verify.ReadWeightFootprint(t.TempDir())
	assert.ErrorContains(t, err, "config.json")
}
