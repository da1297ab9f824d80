package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/modeltools"
	"github.com/higgs-go/higgs/app/verify"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

func (c *cli) logitsCmd() *cobra.Command {
	var f common
	cmd := &cobra.Command{
		Use:   "logits",
		Short: "Print every position's next-token logits for one fresh forward pass over the prompt",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			f.noDraft = true
			m, cleanup, err := c.loadModels(ctx, f.modelConfig())
			if err != nil {
				return err
			}
			defer cleanup()
			prompts, err := readPrompts(m, &f, "")
			if err != nil {
				return err
			}
			res, err := verify.Logits(ctx, m, prompts[0])
			if err != nil {
				return err
			}
			return c.emit(f.json, res, func(w io.Writer) {
				fmt.Fprintf(w, "model %s (%s), %d positions\n", res.Model, res.Backend, len(res.Tokens))
				for i, row := range res.Logits {
					fmt.Fprintf(w, "pos %d token %d: top %s\n", i, res.Tokens[i], topK(row, 5))
				}
			})
		},
	}
	f.add(cmd.Flags(), false)
	return cmd
}

func topK(row []float32, k int) string {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
	s := ""
	for i := range min(k, len(idx)) {
		s += fmt.Sprintf(" %d:%.4f", idx[i], row[idx[i]])
	}
	return s
}

// decodeFlags are generate's decoding flags, shared with lossless/bench where they apply.
type decodeFlags struct {
	maxTokens, blockSize int
	adaptive             bool
	temperature          float64
	topK                 int
	topP, minP           float64
	seed                 uint64
	stopIDs, rollback    string
	verify               string
	tree                 speculative.TreeConfig
}

func (c *cli) generateCmd() *cobra.Command {
	var f common
	var d decodeFlags
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Decode autoregressively, or with DFlash speculative decoding (--draft) with a per-round trace",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			stops, err := parseStopIDs(d.stopIDs)
			if err != nil {
				return err
			}
			rb, err := verify.ParseRollback(d.rollback)
			if err != nil {
				return err
			}
			ver, err := verify.ParseVerification(d.verify)
			if err != nil {
				return err
			}
			m, cleanup, err := c.loadModels(ctx, f.modelConfig())
			if err != nil {
				return err
			}
			defer cleanup()
			prompts, err := readPrompts(m, &f, "")
			if err != nil {
				return err
			}
			o := verify.GenerateOptions{Request: generation.Request{Prompt: prompts[0], MaxTokens: d.maxTokens,
				BlockSize: d.blockSize, Adaptive: d.adaptive, Tree: &d.tree, Seed: d.seed, Verify: ver, StopIDs: stops, Rollback: rb,
				Sampling: ports.SamplingParams{Temperature: d.temperature, TopK: d.topK, TopP: d.topP, MinP: d.minP}},
				Speculative: m.Drafter != nil}
			res, err := verify.Generate(ctx, m, o)
			if err != nil {
				return err
			}
			return c.emit(f.json, res, func(w io.Writer) {
				mode := "autoregressive"
				if o.Speculative {
					gen := "DFlash"
					if res.Drafter != nil {
						gen = res.Drafter.Generation
					}
					mode = fmt.Sprintf("%s, block size %d", gen, res.Stats.BlockSize)
				}
				fmt.Fprintf(w, "model %s (%s), %s\n", res.Model, res.Backend, mode)
				if d := res.Drafter; d != nil && o.Speculative {
					fmt.Fprintf(w, "drafter: %s (%s), dialect %s; features: %s\n", d.Generation, d.Architecture,
						strings.Join(d.Dialect, ", "), strings.Join(d.Features, "; "))
				}
				fmt.Fprintf(w, "tokens: %s\n", fmtTokens(res.Tokens))
				if res.Text != nil {
					fmt.Fprintf(w, "text: %q\n", *res.Text)
				}
				for i, r := range res.Rounds {
					fmt.Fprintf(w, "round %3d: block [%s] accepted %d (%s, draft %.2f ms, verify %.2f ms)\n",
						i, fmtTokens(r.Block), r.Accepted, r.Rollback, r.DraftMS, r.VerifyMS)
				}
				s := res.Stats
				fmt.Fprintf(w, "%d tokens (%s), %d rounds, mean accepted %.2f, tau %.2f, decode %.1f tok/s\n",
					s.GeneratedTokens, s.Finish, s.Rounds, s.MeanAccepted, s.Tau, s.DecodeTokensPerS)
			})
		},
	}
	f.add(cmd.Flags(), true)
	fs := cmd.Flags()
	fs.BoolVar(&f.noDraft, "no-draft", false, "decode autoregressively even when a drafter would be loaded")
	fs.IntVar(&d.maxTokens, "max-tokens", 32, "number of tokens to generate (fewer only if a stop token ends it)")
	fs.IntVar(&d.blockSize, "block-size", 0, "DFlash block size incl. the anchor (default: the drafter's block_size)")
	fs.BoolVar(&d.adaptive, "adaptive", false, "let the adaptive depth policy choose each round's block size (≤ --block-size)")
	fs.IntVar(&d.tree.Budget, "tree-budget", 0, "verify trees of the drafter's top candidates of at most this many nodes (0: chains only; with --adaptive the policy chooses)")
	fs.IntVar(&d.tree.Width, "tree-width", 0, "candidates per draft slot in a tree (0: 4)")
	fs.BoolVar(&d.tree.FullDraft, "tree-full-draft", false, "draft every tree round's block through every drafter layer on every slot (higgsd --tree-full-draft); by default the layers after the first run on the slots the tree can reach alone")
	fs.Float64Var(&d.temperature, "temperature", 0, "sampling temperature (0: greedy)")
	fs.IntVar(&d.topK, "top-k", 0, "top-k (0: off)")
	fs.Float64Var(&d.topP, "top-p", 1, "top-p (1: off)")
	fs.Float64Var(&d.minP, "min-p", 0, "min-p (0: off)")
	fs.Uint64Var(&d.seed, "seed", 0, "sampling seed (with --temperature > 0)")
	fs.StringVar(&d.stopIDs, "stop-ids", "", "extra stop token ids, e.g. 151645,151643")
	fs.StringVar(&d.rollback, "rollback", "auto", "recurrent rollback: auto, replay or recompute")
	addVerifyFlag(fs, &d.verify)
	return cmd
}

// addVerifyFlag adds --verify, how sampled drafts are verified.
func addVerifyFlag(fs *pflag.FlagSet, v *string) {
	fs.StringVar(v, "verify", "match", "verification at --temperature > 0: match (sample-and-match: the output is a function of the seed alone) or residual (rejection sampling)")
}

func (c *cli) losslessCmd() *cobra.Command {
	var f common
	var prompts, sizes, stopIDs, rollbacks, verifyRule string
	var maxTokens, samples int
	var temperature float64
	var seed uint64
	cmd := &cobra.Command{
		Use:   "lossless",
		Short: "Check greedy speculative decoding against greedy autoregressive decoding (and a seeded distribution test at T>0)",
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
			rbs, err := parseRollbacks(rollbacks)
			if err != nil {
				return err
			}
			if temperature < 0 {
				return fmt.Errorf("%w: --temperature %v must be ≥ 0", verify.ErrBadInput, temperature)
			}
			ver, err := verify.ParseVerification(verifyRule)
			if err != nil {
				return err
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
			res, err := verify.Lossless(ctx, m, verify.LosslessOptions{Prompts: ps, BlockSizes: bs, MaxTokens: maxTokens,
				StopIDs: stops, Rollbacks: rbs, Temperature: temperature, Seed: seed, Samples: samples, Verify: ver})
			if err != nil && !errorsIsCheck(err) {
				return err
			}
			if perr := c.emit(f.json, res, func(w io.Writer) {
				for _, cs := range res.Cases {
					fmt.Fprintf(w, "prompt %d block %2d rollback %-9s %3d tokens tau %.2f match %v\n",
						cs.Prompt, cs.BlockSize, cs.Rollback, cs.Tokens, cs.Tau, cs.Match)
				}
				for _, cs := range res.SeededCases {
					fmt.Fprintf(w, "prompt %d block %2d adaptive %-5v T=%g seed %d: %3d tokens tau %.2f same as plain sampling %v\n",
						cs.Prompt, cs.BlockSize, cs.Adaptive, temperature, seed, cs.Tokens, cs.Tau, cs.Match)
				}
				if mm := res.FirstMismatch; mm != nil {
					fmt.Fprintf(w, "FIRST MISMATCH: prompt %d block %d position %d: autoregressive %d, speculative %d (T=%g)\n",
						mm.Prompt, mm.BlockSize, mm.Position, mm.AR, mm.Spec, mm.Temperature)
				}
				if dt := res.Distribution; dt != nil {
					fmt.Fprintf(w, "distribution test T=%g: %d samples each, chi2 %.2f, %d dof, p %.3g (threshold %g) pass %v\n",
						dt.Temperature, dt.Samples, dt.Chi2, dt.DoF, dt.PValue, dt.Threshold, dt.Pass)
				}
				fmt.Fprintf(w, "lossless: pass %v\n", res.Pass)
			}); perr != nil {
				return perr
			}
			return err
		},
	}
	f.add(cmd.Flags(), true)
	fs := cmd.Flags()
	fs.StringVar(&prompts, "prompts", "", "prompts file: a JSON array (strings, token-id arrays, {text,chat}/{tokens} objects) or one text prompt per line (default, without --prompt/--tokens: 4 built-in Go-code prompts)")
	fs.StringVar(&sizes, "block-sizes", "", "block sizes to check (default 2,4,8,16 up to the drafter's block_size)")
	fs.IntVar(&maxTokens, "max-tokens", 64, "tokens generated per run")
	fs.StringVar(&stopIDs, "stop-ids", "", "extra stop token ids")
	fs.StringVar(&rollbacks, "rollback", "auto", "comma-separated rollback modes to check: auto, replay, recompute")
	fs.Float64Var(&temperature, "temperature", 0, "> 0 adds the seeded distribution test at this temperature")
	fs.Uint64Var(&seed, "seed", 1, "seed of the distribution test")
	fs.IntVar(&samples, "samples", verify.DefaultDistSamples, "samples per sampler in the distribution test")
	addVerifyFlag(fs, &verifyRule)
	return cmd
}

func errorsIsCheck(err error) bool { return errors.Is(err, verify.ErrCheckFailed) }

func (c *cli) tokenizeCmd() *cobra.Command {
	var dir, text, chatFile, thinking string
	var noGen, asJSON bool
	cmd := &cobra.Command{
		Use:   "tokenize",
		Short: "Encode text (or a rendered chat) with a tokenizer directory",
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := modeltools.TokenizeOptions{TokenizerDir: dir, ChatFile: chatFile, AddGenerationPrompt: !noGen}
			if cmd.Flags().Changed("text") {
				o.Text = &text
			}
			switch thinking {
			case "":
			case "true", "false":
				v := thinking == "true"
				o.EnableThinking = &v
			default:
				return fmt.Errorf("%w: --enable-thinking %q (want true or false)", verify.ErrBadInput, thinking)
			}
			if dir == "" {
				return fmt.Errorf("%w: --tokenizer DIR is required", verify.ErrBadInput)
			}
			if (o.Text == nil) == (chatFile == "") {
				return fmt.Errorf("%w: give exactly one of --text and --chat", verify.ErrBadInput)
			}
			res, err := modeltools.Tokenize(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("%w: %w", verify.ErrBadInput, err)
			}
			return c.emit(asJSON, res, func(w io.Writer) {
				if res.Text != "" {
					fmt.Fprintf(w, "text: %q\n", res.Text)
				}
				fmt.Fprintf(w, "ids: %s\n", fmtTokens(res.IDs))
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "tokenizer", "", "directory holding tokenizer.json and tokenizer_config.json")
	fs.StringVar(&text, "text", "", "text to encode")
	fs.StringVar(&chatFile, "chat", "", `JSON file {"messages": [...]} to render with the chat template and encode`)
	fs.BoolVar(&noGen, "no-generation-prompt", false, "do not add the generation prompt")
	fs.StringVar(&thinking, "enable-thinking", "", "true or false (default: the template's own)")
	fs.BoolVar(&asJSON, "json", false, "print exactly one JSON object on stdout")
	return cmd
}

func (c *cli) parityCmd() *cobra.Command {
	var f common
	var a, b, bModel string
	var bThreads, bKVBits int
	var o verify.ParityOptions
	cmd := &cobra.Command{
		Use:   "parity",
		Short: "Compare two backends, or two weight variants of one model (--b-model), position by position",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			for _, side := range []string{a, b} {
				if side != models.BackendCPU && side != models.BackendMLX && side != models.BackendCPUFast {
					return fmt.Errorf("%w: unknown backend %q (want cpu, cpu-fast or mlx)", verify.ErrBadInput, side)
				}
			}
			// cpu-fast is the cpu backend with fast kernels; a cpu side keeps --kernels, mlx has no modes.
			side := func(cfg models.ModelConfig, backend string) models.ModelConfig {
				cfg.Backend = backend
				switch backend {
				case models.BackendCPUFast:
					cfg.Backend, cfg.Kernels = models.BackendCPU, models.KernelsFast
				case models.BackendMLX:
					cfg.Kernels = ""
				}
				return cfg
			}
			cfgA := side(f.modelConfig(), a)
			cfgB := side(f.modelConfig(), b)
			if bModel != "" {
				cfgB.Model = bModel
			}
			cfgB.Threads = bThreads
			if bKVBits >= 0 {
				cfgB.KVBits = bKVBits
			}
			ma, cleanA, err := c.loadModels(ctx, cfgA)
			if err != nil {
				return err
			}
			defer cleanA()
			mb, cleanB, err := c.loadModels(ctx, cfgB)
			if err != nil {
				return err
			}
			defer cleanB()
			prompts, err := readPrompts(ma, &f, "")
			if err != nil {
				return err
			}
			o.Prompt = prompts[0]
			res, err := verify.Parity(ctx, ma, mb, o)
			if err != nil && !errorsIsCheck(err) {
				return err
			}
			if perr := c.emit(f.json, res, func(w io.Writer) {
				fmt.Fprintf(w, "a: %s (%s%s)  b: %s (%s%s), %d positions\n", res.A.Model, res.A.Backend, kvNote(ma), res.B.Model, res.B.Backend, kvNote(mb), res.Positions)
				fmt.Fprintf(w, "max |Δlogit| %.3g, max rel %.3g, argmax agree %d/%d, max |Δtap| %.3g\n",
					res.MaxAbs, res.MaxRel, res.ArgmaxAgree, res.ArgmaxChecked, res.TapMaxAbs)
				fmt.Fprintf(w, "greedy continuation match %v\n", res.ContinuationOK)
				if res.DrafterChecked {
					fmt.Fprintf(w, "speculative lossless a %v b %v, drafts agree %d/%d\n", res.SpecLosslessA, res.SpecLosslessB,
						res.DraftAgreement, res.DraftComparable)
				}
				fmt.Fprintf(w, "replay vs recompute: a max %.3g (%d cases), b max %.3g (%d cases)\n",
					res.ReplayA.MaxAbs, res.ReplayA.Cases, res.ReplayB.MaxAbs, res.ReplayB.Cases)
				for _, fl := range res.Failures {
					fmt.Fprintf(w, "FAIL: %s\n", fl)
				}
				fmt.Fprintf(w, "parity: pass %v\n", res.Pass)
			}); perr != nil {
				return perr
			}
			return err
		},
	}
	f.add(cmd.Flags(), true)
	fs := cmd.Flags()
	fs.StringVar(&a, "a", "cpu", "backend A: cpu, cpu-fast (cpu with --kernels fast) or mlx")
	fs.StringVar(&b, "b", "mlx", "backend B: cpu, cpu-fast (cpu with --kernels fast) or mlx")
	fs.StringVar(&bModel, "b-model", "", "model directory for B (a second weight variant, e.g. quantized); default --model")
	fs.IntVar(&bThreads, "b-threads", 0, "CPU worker threads for B (0: GOMAXPROCS)")
	fs.IntVar(&bKVBits, "b-kv-bits", -1, "KV cache format for B: 0 (full precision) or 8 (int8); -1: --kv-bits")
	fs.IntVar(&o.MaxTokens, "max-tokens", 16, "greedy continuation length")
	fs.Float64Var(&o.MaxAbs, "max-abs", verify.DefaultParityMaxAbs, "tolerance: max |Δlogit| (0: bit-identical)")
	fs.Float64Var(&o.Margin, "margin", verify.DefaultParityMargin, "argmax must agree where A's top-2 margin exceeds this")
	fs.Float64Var(&o.TapAbs, "tap-abs", verify.DefaultParityTapAbs, "tolerance: max |Δ| of tapped hidden states")
	fs.Float64Var(&o.ReplayAbs, "replay-abs", verify.DefaultParityReplayAbs, "tolerance: max |Δp| of the next-token distribution after tape replay vs recompute (0: bit-exact, as the CPU backend is)")
	return cmd
}

// benchCmd is `higgs-verify bench`. It is long because it declares every flag of bench's scenarios in one
// place, beside the few lines that turn them into app/verify options.
func (c *cli) benchCmd() *cobra.Command {
	var f common
	var prompts, sweep, trees, stopIDs, verifyRule string
	var o verify.BenchOptions
	var multiTurn, kernelCosts, distributed bool
	var mt verify.MultiTurnOptions
	var rankTimeout time.Duration
	var costRows string
	var co verify.CostsOptions
	var constrain string
	var clients string
	var cl verify.ClientsOptions
	var hogs int
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure autoregressive vs DFlash decoding of the same prompts, interleaved, after a warm-up (medians)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var err error
			if hogs < 0 {
				return fmt.Errorf("%w: --hog %d must be ≥ 0", verify.ErrBadInput, hogs)
			}
			if o.Sweep, err = parseInts("block-sizes", sweep); err != nil {
				return err
			}
			if o.Trees, err = parseInts("trees", trees); err != nil {
				return err
			}
			if o.StopIDs, err = parseStopIDs(stopIDs); err != nil {
				return err
			}
			if o.Verify, err = verify.ParseVerification(verifyRule); err != nil {
				return err
			}
			if kernelCosts {
				if co.Rows, err = parseInts("cost-rows", costRows); err != nil {
					return err
				}
				o.Costs = &co
			}
			if o.Constrain, err = readConstrain(constrain); err != nil {
				return err
			}
			if clients != "" {
				if cl.Clients, err = parseInts("clients", clients); err != nil {
					return err
				}
				o.Clients = &cl
			}
			mc := f.modelConfig()
			mc.Distributed, mc.RankTimeout = distributed, rankTimeout
			if models.IsDistributedWorker(distributed, os.Getenv) {
				return models.RunWorker(ctx, mc, c.log)
			}
			m, cleanup, err := c.loadModels(ctx, mc)
			if err != nil {
				return err
			}
			defer cleanup()
			if o.Prompts, err = readPrompts(m, &f, prompts, true); err != nil {
				return err
			}
			if multiTurn {
				o.MultiTurn = &mt
			}
			if hogs > 0 {
				stop, err := startHogs(hogs)
				if err != nil {
					return err
				}
				defer func() {
					cpu, err := stop()
					if err != nil {
						c.log.Warn().Err(err).Int("hogs", hogs).Msg("hogs stopped with an error")
						return
					}
					c.log.Debug().Dur("hog_cpu", cpu).Int("hogs", hogs).Msg("hogs stopped")
				}()
			}
			bench, err := verify.Bench(ctx, m, o)
			if err != nil {
				return err
			}
			res := struct {
				verify.BenchResult
				Hog   int                `json:"hog,omitempty"`
				Ranks []models.RankStats `json:"ranks,omitempty"`
			}{BenchResult: bench, Hog: hogs}
			if res.Ranks, err = models.StopPipeline(m); err != nil {
				return err
			}
			return c.emit(f.json, res, func(w io.Writer) {
				fmt.Fprintf(w, "model %s (%s), %d prompts × %d tokens, %d repeats after %d warm-up\n",
					res.Model, res.Backend, res.Prompts, res.MaxTokens, res.Repeats, res.Warmup)
				if res.Hog > 0 {
					fmt.Fprintf(w, "beside %d busy-loop processes (--hog), each spinning a core for the whole run\n", res.Hog)
				}
				if res.Verify != "" {
					fmt.Fprintf(w, "sampling T=%g from seed %d, verification %s\n", res.Temperature, res.Seed, res.Verify)
				}
				fmt.Fprintf(w, "%-34s %10s %8s %8s %10s %10s %8s %10s\n", "", "tok/s", "tau", "rows", "draft ms", "verify ms", "speedup", "predicted")
				fmt.Fprintf(w, "%-34s %10.2f %8s %8s %10s %10s %8s %10s\n", "autoregressive", res.AR.TokensPerS, "-", "1", "-", "-", "1.00", "-")
				row := func(name string, s verify.BenchSpec) {
					if s.Tree > 0 && s.Adaptive {
						// The adaptive rows' tree budget, and how many of their rounds verified trees.
						name += fmt.Sprintf(" tree≤%d (%d)", s.Tree, s.TreeRounds)
					}
					fmt.Fprintf(w, "%-34s %10.2f %8.2f %8.2f %10.2f %10.2f %8.2f %10.2f\n", name, s.TokensPerS, s.Tau, s.RowsPerRound,
						s.DraftMsPerRound, s.VerifyMsPerRound, s.Speedup, s.PredictedSpeedup)
					if s.Adaptive && len(s.Arms) > 0 {
						// Where the policy spent its rounds: each arm's cost a token beside plain decoding's, both
						// timed without what the loop does around a round's phases.
						fmt.Fprintf(w, "    arms (ms of draft, verify and rollback; an autoregressive step: %.3f ms)\n", res.AR.StepMs)
						for _, a := range s.Arms {
							fmt.Fprintf(w, "    %-10s %7d rounds (%d probing) tau %5.2f %7.3f ms/round %7.3f ms/token %5.1f%% of the time\n",
								a.Arm, a.Rounds, a.Probes, a.Tau, a.MsPerRound, a.MsPerToken, 100*a.TimeShare)
						}
					}
				}
				name := fmt.Sprintf("dflash bs=%d", res.Spec.BlockSize)
				if res.Spec.Adaptive {
					name += " adaptive"
				}
				row(name, res.Spec)
				if res.Adaptive != nil {
					row(fmt.Sprintf("dflash adaptive ≤%d", res.Adaptive.BlockSize), *res.Adaptive)
				}
				for _, s := range res.Sweep {
					row(fmt.Sprintf("dflash bs=%d", s.BlockSize), s)
				}
				for _, s := range res.Trees {
					row(fmt.Sprintf("dflash tree≤%d bs=%d", s.Tree, s.BlockSize), s)
				}
				if mt := res.MultiTurn; mt != nil {
					fmt.Fprintf(w, "\nmulti-turn: %d-token system prompt, %d turns × %d tokens, dflash bs=%d, prefix cache off vs on\n",
						mt.SystemTokens, len(mt.Turns), mt.MaxTokens, mt.BlockSize)
					fmt.Fprintf(w, "%-6s %8s %8s %12s %12s %8s %6s", "turn", "prompt", "cached", "ttft off ms", "ttft on ms", "ratio", "same")
					if mt.DiskBytes > 0 {
						fmt.Fprintf(w, " %8s %12s %8s %6s", "d.cached", "ttft disk ms", "d.ratio", "d.same")
					}
					fmt.Fprintln(w)
					for _, t := range mt.Turns {
						fmt.Fprintf(w, "%-6d %8d %8d %12.1f %12.1f %8.2f %6t", t.Turn, t.PromptTokens, t.CachedTokens, t.TTFTMsOff, t.TTFTMsOn, t.Ratio, t.Same)
						if t.DiskSame != nil {
							fmt.Fprintf(w, " %8d %12.1f %8.2f %6t", t.DiskCachedTokens, t.TTFTMsDisk, t.DiskRatio, *t.DiskSame)
						}
						fmt.Fprintln(w)
					}
					fmt.Fprintf(w, "tau on the last turn: %.2f off, %.2f on; cache holds %d bytes\n", mt.TauLastOff, mt.TauLastOn, mt.CacheBytes)
					if mt.DiskBytes > 0 {
						fmt.Fprintf(w, "disk tier: %d bytes after the last turn, %.0f bytes per cached token (its longest record)\n", mt.DiskBytes, mt.DiskBytesPerToken)
					}
				}
				if kc := res.Costs; kc != nil {
					printCosts(w, kc)
				}
				if cb := res.Constrained; cb != nil {
					fmt.Fprintf(w, "\nconstrained (%s): mask %.4f ms/token speculative (%.2f rows/token, %.4f ms/row, %d masks computed), %.4f ms/token autoregressive\n",
						cb.Schema, cb.MaskMsPerToken, cb.RowsPerToken, cb.MaskMsPerRow, cb.MasksComputed, cb.ARMaskMsPerToken)
					fmt.Fprintf(w, "tok/s %.2f autoregressive, %.2f speculative; tau %.2f constrained, %.2f free; same output %t; %d of %d runs complete\n",
						cb.ARTokensPerS, cb.SpecTokensPerS, cb.Tau, cb.TauFree, cb.SameOutput, cb.Complete, cb.Runs)
				}
				if len(res.Clients) > 0 {
					printClients(w, res.BenchResult)
				}
				if len(res.Ranks) > 0 {
					printRanks(w, res.Ranks)
				}
			})
		},
	}
	f.add(cmd.Flags(), true)
	fs := cmd.Flags()
	fs.StringVar(&prompts, "prompts", "", "prompts file (see lossless; default, without --prompt/--tokens: 4 built-in Go-code prompts)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 128, "tokens generated per run")
	fs.IntVar(&o.Repeats, "repeats", 3, "measured passes over the prompts")
	fs.IntVar(&o.Warmup, "warmup", 1, "discarded warm-up passes")
	fs.IntVar(&hogs, "hog", 0, "run this many busy-loop processes beside the whole bench (each spins one core, as another program sharing the machine would): the adaptive policy's figures under contention")
	fs.IntVar(&o.BlockSize, "block-size", 0, "DFlash block size of the main figure (default: the drafter's block_size)")
	fs.BoolVar(&o.Adaptive, "adaptive", false, "run the main figure under the adaptive depth policy")
	fs.StringVar(&sweep, "block-sizes", "", "also measure these fixed block sizes (and the adaptive policy), e.g. 2,4,8,16")
	fs.IntVar(&o.TreeBudget, "tree-budget", -1, "give the main figure (and the adaptive policy's) tree verification of at most this many nodes (with --adaptive the policy chooses tree or chain); -1, higgsd's default: the adaptive rows weigh trees up to the block size, a fixed main figure verifies chains; 0: chains only")
	fs.IntVar(&o.TreeWidth, "tree-width", 0, "candidates per draft slot in a tree (0: 4)")
	fs.BoolVar(&o.TreeFullDraft, "tree-full-draft", false, "draft every tree round's block through every drafter layer on every slot (higgsd --tree-full-draft); by default the layers after the first run on the slots the tree can reach alone")
	fs.StringVar(&trees, "trees", "", "also measure fixed trees of these node budgets at --block-size, e.g. 8,16")
	fs.StringVar(&stopIDs, "stop-ids", "", "extra stop token ids")
	fs.Float64Var(&o.Sampling.Temperature, "temperature", 0, "sampling temperature of every run (0: greedy)")
	fs.IntVar(&o.Sampling.TopK, "top-k", 0, "top-k (0: off)")
	fs.Float64Var(&o.Sampling.TopP, "top-p", 1, "top-p (1: off)")
	fs.Float64Var(&o.Sampling.MinP, "min-p", 0, "min-p (0: off)")
	fs.Uint64Var(&o.Seed, "seed", 0, "sampling seed of the first run; each prompt and pass adds one, the same for every variant")
	addVerifyFlag(fs, &verifyRule)
	fs.BoolVar(&multiTurn, "multi-turn", false, "also run the multi-turn scenario: time to first token per turn with the prefix cache off and on, and τ on the last turn")
	fs.IntVar(&mt.Turns, "turns", 6, "multi-turn: conversation turns")
	fs.IntVar(&mt.SystemTokens, "system-tokens", 1500, "multi-turn: system prompt length in tokens (cut from the prompts, cycled)")
	fs.Int64Var(&mt.CacheBytes, "prefix-cache-bytes", app.DefaultConfig().PrefixCacheBytes, "multi-turn: the prefix cache's budget")
	fs.IntVar(&mt.Every, "prefix-cache-every", app.DefaultConfig().PrefixCacheEvery, "multi-turn: the prefix cache's boundary interval")
	fs.StringVar(&mt.DiskDir, "prefix-cache-dir", "", "multi-turn: also time each turn from the prefix cache's disk tier after a simulated restart (the cache-on side's entries flushed to a fresh directory under this one, removed afterwards; a new cache with an empty memory reads them)")
	fs.Int64Var(&mt.DiskBytes, "prefix-cache-disk-bytes", app.DefaultConfig().PrefixCacheDiskBytes, "multi-turn: the disk tier's budget")
	fs.DurationVar(&rankTimeout, "rank-timeout", models.DefaultRankTimeout, "with --distributed, how soon a lost rank is noticed (as higgsd --rank-timeout)")
	fs.BoolVar(&distributed, "distributed", false, "split the target across processes with MLX distributed (as higgsd --distributed: MLX_RANK, MLX_HOSTFILE; ranks ≠ 0 serve rank 0) and report each rank's forward time, the time it waited for its input and the time it spent sending, for single and (with --clients) batched rounds")
	fs.BoolVar(&kernelCosts, "kernel-costs", false, "also measure the target's kernel costs: decode ms/token, verify cost of --cost-rows rows in decode steps, prefill tokens/s, achieved bandwidth and arithmetic rate, beside the CPU's features")
	fs.StringVar(&costRows, "cost-rows", "2,4,8,16", "kernel costs: verify row counts")
	fs.IntVar(&co.Context, "cost-context", 128, "kernel costs: context length (prefilled, then held for every decode and verify Forward)")
	fs.IntVar(&co.Repeats, "cost-repeats", 7, "kernel costs: measured rounds (after one warm-up)")
	fs.StringVar(&constrain, "constrain", "", "also measure constrained decoding (greedy, autoregressive and speculative) under json_object or the JSON Schema in this file: the mask cost per token, τ and the rates (constrained)")
	fs.StringVar(&clients, "clients", "", "also measure this many concurrent clients decoding together (e.g. 1,2,4,8): aggregate tokens/s and per-client p50/p95 inter-token latency, speculation off and on")
	fs.IntVar(&cl.PrefillChunk, "prefill-chunk", app.DefaultConfig().PrefillChunk, "clients: prefill chunk in tokens (0: whole prompts)")
	fs.DurationVar(&cl.BatchWait, "batch-wait", app.DefaultConfig().BatchWait, "clients: longest a round waits for a client's next block")
	return cmd
}

// printRanks is the text form of bench --distributed: per rank, its layers, weights and the mean time of
// its part of a forward round (own layers; waiting for the input, i.e. the ranks before it and the
// transfers, on rank 0 the whole round trip of the others; sending its output on, i.e. the transfer as the
// sender sees it), the bytes it sent, and the same per batched round (bench --clients runs them) with the
// micro-batches they were cut into.
func printRanks(w io.Writer, ranks []models.RankStats) {
	fmt.Fprintf(w, "\npipeline: %d ranks\n%-5s %10s %14s %9s %12s %12s %12s %10s | %8s %6s %12s %12s %12s\n", len(ranks),
		"rank", "layers", "weight bytes", "forwards", "compute ms", "wait ms", "send ms", "sent MB", "batches", "micro", "compute ms", "wait ms", "send ms")
	for _, r := range ranks {
		per := func(d time.Duration, n int) float64 {
			if n == 0 {
				return 0
			}
			return float64(d) / float64(time.Millisecond) / float64(n)
		}
		fmt.Fprintf(w, "%-5d %10s %14d %9d %12.3f %12.3f %12.3f %10.2f | %8d %6d %12.3f %12.3f %12.3f\n", r.Rank, fmt.Sprintf("%d-%d", r.Lo, r.Hi-1),
			r.WeightBytes, r.Forwards, per(r.Compute, r.Forwards), per(r.Wait, r.Forwards), per(r.Send, r.Forwards), float64(r.SentBytes)/1e6,
			r.Batches, r.MicroBatches, per(r.BatchCompute, r.Batches), per(r.BatchWait, r.Batches), per(r.BatchSend, r.Batches))
	}
}

// printClients is the text form of bench --clients.
func printClients(w io.Writer, res verify.BenchResult) {
	b := res.ClientsBatch
	fmt.Fprintf(w, "\nconcurrent clients, %d tokens each, dflash bs=%d (batched forward %t, batched draft %t)\n",
		res.MaxTokens, res.Clients[0].Spec.BlockSize, b.BatchedForward, b.BatchedDraft)
	fmt.Fprintf(w, "%-8s %-5s %10s %8s %10s %10s %10s %6s %6s\n", "clients", "mode", "tok/s", "scaling", "p50 itl", "p95 itl", "worst p95", "batch", "tau")
	for _, r := range res.Clients {
		for _, x := range []struct {
			mode string
			f    verify.BenchClientsFigure
		}{{"ar", r.AR}, {"spec", r.Spec}} {
			fmt.Fprintf(w, "%-8d %-5s %10.2f %8.2f %10.2f %10.2f %10.2f %6.2f %6.2f\n", r.Clients, x.mode, x.f.TokensPerS,
				x.f.Scaling, x.f.P50ITLMs, x.f.P95ITLMs, x.f.WorstP95ITLMs, x.f.MeanBatch, x.f.Tau)
		}
	}
}

// printCosts is the text form of bench --kernel-costs.
func printCosts(w io.Writer, kc *verify.KernelCosts) {
	fmt.Fprintf(w, "\nkernel costs (%s, %s, %d threads; cpu: %s), context %d, %d rounds (medians)\n",
		kc.Backend, kc.CPU.Arch, kc.CPU.Threads, kc.CPU, kc.ContextTokens, kc.Repeats)
	fmt.Fprintf(w, "prefill %.1f tokens/s; decode %.3f ms/token, %.2f GB/s of %d weight bytes, %.2f GFLOP/s of %d params\n",
		kc.PrefillTokensPerS, kc.DecodeMsPerToken, kc.BandwidthGBPerS, kc.WeightBytes, kc.GFLOPPerS, kc.Params)
	fmt.Fprintf(w, "%-10s %10s %14s %10s\n", "verify", "ms", "decode steps", "GFLOP/s")
	for _, v := range kc.Verify {
		fmt.Fprintf(w, "%-10s %10.3f %14.2f %10.2f\n", fmt.Sprintf("%d rows", v.Rows), v.Ms, v.DecodeSteps, v.GFLOPPerS)
	}
}

// kvNote names a cpu model's KV format beside its backend in parity's report (", kv 8"); nothing for the
// full-precision default or mlx.
func kvNote(m *models.Models) string {
	if m.KVBits == 8 {
		return ", kv 8"
	}
	return ""
}
