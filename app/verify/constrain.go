package verify

import (
	"context"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/adapters/constrained"
	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// ConstrainOptions configure bench --constrain: constrained decoding's cost under a JSON Schema (nil
// Schema: any JSON object).
type ConstrainOptions struct {
	Name   string
	Schema []byte
}

// ConstrainedBench is bench's "constrained" object: greedy constrained decoding of the same prompts,
// autoregressive and speculative (the main figure's block size), each run with a fresh matcher (masks
// computed as a server's first request with that schema computes them).
type ConstrainedBench struct {
	Schema string `json:"schema"`
	// Tokens are the tokens the speculative runs generated; Complete the runs (of either kind) whose output
	// ended with EOS, a whole sentence of the grammar, within max_tokens.
	Tokens   int `json:"tokens"`
	Runs     int `json:"runs"`
	Complete int `json:"complete"`
	// MaskMsPerToken is the masking time (grammar steps, mask computation or cache look-up, the row's
	// masking and the choice from it) per generated token of the speculative runs; MaskMsPerRow the same
	// per verified row; RowsPerToken the rows masked per committed token (speculation verifies rows that
	// rejection then discards).
	MaskMsPerToken float64 `json:"mask_ms_per_token"`
	MaskMsPerRow   float64 `json:"mask_ms_per_row"`
	RowsPerToken   float64 `json:"rows_per_token"`
	// ARMaskMsPerToken is the same per token of the autoregressive runs.
	ARMaskMsPerToken float64 `json:"ar_mask_ms_per_token"`
	// MasksComputed is the masks computed rather than found in the per-state cache (speculative runs).
	MasksComputed int `json:"masks_computed"`
	// ARTokensPerS and SpecTokensPerS are the constrained decode rates (medians over runs).
	ARTokensPerS   float64 `json:"ar_tokens_per_s"`
	SpecTokensPerS float64 `json:"spec_tokens_per_s"`
	// Tau is τ of the constrained speculative runs, TauFree the main figure's (unconstrained) τ.
	Tau     float64 `json:"tau"`
	TauFree float64 `json:"tau_free"`
	// SameOutput reports whether every constrained speculative run gave its autoregressive run's tokens.
	SameOutput bool `json:"same_output"`
}

// measureConstrained runs bench's constrained scenario.
func measureConstrained(ctx context.Context, m *models.Models, o BenchOptions, bs int, tauFree float64) (ConstrainedBench, error) {
	res := ConstrainedBench{Schema: o.Constrain.Name, TauFree: tauFree, SameOutput: true}
	if m.Tokenizer == nil {
		return res, fmt.Errorf("%w: --constrain needs the model's tokenizer", ErrBadInput)
	}
	tb, ok := m.Tokenizer.(ports.TokenBytes)
	if !ok {
		return res, fmt.Errorf("%w: --constrain: the tokenizer does not expose its token bytes", ErrBadInput)
	}
	g := grammar.JSONObject()
	if o.Constrain.Schema != nil {
		var err error
		if g, err = grammar.CompileSchema(ctx, o.Constrain.Schema); err != nil {
			return res, fmt.Errorf("%w: --constrain: %w", ErrBadInput, err)
		}
	}
	vocab := constrained.BuildVocab(tb, m.Target.Info().VocabSize, m.EOS)
	var ar, spec []float64
	var specMask, arMask constrained.Stats
	var arTokens, rounds, committed int
	for _, p := range o.Prompts {
		var outs [][]ports.Token
		for _, v := range []int{1, bs} {
			mt, err := grammar.NewMatcher(g, vocab, m.EOS)
			if err != nil {
				return res, err
			}
			d, err := decode(ctx, m, GenerateOptions{Request: generation.Request{Prompt: p, MaxTokens: o.MaxTokens, StopIDs: o.StopIDs, BlockSize: v, Constraint: mt}, Speculative: v > 1})
			if err != nil {
				return res, err
			}
			res.Runs++
			if n := len(d.Tokens); n > 0 && slices.Contains(m.EOS, d.Tokens[n-1]) {
				res.Complete++
			}
			outs = append(outs, d.Tokens)
			rate := 0.0
			if n := len(d.Tokens) - 1; n > 0 && d.Stats.DecodeTime > 0 {
				rate = float64(n) / d.Stats.DecodeTime.Seconds()
			}
			if v == 1 {
				ar = append(ar, rate)
				arMask.Time += d.Mask.Time
				arTokens += len(d.Tokens)
				continue
			}
			spec = append(spec, rate)
			specMask.Time += d.Mask.Time
			specMask.Rows += d.Mask.Rows
			specMask.Computed += d.Mask.Computed
			res.Tokens += len(d.Tokens)
			for _, r := range d.Stats.Rounds {
				if r.BlockSize > 1 {
					rounds++
					committed += r.Accepted + 1
				}
			}
		}
		res.SameOutput = res.SameOutput && slices.Equal(outs[0], outs[1])
	}
	res.ARTokensPerS, res.SpecTokensPerS = median(ar), median(spec)
	res.MasksComputed = specMask.Computed
	if res.Tokens > 0 {
		res.MaskMsPerToken = ms(specMask.Time) / float64(res.Tokens)
		res.RowsPerToken = float64(specMask.Rows) / float64(res.Tokens)
	}
	if specMask.Rows > 0 {
		res.MaskMsPerRow = ms(specMask.Time) / float64(specMask.Rows)
	}
	if arTokens > 0 {
		res.ARMaskMsPerToken = ms(arMask.Time) / float64(arTokens)
	}
	res.Tau = 1
	if rounds > 0 {
		res.Tau = float64(committed) / float64(rounds)
	}
	return res, nil
}
