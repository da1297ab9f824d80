package mlx

import (
	"testing"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/ports/porttest"
)

// batchTolerance is how far a batched item's logits, taps and probabilities may be from its solo run's:
// MLX's products round differently for different row counts (see Target.ForwardBatch). On MLX's CPU
// backend the 64-wide fixtures come out bit-identical and the 512-wide ones differ by a few 1e-6.
const batchTolerance = 1e-4

// The batched-forward suite on dense, hybrid and quantized targets, narrow and wide.
func TestBatchConformance(t *testing.T) {
	requireMLX(t)
	fixtures := parityFixtures()
	fixtures["qwen3 wide"] = fixture{spec: synth.TargetSpec{Family: "qwen3", Seed: 31, Layers: 2, Vocab: 512, Wide: 8}}
	fixtures["qwen3_next wide q4"] = fixture{spec: synth.TargetSpec{Family: "qwen3_next", Seed: 32, Layers: 2, Vocab: 512, Wide: 8}, quant: &quant.Spec{Bits: 4, GroupSize: 64}}
	for name, f := range fixtures {
		t.Run(name, func(t *testing.T) {
			f.spec.Context = 64
			tg := loadFixture(t, f)
			porttest.BatchSuite{Target: tg, TapLayers: []int{f.spec.Layers - 1, 0}, ReadTaps: readTaps, Tolerance: batchTolerance, ContextLength: 64}.Run(t)
		})
	}
}

// The batched draft suite with DFlash and DFlash2 drafters on a hybrid target.
func TestBatchDraftConformance(t *testing.T) {
	requireMLX(t)
	for name, v2 := range map[string]bool{"dflash": false, "dflash2": true} {
		t.Run(name, func(t *testing.T) {
			_, mp := loadPairs(t, synth.TargetSpec{Family: "qwen3_next", Seed: 3},
				synth.DrafterSpec{Seed: 4, Taps: []int{1, 3}, Mask: 60, BlockSize: 8, Nested: v2, DFlash2: v2})
			porttest.BatchSuite{Target: mp.target, Drafter: mp.drafter, TapLayers: []int{3}, ReadTaps: readTaps, Tolerance: batchTolerance, Long: 40}.Run(t)
		})
	}
}

// A prefill block longer than one graph's chunk runs as its session's own chunked Forward inside the batch;
// the suite's long block is made so by shrinking the chunk.
func TestBatchChunkedPrefill(t *testing.T) {
	requireMLX(t)
	old := maxChunk
	maxChunk = 8
	t.Cleanup(func() { maxChunk = old })
	f := parityFixtures()["qwen3_next f32"]
	f.spec.Context = 64
	tg := loadFixture(t, f)
	porttest.BatchSuite{Target: tg, TapLayers: []int{f.spec.Layers - 1, 0}, ReadTaps: readTaps, Tolerance: batchTolerance, Long: 20}.Run(t)
}
