package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// PoolingFile is where a sentence-transformers model states how its embeddings are pooled, relative to the
// model directory (Qwen3-Embedding ships one saying last-token pooling).
const PoolingFile = "1_Pooling/config.json"

// PoolingLastToken is the pooling higgs computes: the last position's final hidden state.
const PoolingLastToken = "lasttoken"

// Pooling is what a model's pooling config says about its embeddings.
type Pooling struct {
	// Mode is the pooling it declares (PoolingLastToken, "mean", "cls", "max", "mean_sqrt_len",
	// "weightedmean", several joined by "+"); "" when the model ships no pooling config.
	Mode string
	// Dimension is its word_embedding_dimension (0: not stated).
	Dimension int
}

// ReadPooling reads dir's PoolingFile; a model without one has the zero Pooling.
func ReadPooling(dir string) (Pooling, error) {
	raw, err := os.ReadFile(filepath.Join(dir, PoolingFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Pooling{}, nil
	}
	if err != nil {
		return Pooling{}, fmt.Errorf("pooling config: %w", err)
	}
	return ParsePooling(raw)
}

// ParsePooling parses a sentence-transformers pooling config.
func ParsePooling(raw []byte) (Pooling, error) {
	var c struct {
		Dimension    int  `json:"word_embedding_dimension"`
		CLS          bool `json:"pooling_mode_cls_token"`
		Mean         bool `json:"pooling_mode_mean_tokens"`
		Max          bool `json:"pooling_mode_max_tokens"`
		MeanSqrtLen  bool `json:"pooling_mode_mean_sqrt_len_tokens"`
		WeightedMean bool `json:"pooling_mode_weightedmean_tokens"`
		LastToken    bool `json:"pooling_mode_lasttoken"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return Pooling{}, fmt.Errorf("pooling config %s: %w", PoolingFile, err)
	}
	if c.Dimension < 0 {
		return Pooling{}, fmt.Errorf("pooling config %s: word_embedding_dimension %d is negative", PoolingFile, c.Dimension)
	}
	var modes []string
	for _, m := range []struct {
		on   bool
		name string
	}{{c.CLS, "cls"}, {c.Mean, "mean"}, {c.Max, "max"}, {c.MeanSqrtLen, "mean_sqrt_len"}, {c.WeightedMean, "weightedmean"}, {c.LastToken, PoolingLastToken}} {
		if m.on {
			modes = append(modes, m.name)
		}
	}
	if len(modes) == 0 {
		return Pooling{}, fmt.Errorf("pooling config %s names no pooling mode", PoolingFile)
	}
	return Pooling{Mode: strings.Join(modes, "+"), Dimension: c.Dimension}, nil
}
