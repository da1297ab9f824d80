package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/higgs-go/higgs/app/verify"
)

func (c *cli) certifyCmd() *cobra.Command {
	var f common
	var prompts, sizes, stopIDs, out, verifyRule string
	var maxTokens, batchN, samples int
	var temperature float64
	var seed uint64
	var noWrite, noPrefix bool
	cmd := &cobra.Command{
		Use:   "certify",
		Short: "Certify lossless speculative decoding for this model, drafter, backend and kernel mode; write higgs-certificate.json beside the model",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			bs, err := parseInts("block-sizes", sizes)
			if err != nil {
				return err
			}
			stops, err := parseStopIDs(stopIDs)
			if err != nil {
				return err
			}
			if temperature < 0 {
				return fmt.Errorf("%w: --temperature %v must be ≥ 0", verify.ErrBadInput, temperature)
			}
			if _, err := verify.ParseVerification(verifyRule); err != nil {
				return err
			}
			if noWrite && out != "" {
				return fmt.Errorf("%w: give --out or --no-write, not both", verify.ErrBadInput)
			}
			m, cleanup, err := c.loadModels(ctx, f.modelConfig())
			if err != nil {
				return err
			}
			defer cleanup()
			ps, err := readPrompts(m, &f, prompts, true)
			if err != nil {
				return err
			}
			source := "built-in"
			switch {
			case prompts != "":
				source = prompts
			case f.tokens != "":
				source = "--tokens"
			case f.prompt != "":
				source = "--prompt"
			}
			res, err := verify.Certify(ctx, m, verify.CertifyOptions{Prompts: ps, PromptSource: source, BlockSizes: bs,
				MaxTokens: maxTokens, StopIDs: stops, Batch: batchN, NoPrefixCache: noPrefix, Temperature: temperature,
				Seed: seed, Samples: samples, Verify: verifyRule})
			if err != nil && !errorsIsCheck(err) {
				return err
			}
			// A certificate that did not pass is written too: it says what differed, with the margins.
			if !noWrite {
				if werr := verify.WriteCertificate(&res, out); werr != nil {
					return werr
				}
				if res.FileNote != "" {
					c.log.Warn().Str("file", res.File).Msg(res.FileNote)
				}
			}
			if perr := c.emit(f.json, res, func(w io.Writer) { printCertificate(w, res) }); perr != nil {
				return perr
			}
			return err
		},
	}
	f.add(cmd.Flags(), true)
	fs := cmd.Flags()
	fs.StringVar(&prompts, "prompts", "", "prompts file replacing the prompt set: a JSON array (strings, token-id arrays, {text,chat}/{tokens} objects) or one text prompt per line (default, without --prompt/--tokens: 4 built-in Go-code prompts)")
	fs.StringVar(&sizes, "block-sizes", "", "block sizes to certify (default 1..16; those above the drafter's block_size are listed as not run)")
	fs.IntVar(&maxTokens, "max-tokens", 64, "tokens generated per run")
	fs.StringVar(&stopIDs, "stop-ids", "", "extra stop token ids")
	fs.IntVar(&batchN, "batch", verify.DefaultCertifyBatch, "generations decoded together in the batched modes (0: no batched runs)")
	fs.BoolVar(&noPrefix, "no-prefix-cache", false, "leave out the prefix-cache-hit modes")
	fs.Float64Var(&temperature, "temperature", verify.DefaultCertifyTemperature, "temperature of the distribution test (0: no distribution test)")
	fs.Uint64Var(&seed, "seed", 1, "seed of the distribution test")
	fs.IntVar(&samples, "samples", verify.DefaultDistSamples, "samples per sampler in the distribution test")
	fs.StringVar(&verifyRule, "verify", "residual", "verification of the distribution test's sampled drafts: residual (rejection sampling, higgsd's for requests without a seed) or match")
	fs.StringVar(&out, "out", "", "write the certificate here instead of beside the model (<model dir>/higgs-certificate.json)")
	fs.BoolVar(&noWrite, "no-write", false, "print the certificate only")
	return cmd
}

// printCertificate is certify's text output.
func printCertificate(w io.Writer, r verify.Certificate) {
	fmt.Fprintf(w, "model %s (%s), drafter %s (block size %d), backend %s, kernels %s, build %s\n",
		r.Model, r.Quantization, r.Drafter, r.DrafterBlockSize, r.Backend, orDash(r.Kernels), r.Build)
	fmt.Fprintf(w, "prompts: %d (%s), %d tokens per run, batch %d\n", r.Prompts.Count, r.Prompts.Source, r.MaxTokens, r.Batch)
	fmt.Fprintf(w, "chain: block sizes %s; modes %s\n", verify.SizeRange(r.Chain.BlockSizes), strings.Join(r.Chain.Modes, ", "))
	for _, cs := range r.Chain.Cases {
		fmt.Fprintf(w, "  block %2d %-17s %3d runs %5d tokens cached %5d tau %5.2f disagreements %d\n",
			cs.BlockSize, cs.Mode, cs.Runs, cs.Tokens, cs.CachedTokens, cs.Tau, cs.Disagreements)
	}
	for _, n := range r.Chain.NotRun {
		fmt.Fprintf(w, "  block %2d %s\n", n.BlockSize, n.Reason)
	}
	if r.Chain.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", r.Chain.Note)
	}
	fmt.Fprintf(w, "tree: %s\n", r.Tree.Note)
	for _, d := range r.Disagreements {
		fmt.Fprintf(w, "DISAGREEMENT %s block %d %s prompt %d", d.Shape, d.BlockSize, d.Mode, d.Prompt)
		if d.Member >= 0 {
			fmt.Fprintf(w, " member %d", d.Member)
		}
		fmt.Fprintf(w, " position %d: plain %d, speculative %d", d.Position, d.Plain, d.Spec)
		if mg := d.Margin; mg != nil {
			fmt.Fprintf(w, "; target top-2 %d/%d, logit gap %.4g, probability gap %.4g", mg.Top1, mg.Top2, mg.LogitGap, mg.ProbGap)
		} else if d.MarginError != "" {
			fmt.Fprintf(w, "; margin unavailable: %s", d.MarginError)
		}
		fmt.Fprintln(w)
	}
	if dt := r.Distribution; dt != nil {
		fmt.Fprintf(w, "distribution test T=%g (%s, block %d): %d samples each, chi2 %.2f, %d dof, p %.3g (threshold %g/%d) pass %v\n",
			dt.Temperature, r.Verify, dt.BlockSize, dt.Samples, dt.Chi2, dt.DoF, dt.PValue, dt.Threshold, dt.Tests, dt.Pass)
	}
	fmt.Fprintf(w, "certified: %v (%s) at %s\n", r.Certified, r.Scope, r.When.Format("2006-01-02T15:04:05Z07:00"))
	switch {
	case r.File != "" && r.FileNote != "":
		fmt.Fprintf(w, "written: %s (%s)\n", r.File, r.FileNote)
	case r.File != "":
		fmt.Fprintf(w, "written: %s\n", r.File)
	default:
		fmt.Fprintln(w, "not written (--no-write)")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
