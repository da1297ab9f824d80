package mlx

import (
	"testing"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports/porttest"
)

// The prefix-state suite on MLX: a dense and a hybrid target with a DFlash drafter, and every parity fixture
// (quantized ones included) alone.
func TestPrefixConformance(t *testing.T) {
	requireMLX(t)
	for _, family := range []string{"qwen3", "qwen3_next"} {
		t.Run(family, func(t *testing.T) {
			_, mp := loadPairs(t, synth.TargetSpec{Family: family, Seed: 5}, synth.DrafterSpec{Seed: 6, Taps: []int{0, 2}, Mask: 63})
			porttest.PrefixSuite{Target: mp.target, Drafter: mp.drafter, Vocab: mp.target.Info().VocabSize, CutTolerance: batchTolerance}.Run(t)
		})
	}
	for name, f := range parityFixtures() {
		t.Run(name, func(t *testing.T) {
			f.spec.Context = 64
			tg := loadFixture(t, f)
			porttest.PrefixSuite{Target: tg, Vocab: f.spec.Vocab, CutTolerance: batchTolerance}.Run(t)
		})
	}
}
