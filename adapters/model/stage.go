package model

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/higgs-go/higgs/adapters/hfmodel"
)

// Stage is one pipeline stage of a target split across processes: the decoder layers Lo..Hi−1. The first
// stage (Lo == 0) also embeds the tokens; the last (Hi == the model's layers) applies the final norm and the
// LM head. Head makes another stage hold the LM head too: the first, when a DFlash drafter (which
// shares the target's embedding and head) runs beside it.
type Stage struct {
	Lo, Hi int
	Head   bool
}

// Layers is the number of decoder layers of the stage.
func (s Stage) Layers() int { return s.Hi - s.Lo }

// Has reports whether layer i belongs to the stage.
func (s Stage) Has(i int) bool { return i >= s.Lo && i < s.Hi }

// TensorStage says which part of a target a canonical tensor name belongs to: layer i ≥ 0 for the
// tensors under "layers.i.", else −1 for the embedding (the first stage's) and −2 for the final norm and
// LM head (the last stage's).
func TensorStage(canonical string) int {
	if rest, ok := strings.CutPrefix(canonical, "layers."); ok {
		if n, _, ok := strings.Cut(rest, "."); ok {
			if i, err := strconv.Atoi(n); err == nil {
				return i
			}
		}
	}
	if strings.HasPrefix(canonical, "norm.") || strings.HasPrefix(canonical, "lm_head.") {
		return -2
	}
	return -1
}

// SplitStages cuts layers decoder layers into n contiguous stages by memory: layer[i] is the bytes of layer
// i, first the bytes only the first stage holds (the embedding), last those only the last holds (final
// norm, LM head). Stage r ends at the layer boundary nearest to r+1 n-ths of the total, every stage keeping
// at least one layer, so each rank holds about 1/n of the weights.
func SplitStages(layer []int64, first, last int64, n int) ([]Stage, error) {
	L := len(layer)
	if n < 1 || n > L {
		return nil, fmt.Errorf("cannot split %d layers into %d stages (one layer at least per stage)", L, n)
	}
	total := first + last
	for _, b := range layer {
		total += b
	}
	stages := make([]Stage, n)
	lo, acc := 0, first
	for r := range n - 1 {
		target := total * int64(r+1) / int64(n)
		hi := lo + 1
		acc += layer[lo]
		// Take the next layer while that brings the cut nearer the target, leaving one per later stage.
		for hi < L-(n-1-r) && abs(acc+layer[hi]-target) < abs(acc-target) {
			acc += layer[hi]
			hi++
		}
		stages[r] = Stage{Lo: lo, Hi: hi}
		lo = hi
	}
	stages[n-1] = Stage{Lo: lo, Hi: L}
	return stages, nil
}

// ForwardBatchStage is ForwardBatch over one pipeline stage's layers: x holds every sequence's rows of the
// residual stream entering layer stage.Lo (sequence i's seqs[i].Rows rows after those of the sequences
// before it, at positions seqs[i].Pos..), the result the stream leaving layer stage.Hi−1, in the same order.
// A batch of one runs exactly ForwardStage's ops, as ForwardBatch runs Forward's.
func ForwardBatchStage[X any, W comparable](ctx context.Context, m *Target[W], be Backend[X, W], seqs []Seq[X, W], x X, stage Stage, tap func(layer int, x X)) (X, error) {
	if len(seqs) == 1 {
		return ForwardStage(ctx, m, be, seqs[0].State, x, seqs[0].Pos, stage, tap)
	}
	return ForwardStage(ctx, m, be, &Batch[X, W]{Ops: be, Seqs: seqs}, x, 0, stage, tap)
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// markOtherLayers marks every stored tensor of a layer outside st as used without reading it.
func markOtherLayers(ck *hfmodel.Checkpoint, st Stage) {
	for _, n := range ck.Store.Names() {
		c, keep := hfmodel.NormaliseName(n)
		if i := TensorStage(c); keep && i >= 0 && !st.Has(i) {
			ck.Store.MarkUsed(n)
		}
	}
}
