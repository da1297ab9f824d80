package verify

import (
	"errors"
	"fmt"
	"strings"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// WeightFootprint is what one decoded token reads of the target's weights: Bytes as stored (quantized codes,
// scales and biases included) and Params, the multiply-accumulate count per token (a quantized matrix counts
// its unpacked elements). The input embedding is counted only when tied to the output head: untied, a token
// gathers one row of it.
type WeightFootprint struct {
	Bytes  int64
	Params int64
}

// ReadWeightFootprint sums the target's tensors in dir from the safetensors headers, without reading the data.
// It reads the stored files, not the backend's in-memory layout: a backend that repacks weights (the CPU fast
// kernels) reads a similar but not identical number of bytes.
func ReadWeightFootprint(dir string) (WeightFootprint, error) {
	cfg, err := hfmodel.LoadConfig(dir)
	if err != nil {
		return WeightFootprint{}, fmt.Errorf("weight footprint: %w", err)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return WeightFootprint{}, fmt.Errorf("weight footprint: %w", err)
	}
	w, err := footprint(cfg, st)
	return w, errors.Join(err, st.Close())
}

func footprint(cfg *hfmodel.TextConfig, st *safetensors.Store) (WeightFootprint, error) {
	// A checkpoint whose config.json is silent on quantization (mlx-lm infers it from the shapes) gets the
	// spec of its output head, whose logical shape is [vocab, hidden] and so pins bits and group size.
	inferred, err := inferSpec(cfg, st)
	if err != nil {
		return WeightFootprint{}, err
	}
	var w WeightFootprint
	for _, name := range st.Names() {
		// Multi-token-prediction heads ship in some checkpoints but take no part in a decode.
		if strings.HasPrefix(name, "mtp.") || (!cfg.TieWordEmbeddings && strings.Contains(name, "embed_tokens")) {
			continue
		}
		t, err := st.Tensor(name)
		if err != nil {
			return WeightFootprint{}, fmt.Errorf("weight footprint: %w", err)
		}
		size, ok := t.DType.Size()
		if !ok {
			return WeightFootprint{}, fmt.Errorf("weight footprint: tensor %q: dtype %s has no byte size", name, t.DType)
		}
		w.Bytes += int64(t.NumElements()) * int64(size)
		module, isWeight := strings.CutSuffix(name, ".weight")
		switch {
		case strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases"):
			// Quantization metadata: bytes, no multiply-accumulates of their own.
		case isWeight && t.DType == safetensors.U32 && st.Has(module+".scales"):
			spec, ok := cfg.Quantization.For(module)
			if cfg.Quantization == nil {
				spec, ok = inferred, inferred.GroupSize > 0
			}
			sc, err := st.Tensor(module + ".scales")
			if err != nil {
				return WeightFootprint{}, fmt.Errorf("weight footprint: %w", err)
			}
			if !ok || spec.GroupSize <= 0 {
				return WeightFootprint{}, fmt.Errorf("weight footprint: %q is packed but its group size is unknown (config.json quantization)", name)
			}
			w.Params += int64(sc.NumElements()) * int64(spec.GroupSize)
		default:
			w.Params += int64(t.NumElements())
		}
	}
	return w, nil
}

// inferSpec returns the quantization of the output head (lm_head, else the tied embedding) from its shapes, or
// the zero Spec when the config states the quantization or the head is not quantized.
func inferSpec(cfg *hfmodel.TextConfig, st *safetensors.Store) (quant.Spec, error) {
	if cfg.Quantization != nil {
		return quant.Spec{}, nil
	}
	for _, name := range st.Names() {
		module, ok := strings.CutSuffix(name, ".weight")
		if !ok || !(strings.HasSuffix(module, "lm_head") || strings.HasSuffix(module, "embed_tokens")) || !st.Has(module+".scales") {
			continue
		}
		wt, err := st.Tensor(name)
		if err != nil {
			return quant.Spec{}, fmt.Errorf("weight footprint: %w", err)
		}
		sc, err := st.Tensor(module + ".scales")
		if err != nil {
			return quant.Spec{}, fmt.Errorf("weight footprint: %w", err)
		}
		spec, err := hfmodel.CheckQuantizedLinear(nil, wt.Shape, sc.Shape, sc.Shape, []int{cfg.VocabSize, cfg.HiddenSize})
		if err != nil {
			return quant.Spec{}, fmt.Errorf("weight footprint: %s: %w", module, err)
		}
		return spec, nil
	}
	return quant.Spec{}, nil
}
