package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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

// quantConfig is the part of config.json that says how packed tensors unpack (mlx-lm's layout: a global
// group_size and per-module overrides keyed by the module path).
type quantConfig struct {
	Tied  bool                       `json:"tie_word_embeddings"`
	Quant map[string]json.RawMessage `json:"quantization"`
}

// ReadWeightFootprint sums the target's tensors in dir from the safetensors headers, without reading the data.
// It reads the stored files, not the backend's in-memory layout: a backend that repacks weights (the CPU fast
// kernels) reads a similar but not identical number of bytes.
func ReadWeightFootprint(dir string) (WeightFootprint, error) {
	var qc quantConfig
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return WeightFootprint{}, fmt.Errorf("weight footprint: %w", err)
	}
	if err := json.Unmarshal(raw, &qc); err != nil {
		return WeightFootprint{}, fmt.Errorf("weight footprint: %s/config.json: %w", dir, err)
	}
	groupSize := func(module string) int {
		for _, key := range []string{module, "group_size"} {
			v, ok := qc.Quant[key]
			if !ok {
				continue
			}
			var n int
			if json.Unmarshal(v, &n) == nil && n > 0 {
				return n
			}
			var o struct {
				GroupSize int `json:"group_size"`
			}
			if json.Unmarshal(v, &o) == nil && o.GroupSize > 0 {
				return o.GroupSize
			}
		}
		return 0
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return WeightFootprint{}, fmt.Errorf("weight footprint: %w", err)
	}
	var w WeightFootprint
	for _, name := range st.Names() {
		// Multi-token-prediction heads ship in some checkpoints but take no part in a decode.
		if strings.HasPrefix(name, "mtp.") || (!qc.Tied && strings.Contains(name, "embed_tokens")) {
			continue
		}
		t, err := st.Tensor(name)
		if err != nil {
			return WeightFootprint{}, errors.Join(fmt.Errorf("weight footprint: %w", err), st.Close())
		}
		size, ok := t.DType.Size()
		if !ok {
			return WeightFootprint{}, errors.Join(fmt.Errorf("weight footprint: tensor %q: dtype %s has no byte size", name, t.DType), st.Close())
		}
		w.Bytes += int64(t.NumElements()) * int64(size)
		module, isWeight := strings.CutSuffix(name, ".weight")
		switch {
		case strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases"):
			// Quantization metadata: bytes, no multiply-accumulates of their own.
		case isWeight && t.DType == safetensors.U32 && st.Has(module+".scales"):
			sc, err := st.Tensor(module + ".scales")
			if err != nil {
				return WeightFootprint{}, errors.Join(fmt.Errorf("weight footprint: %w", err), st.Close())
			}
			gs := groupSize(module)
			if gs == 0 || len(sc.Shape) == 0 {
				return WeightFootprint{}, errors.Join(fmt.Errorf("weight footprint: %q is packed but %s/config.json gives no quantization group_size", name, dir), st.Close())
			}
			w.Params += int64(sc.NumElements()) * int64(gs)
		default:
			w.Params += int64(t.NumElements())
		}
	}
	return w, st.Close()
}
