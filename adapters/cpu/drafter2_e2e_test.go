package cpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports/porttest"
)

// The end-to-end speculative suite with a DFlash2 drafter (adapters/synth's, as higgs-verify synth writes
// it) on a dense and a hybrid target: greedy speculative output equals greedy output for every block size
// and both rollbacks.
func TestSpeculativeConformanceDFlash2(t *testing.T) {
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			tdir := testmodel.Synth(t, synth.TargetSpec{Family: family, Seed: 1})
			ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 2, Taps: []int{0, 2, 3}, Mask: 63, Nested: true, DFlash2: true})
			tg, err := Load(t.Context(), tdir, LoadOptions{Threads: 2})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tg.Close() })
			d, err := LoadDrafter(t.Context(), ddir, tg, DrafterOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = d.Close() })
			assert.True(t, d.Arch().V2())
			n := 40
			if testing.Short() {
				n = 16
			}
			accepted := porttest.SpeculativeSuite{Target: tg, Drafter: d, Tokens: n}.Run(t)
			t.Logf("%s: %d draft tokens accepted over the suite", family, accepted)
			assert.Positive(t, accepted, "partial acceptance, so accepting and rolling back are both exercised")
		})
	}
}
