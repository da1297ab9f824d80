package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/verify"
	"github.com/higgs-go/higgs/domain/speculative"
	"github.com/higgs-go/higgs/ports"
)

// Exit statuses of the higgs-verify contract (docs/higgs-verify.md).
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// modelLoader is the wire injector (initModels), replaceable in tests.
type modelLoader func(ctx context.Context, cfg models.ModelConfig, log zerolog.Logger) (*models.Models, func(), error)

// cli holds what every subcommand shares.
type cli struct {
	stdout, stderr io.Writer
	load           modelLoader
	log            zerolog.Logger
	logLevel       string
}

// run executes higgs-verify with args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, load modelLoader) (code int) {
	c := &cli{stdout: stdout, stderr: stderr, load: load}
	// A panic is a bug, but it still ends as the contract says: one line on stderr (the stack only at debug
	// level), nothing half-written on stdout, exit 2 (the status Go itself would use, without the dump).
	defer func() {
		if v := recover(); v != nil {
			c.log.Debug().Str("stack", string(debug.Stack())).Msg("panic")
			fmt.Fprintln(stderr, "higgs-verify: internal error (a bug; rerun with --log-level debug for the stack):",
				strings.ReplaceAll(fmt.Sprint(v), "\n", "; "))
			code = exitUsage
		}
	}()
	root := c.root()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	// One line: joined errors are flattened.
	fmt.Fprintln(stderr, "higgs-verify:", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
	if errors.Is(err, verify.ErrCheckFailed) {
		return exitFailed
	}
	return exitUsage
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "higgs-verify",
		Short:         "Check the higgs engine against references (stable JSON contract: docs/higgs-verify.md)",
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			lvl, err := zerolog.ParseLevel(c.logLevel)
			if err != nil || c.logLevel == "" {
				return fmt.Errorf("%w: --log-level %q (want trace, debug, info, warn, error or disabled)", verify.ErrBadInput, c.logLevel)
			}
			app.UseDurationUnits()
			c.log = zerolog.New(zerolog.ConsoleWriter{Out: c.stderr, NoColor: true}).Level(lvl).With().Timestamp().Logger()
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("%w: a subcommand is required (logits, generate, lossless, tokenize, parity, bench, synth, certify)", verify.ErrBadInput)
		},
	}
	root.PersistentFlags().StringVar(&c.logLevel, "log-level", "warn", "stderr log level: trace, debug, info, warn, error, disabled")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %w", verify.ErrBadInput, err) })
	root.AddCommand(c.logitsCmd(), c.generateCmd(), c.losslessCmd(), c.tokenizeCmd(), c.parityCmd(), c.benchCmd(), c.synthCmd(), c.exportGGUFCmd(), c.certifyCmd())
	for _, sub := range root.Commands() {
		sub.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: unexpected arguments %q", verify.ErrBadInput, args)
			}
			return nil
		}
	}
	return root
}

// common are the flags most subcommands share.
type common struct {
	model, draft, backend, tokens, prompt string
	kernels                               string
	chat, json, noDraft                   bool
	threads, kvBits                       int
}

func (f *common) add(fs *pflag.FlagSet, draft bool) {
	fs.StringVar(&f.model, "model", "", "target model directory or Hugging Face hub-cache id (default: the bundled gocoder model)")
	if draft {
		fs.StringVar(&f.draft, "draft", "", "DFlash drafter directory or hub-cache id")
	}
	fs.StringVar(&f.backend, "backend", "cpu", "backend: cpu, mlx or auto")
	fs.StringVar(&f.tokens, "tokens", "", "prompt token ids, e.g. 1,2,3")
	fs.StringVar(&f.prompt, "prompt", "", "prompt text, encoded with the model's tokenizer")
	fs.BoolVar(&f.chat, "chat", false, "apply the model's chat template to --prompt first")
	fs.BoolVar(&f.json, "json", false, "print exactly one JSON object on stdout")
	fs.IntVar(&f.threads, "threads", 0, "CPU worker threads (0: GOMAXPROCS)")
	fs.StringVar(&f.kernels, "kernels", models.KernelsExact, "CPU kernels: exact (the bit-exact reference) or fast (4-bit products with int8 inputs; not bit-identical)")
	fs.IntVar(&f.kvBits, "kv-bits", 0, "attention KV cache format: 0 (full precision) or 8 (int8 with a scale per position and KV head)")
}

func (f *common) modelConfig() models.ModelConfig {
	return models.ModelConfig{Model: f.model, Draft: f.draft, NoDraft: f.noDraft, Backend: f.backend, Threads: f.threads, Kernels: f.kernels, KVBits: f.kvBits}
}

// promptInputs returns the prompt given by --tokens / --prompt (nil when neither).
func (f *common) promptInput() (*verify.PromptInput, error) {
	switch {
	case f.tokens != "" && f.prompt != "":
		return nil, fmt.Errorf("%w: give --tokens or --prompt, not both", verify.ErrBadInput)
	case f.tokens != "":
		if f.chat {
			return nil, fmt.Errorf("%w: --chat applies to --prompt, not --tokens", verify.ErrBadInput)
		}
		t, err := verify.ParseTokenList(f.tokens)
		if err != nil {
			return nil, err
		}
		return &verify.PromptInput{Tokens: t}, nil
	case f.prompt != "":
		return &verify.PromptInput{Text: f.prompt, Chat: f.chat}, nil
	}
	return nil, nil
}

// loadModels loads cfg; a load failure is bad input (exit 2).
func (c *cli) loadModels(ctx context.Context, cfg models.ModelConfig) (*models.Models, func(), error) {
	m, cleanup, err := c.load(ctx, cfg, c.log)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", verify.ErrBadInput, err)
	}
	return m, cleanup, nil
}

// emit prints v as one JSON object (asJSON) or with text.
func (c *cli) emit(asJSON bool, v any, text func(io.Writer)) error {
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		if err := enc.Encode(v); err != nil {
			if uv := (*json.UnsupportedValueError)(nil); errors.As(err, &uv) {
				// NaN or ±Inf (a corrupt checkpoint, a numerical blow-up) has no JSON form.
				return fmt.Errorf("%w: the result holds %s, which JSON cannot represent (non-finite values: corrupt weights?); run without --json to see it",
					verify.ErrBadInput, uv.Str)
			}
			return fmt.Errorf("write JSON: %w", err)
		}
		return nil
	}
	text(c.stdout)
	return nil
}

func parseInts(name, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%w: --%s entry %q is not an integer", verify.ErrBadInput, name, strings.TrimSpace(p))
		}
		out = append(out, v)
	}
	return out, nil
}

func parseStopIDs(s string) ([]ports.Token, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	ids, err := verify.ParseTokenList(s)
	if err != nil {
		return nil, fmt.Errorf("--stop-ids: %w", err)
	}
	return ids, nil
}

func parseRollbacks(s string) ([]speculative.RollbackMode, error) {
	var out []speculative.RollbackMode
	for _, p := range strings.Split(s, ",") {
		m, err := verify.ParseRollback(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// readPrompts resolves --prompts FILE, or --tokens/--prompt, into token ids for m; with none given, the
// commands that take several prompts (lossless, bench: defaults true) use verify.DefaultPrompts.
func readPrompts(m *models.Models, f *common, file string, defaults ...bool) ([][]ports.Token, error) {
	var inputs []verify.PromptInput
	one, err := f.promptInput()
	if err != nil {
		return nil, err
	}
	if one != nil {
		inputs = append(inputs, *one)
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%w: --prompts: %w", verify.ErrBadInput, err)
		}
		more, err := verify.ParsePromptsFile(data)
		if err != nil {
			return nil, fmt.Errorf("--prompts %s: %w", file, err)
		}
		for _, p := range more {
			p.Chat = p.Chat || (f.chat && p.Tokens == nil)
			inputs = append(inputs, p)
		}
	}
	if len(inputs) == 0 && len(defaults) > 0 && defaults[0] {
		for _, p := range verify.DefaultPrompts() {
			p.Chat = f.chat
			inputs = append(inputs, p)
		}
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("%w: no prompt: give --tokens, --prompt or --prompts FILE", verify.ErrBadInput)
	}
	out := make([][]ports.Token, 0, len(inputs))
	for _, in := range inputs {
		ids, err := verify.EncodePrompt(m, in)
		if err != nil {
			return nil, err
		}
		out = append(out, ids)
	}
	return out, nil
}

func fmtTokens(t []ports.Token) string {
	parts := make([]string, len(t))
	for i, v := range t {
		parts[i] = strconv.Itoa(int(v))
	}
	return strings.Join(parts, ",")
}
