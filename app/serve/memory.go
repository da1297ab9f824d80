package serve

import (
	"fmt"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/ports"
)

// MemoryFootprint is what one sequence holds in memory besides the shared weights, from the model configs'
// shapes at 4 bytes a value (the CPU backend keeps its caches in float32; MLX's half-precision caches take
// less, so the estimate is an upper bound there): what memory admission reserves per request.
type MemoryFootprint struct {
	// TargetPerPosition is the target's attention KV per position (every attention layer's keys and values).
	TargetPerPosition int64
	// TargetPerSequence is the target's recurrent state (conv buffer and SSM state of every recurrent layer)
	// counted three times: the CPU backend's double buffer and the snapshot a rollback keeps.
	TargetPerSequence int64
	// TapePerPosition is a verify block's recurrent tape per position (replay rollback).
	TapePerPosition int64
	// ActivationsPerRow is the forward's scratch per row of a block (the session's arena).
	ActivationsPerRow int64
	// DrafterPerPosition is the drafter's context KV per position plus the target taps waiting for it (a
	// speculating request only).
	DrafterPerPosition int64
	// Estimated says the figures come from ports.ModelInfo alone (no config.json was readable), with
	// deliberately generous guesses for the shapes it does not state.
	Estimated bool
}

const bytesPerValue = 4

// ReadMemoryFootprint reads the target's config.json in targetDir and, when drafterDir is not empty, the
// drafter's, with tapLayers the drafter's tap layers.
func ReadMemoryFootprint(targetDir, drafterDir string, tapLayers []int) (MemoryFootprint, error) {
	cfg, err := hfmodel.LoadConfig(targetDir)
	if err != nil {
		return MemoryFootprint{}, fmt.Errorf("memory footprint: %w", err)
	}
	var f MemoryFootprint
	convDim := int64(2*cfg.LinearNumKeyHeads*cfg.LinearKeyHeadDim + cfg.LinearNumValueHeads*cfg.LinearValueHeadDim)
	for _, k := range cfg.LayerTypes {
		switch k {
		case ports.LayerAttention:
			f.TargetPerPosition += int64(2*cfg.NumKeyValueHeads*cfg.HeadDim) * bytesPerValue
		case ports.LayerRecurrent:
			conv := int64(max(cfg.LinearConvKernelDim-1, 0)) * convDim
			ssm := int64(cfg.LinearNumValueHeads * cfg.LinearKeyHeadDim * cfg.LinearValueHeadDim)
			f.TargetPerSequence += 3 * (conv + ssm) * bytesPerValue
			f.TapePerPosition += (convDim + int64(cfg.LinearNumValueHeads*(cfg.LinearValueHeadDim+1))) * bytesPerValue
		}
	}
	inter := int64(max(cfg.IntermediateSize, cfg.MoeIntermediateSize*max(cfg.NumExpertsPerTok, 1)))
	f.ActivationsPerRow = (8*int64(cfg.HiddenSize) + 3*inter + int64(cfg.NumAttentionHeads*cfg.HeadDim)*2) * bytesPerValue
	if drafterDir != "" {
		d, err := hfmodel.LoadDrafterConfig(drafterDir)
		if err != nil {
			return MemoryFootprint{}, fmt.Errorf("memory footprint: %w", err)
		}
		f.DrafterPerPosition = int64(d.NumHiddenLayers*2*d.NumKeyValueHeads*d.HeadDim)*bytesPerValue +
			int64(len(tapLayers)*cfg.HiddenSize)*bytesPerValue
	}
	return f, nil
}

// estimateFootprint is the fallback from ModelInfo alone: a full-width KV per attention layer (no grouped
// query attention), a hidden×128 state per recurrent layer, wide activations.
func estimateFootprint(info ports.ModelInfo, tapLayers int) MemoryFootprint {
	h := int64(info.HiddenSize)
	f := MemoryFootprint{Estimated: true, ActivationsPerRow: 16 * h * bytesPerValue}
	for _, k := range info.LayerKinds {
		if k == ports.LayerRecurrent {
			f.TargetPerSequence += 3 * 128 * h * bytesPerValue
			f.TapePerPosition += 4 * h * bytesPerValue
			continue
		}
		f.TargetPerPosition += 2 * h * bytesPerValue
	}
	if tapLayers > 0 {
		f.DrafterPerPosition = (2*h + int64(tapLayers)*h) * bytesPerValue
	}
	return f
}

// requestBytes is what a request reserves: every position its sequence can reach (the prompt, its whole
// token budget and one verify block past it), its recurrent state and tape, the scratch its session keeps
// (the CPU arena holds each pass shape's buffers side by side, sizes rounded up by at most 1/8: those of its
// largest prefill forward, a prefill chunk or the whole prompt unchunked, of a verify block and of a plain
// step), and the drafter's context when it speculates.
func (f MemoryFootprint) requestBytes(promptLen, budget, blockSize, prefillChunk int) int64 {
	positions := int64(promptLen + budget + blockSize)
	rows := int64(promptLen)
	if prefillChunk > 0 {
		rows = int64(min(promptLen, prefillChunk))
	}
	held := rows + int64(blockSize) + 1
	n := positions*f.TargetPerPosition + f.TargetPerSequence + int64(blockSize)*f.TapePerPosition + held*f.ActivationsPerRow*9/8
	if blockSize > 1 {
		n += positions * f.DrafterPerPosition
	}
	return n
}

// defaultMemoryBudget is the admission budget when none is configured: half the machine's memory (on Linux
// the cgroup's memory limit where that is smaller: a container sees the host's RAM otherwise), less the
// prefix cache's budget (the weights, the prefix cache and the rest of the system share the other half), at
// least 256 MiB; 8 GiB where the machine's memory is unknown.
func defaultMemoryBudget(prefixCacheBytes int64) int64 {
	total := physicalMemory()
	if total <= 0 {
		return 8 << 30
	}
	return max(total/2-prefixCacheBytes, 256<<20)
}

// footprintFor is e's footprint, or the estimate from its target's ModelInfo.
func footprintFor(e Engine, info ports.ModelInfo) MemoryFootprint {
	if e.Memory != nil {
		return *e.Memory
	}
	taps := 0
	if e.Drafter != nil {
		taps = len(e.Drafter.TapLayers())
	}
	return estimateFootprint(info, taps)
}
