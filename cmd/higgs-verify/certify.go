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
	var prompts, sizes, budgets, stopIDs, out, verifyRule string
	var maxTokens, batchN, samples, treeWidth int
	var temperature float64
	var seed uint64
	var noWrite, noPrefix, noTrees bool
	cmd := &cobra.Command{
		Use:   "certify",
		Short: "Certify lossless speculative decoding for this model, drafter, backend and kernel mode; write higgs-certificate.json beside the model",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			bs, err := parseInts("block-sizes", sizes)
			if err != nil {
				return err
			}
			tb, err := parseInts("tree-budgets", budgets)
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
				Seed: seed, Samples: samples, Verify: verifyRule, TreeBudgets: tb, TreeWidth: treeWidth, NoTrees: noTrees})
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
	fs.StringVar(&budgets, "tree-budgets", intList(verify.DefaultCertifyTreeBudgets), "node budgets of the tree runs (anchor included), at each block size ≥ 3 whose tree can hold them")
	fs.IntVar(&treeWidth, "tree-width", verify.DefaultCertifyTreeWidth, "candidates per draft slot in the tree runs")
	fs.BoolVar(&noTrees, "no-trees", false, "leave out the tree runs (the certificate's tree section says so)")
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
	printTrees(w, r.Tree)
	for _, d := range r.Disagreements {
		fmt.Fprintf(w, "DISAGREEMENT %s block %d", d.Shape, d.BlockSize)
		if d.Budget > 0 {
			fmt.Fprintf(w, " budget %d", d.Budget)
		}
		fmt.Fprintf(w, " %s prompt %d", d.Mode, d.Prompt)
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
	if dt := r.TreeDistribution; dt != nil {
		fmt.Fprintf(w, "tree distribution test T=%g (match, block %d, budget %d, tree rounds %d of %d): %d samples each, chi2 %.2f, %d dof, p %.3g (threshold %g/%d) pass %v\n",
			dt.Temperature, dt.BlockSize, dt.Budget, dt.TreeRounds, dt.DraftRounds, dt.Samples, dt.Chi2, dt.DoF, dt.PValue, dt.Threshold, dt.Tests, dt.Pass)
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

// printTrees is the tree section of certify's text output: its cases with the rounds that verified a tree,
// the budgets not run, and its note (why it verified no tree, or that batched members verify chains).
func printTrees(w io.Writer, t verify.CertSection) {
	if t.Verified {
		fmt.Fprintf(w, "tree: block sizes %s; budgets %s; width %d; modes %s\n", verify.SizeRange(t.BlockSizes),
			intList(t.Budgets), t.Width, strings.Join(t.Modes, ", "))
	} else {
		fmt.Fprintf(w, "tree: %s\n", t.Note)
	}
	for _, cs := range t.Cases {
		fmt.Fprintf(w, "  block %2d budget %2d %-17s %3d runs %5d tokens cached %5d tau %5.2f tree rounds %d of %d disagreements %d\n",
			cs.BlockSize, cs.Budget, cs.Mode, cs.Runs, cs.Tokens, cs.CachedTokens, cs.Tau, cs.TreeRounds, cs.DraftRounds, cs.Disagreements)
	}
	for _, n := range t.NotRun {
		fmt.Fprintf(w, "  block %2d budget %2d %s\n", n.BlockSize, n.Budget, n.Reason)
	}
	if t.Verified && t.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", t.Note)
	}
}

// intList writes a list as "4,8,16".
func intList(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
