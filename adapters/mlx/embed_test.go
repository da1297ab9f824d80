package mlx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/ports/porttest"
)

// The Embedder conformance suite on MLX (up to rounding: the same sequence embedded twice, or concurrently,
// runs the same graph), and the hidden state against the CPU backend's on every parity fixture, unchunked
// and in chunks of 5 positions (a long input is embedded so).
func TestEmbedParityWithCPU(t *testing.T) {
	requireMLX(t)
	for name, f := range parityFixtures() {
		t.Run(name, func(t *testing.T) {
			dir := writeFixture(t, f)
			ct, err := cpu.Load(t.Context(), dir, cpu.LoadOptions{Threads: 1})
			require.NoError(t, err)
			t.Cleanup(func() { _ = ct.Close() })
			mt, err := Load(t.Context(), dir, LoadOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = mt.Close() })

			porttest.EmbedSuite{Target: mt, Tolerance: 1e-6}.Run(t)

			want, err := ct.LastHidden(t.Context(), prompt)
			require.NoError(t, err)
			for _, chunk := range []int{maxChunk, 5} {
				old := maxChunk
				maxChunk = chunk
				got, err := mt.LastHidden(t.Context(), prompt)
				maxChunk = old
				require.NoError(t, err)
				require.Len(t, got, len(want))
				worst := 0.0
				for i := range want {
					worst = max(worst, float64(abs32(got[i]-want[i])))
				}
				t.Logf("chunk %d: max |Δhidden| = %.3g", chunk, worst)
				assert.LessOrEqual(t, worst, 1e-3, "chunk %d", chunk)
			}
		})
	}
}
