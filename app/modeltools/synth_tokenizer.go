package modeltools

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/higgs-go/higgs/app/verify"
)

// copyTokenizer copies src's tokenizer.json (and tokenizer_config.json, when present) into dst, after
// checking that every id it defines is below vocab, the synth's embedding rows.
func copyTokenizer(src, dst string, vocab int) error {
	b, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		return fmt.Errorf("%w: tokenizer: %w", verify.ErrBadInput, err)
	}
	var tf struct {
		AddedTokens []struct {
			ID int `json:"id"`
		} `json:"added_tokens"`
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &tf); err != nil {
		return fmt.Errorf("%w: tokenizer %s: %w", verify.ErrBadInput, src, err)
	}
	top := -1
	for _, id := range tf.Model.Vocab {
		top = max(top, id)
	}
	for _, a := range tf.AddedTokens {
		top = max(top, a.ID)
	}
	if top >= vocab {
		return fmt.Errorf("%w: tokenizer %s defines id %d, past the synth's vocabulary of %d (raise --vocab)", verify.ErrBadInput, src, top, vocab)
	}
	if err := os.WriteFile(filepath.Join(dst, "tokenizer.json"), b, 0o644); err != nil {
		return err
	}
	cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, "tokenizer_config.json"), cfg, 0o644)
}
