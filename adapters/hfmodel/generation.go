package hfmodel

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// GenerationConfigFile is the name of the generation defaults file.
const GenerationConfigFile = "generation_config.json"

// GenerationConfig holds the generation_config.json values higgs uses. Optional values are nil when absent.
type GenerationConfig struct {
	// EOSTokenIDs is eos_token_id (an int or a list), possibly empty.
	EOSTokenIDs []int32
	BOSTokenID  *int32
	PadTokenID  *int32

	DoSample          *bool
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
	// MaxNewTokens is max_new_tokens, the output length generate() stops at (higgsd's default max_tokens).
	// max_length (prompt and output together, 20 in transformers when unset) is not read.
	MaxNewTokens *int
}

// LoadGenerationConfig reads dir/generation_config.json. A missing file is not an error: it returns the zero
// value. Malformed values are.
func LoadGenerationConfig(dir string) (*GenerationConfig, error) {
	g, err := loadFile(dir, GenerationConfigFile, "generation config", ParseGenerationConfig)
	if errors.Is(err, os.ErrNotExist) {
		return &GenerationConfig{}, nil
	}
	return g, err
}

// ParseGenerationConfig parses generation_config.json contents.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	o, err := parseObject(data)
	if err != nil {
		return nil, fmt.Errorf("%w: generation_config.json: %v", ErrInvalidConfig, err)
	}
	r := &reader{scopes: []scope{{"", o}}}
	g := &GenerationConfig{EOSTokenIDs: r.tokenIDs("eos_token_id")}
	single := func(key string) *int32 {
		ids := r.tokenIDs(key)
		switch len(ids) {
		case 0:
			return nil
		case 1:
			return &ids[0]
		}
		r.addErr("%s: want one token id, got %v", key, ids)
		return nil
	}
	g.BOSTokenID = single("bos_token_id")
	g.PadTokenID = single("pad_token_id")
	if r.has("do_sample") {
		v := r.bool("do_sample", false)
		g.DoSample = &v
	}
	optFloat := func(key string) *float64 {
		if !r.has(key) {
			return nil
		}
		v := r.float(key, 0)
		return &v
	}
	g.Temperature = optFloat("temperature")
	g.TopP = optFloat("top_p")
	g.MinP = optFloat("min_p")
	g.RepetitionPenalty = optFloat("repetition_penalty")
	if r.has("top_k") {
		v := r.int("top_k", 0)
		g.TopK = &v
	}
	if r.has("max_new_tokens") {
		// 0 or less says nothing usable; the server's default then applies.
		if v := r.int("max_new_tokens", 0); v > 0 {
			g.MaxNewTokens = &v
		}
	}
	if err := errors.Join(r.errs...); err != nil {
		return nil, err
	}
	return g, nil
}

// StopTokens is the model's end-of-sequence ids: generation_config.json's first (it is what generate() uses),
// then any further ones config.json names, each once. Both backends report this list as ModelInfo.EOSTokens.
func StopTokens(gen *GenerationConfig, cfg *TextConfig) []int32 {
	var out []int32
	for _, ids := range [][]int32{gen.EOSTokenIDs, cfg.EOSTokenIDs} {
		for _, id := range ids {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}
