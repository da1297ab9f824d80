package doctor

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"runtime"

	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/generation"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/serve"
)

// Env is what the checks read of the process and the machine; tests replace parts of it.
type Env struct {
	// Getenv reads HIGGS_* variables, as higgsd serve does.
	Getenv func(string) string
	// MachineMemory is the memory this process may use (0: unknown); nil means serve.MachineMemory.
	MachineMemory func() int64
	// Listen opens the listen address (nil: net.Listen on tcp).
	Listen func(addr string) (net.Listener, error)
}

// Run checks the setup that args (serve's flags), the environment and the configuration file describe.
// flag.ErrHelp is returned (wrapped) for -h; the checks are returned otherwise, a configuration that does not
// parse being one failed check.
func Run(args []string, env Env, usage io.Writer) ([]Check, error) {
	if env.MachineMemory == nil {
		env.MachineMemory = serve.MachineMemory
	}
	if env.Listen == nil {
		env.Listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	if !asksHelp(args) {
		usage = io.Discard // a bad flag is reported as the config check, not with the whole usage
	}
	cfg, err := app.LoadConfig(args, env.Getenv, usage)
	if errors.Is(err, flag.ErrHelp) {
		return nil, err
	}
	if err != nil {
		return []Check{{Name: "config", Status: Fail, Detail: err.Error(),
			Fix: "correct the flags, HIGGS_* variables or configuration file named (higgsd -h lists the settings); the other checks need a valid configuration"}}, nil
	}
	checks := []Check{configCheck(cfg), listenCheck(cfg, env)}
	if len(cfg.Models) == 0 {
		return append(checks, modelChecks(cfg, env)...), nil
	}
	// Several models: each is checked as the one model it would be, its lines named after it.
	for _, spec := range cfg.Models {
		for _, c := range modelChecks(cfg.One(spec), env) {
			c.Detail = spec.Name + ": " + c.Detail
			checks = append(checks, c)
		}
	}
	return checks, nil
}

// modelChecks checks the one model cfg serves: its backend, checkpoint, tokenizer, drafter, block size and
// memory.
func modelChecks(cfg app.Config, env Env) []Check {
	checks := []Check{backendCheck(cfg)}
	if c, ok := prefixDirCheck(cfg); ok {
		checks = append(checks, c)
	}
	in := models.Inspect(cfg.ModelConfig())
	checks = append(checks, modelCheck(in))
	if in.TargetErr != nil {
		return checks
	}
	checks = append(checks, tokenizerCheck(in), drafterCheck(cfg, in), blockSizeCheck(cfg, in))
	return append(checks, memoryChecks(cfg, in, env.MachineMemory())...)
}

func configCheck(cfg app.Config) Check {
	c := Check{Name: "config", Status: OK, Detail: "valid"}
	if cfg.ConfigFile != "" {
		c.Detail += " (file " + cfg.ConfigFile + ")"
	}
	if cfg.ExposedWithoutKey() {
		c.Status, c.Detail = Warn, c.Detail+"; --host "+cfg.Host+" listens beyond this machine without a key: anyone who can reach the port can use the model"
		c.Fix = "set --api-key (or --api-key-file), or listen on 127.0.0.1"
	}
	return c
}

// listenCheck opens and closes the listen address, as serve would open it.
func listenCheck(cfg app.Config, env Env) Check {
	c := Check{Name: "listen"}
	if cfg.Port == 0 {
		c.Status, c.Detail = OK, fmt.Sprintf("%s: any free port", cfg.Host)
		return c
	}
	ln, err := env.Listen(cfg.Addr())
	if err != nil {
		c.Status, c.Detail = Fail, fmt.Sprintf("cannot listen on %s: %v", cfg.Addr(), err)
		c.Fix = "stop what holds the port (a higgsd already serving there answers `higgsd shellenv --addr http://" + cfg.Addr() + "`), or pass --port N (0: any free port)"
		return c
	}
	_ = ln.Close()
	c.Status, c.Detail = OK, cfg.Addr()+" is free"
	return c
}

func backendCheck(cfg app.Config) Check {
	c := Check{Name: "backend"}
	b, err := models.ChooseBackend(cfg.ModelConfig())
	if err != nil {
		c.Status, c.Detail = Fail, err.Error()
		c.Fix = "build mlx-c and set HIGGS_MLX_LIB to libmlxc's path (docs/mlx.md), or serve with --backend cpu"
		if errors.Is(err, models.ErrMLXUnavailable) {
			return c
		}
		c.Fix = "--kernels fast is the CPU backend's: pass --kernels auto or exact with MLX"
		return c
	}
	c.Status = OK
	if b.Backend == models.BackendMLX {
		c.Detail = "mlx: libmlxc loads"
		return c
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	features := models.DetectCPUFeatures()
	c.Detail = fmt.Sprintf("cpu, kernels %s (fast kernels' form here: %s), %d threads; CPU features: %s",
		b.Kernels, b.FastForm, threads, features)
	if b.Reason != "" {
		c.Detail += "; auto picked cpu: " + b.Reason
	}
	c.Detail += amxNote(features, b.Kernels, b.FastForm)
	if b.Kernels == models.KernelsFast && b.FastForm == "portable" {
		c.Status = Warn
		c.Fix = "this CPU has no AVX2: the fast kernels run in portable Go, slower than --kernels exact"
	}
	return c
}

// amxNote says why the fast kernels run no AMX tiles on a CPU that has them (their form is then the plain
// "avx512vnni"): the process was not granted the tile state, which higgs asks Linux for (arch_prctl) and no
// other OS. It is empty where the tiles run, the CPU lacks them, or the exact kernels serve.
func amxNote(f models.CPUFeatures, kernels, form string) string {
	if kernels != models.KernelsFast || !f.AMXTile || !f.AMXInt8 || form != "avx512vnni" {
		return ""
	}
	return "; AMX is present but unused: this process was not granted the tile state (higgs asks Linux for it, " +
		"no other OS), so the products it would run there (prefill-sized ones, large 16-row ones) run on VNNI"
}

func modelCheck(in models.Inspection) Check {
	c := Check{Name: "model"}
	if in.TargetErr != nil {
		c.Status, c.Detail = Fail, in.TargetErr.Error()
		c.Fix = "pass --model with a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json) or the id of one in the local hub cache"
		return c
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("%s at %s: %s, %d layers, hidden %d, vocabulary %d, context %d, weights %s",
		in.Name, in.TargetDir, in.ModelType, len(in.Info.LayerKinds), in.Info.HiddenSize, in.Info.VocabSize,
		in.Info.ContextLength, human(in.WeightBytes))
	return c
}

func tokenizerCheck(in models.Inspection) Check {
	c := Check{Name: "tokenizer"}
	switch {
	case in.TokenizerErr != nil:
		c.Status, c.Detail = Fail, in.TokenizerErr.Error()
		c.Fix = "higgsd serves text and needs the model's tokenizer.json beside config.json"
	case in.TemplateErr != nil && models.IsNoTemplate(in.TemplateErr):
		c.Status, c.Detail = Warn, "tokenizer.json loads; the model has no chat template, so chat requests are refused (completions work)"
		c.Fix = "add the model's chat_template (tokenizer_config.json or chat_template.jinja) to serve chat"
	case in.TemplateErr != nil:
		c.Status, c.Detail = Fail, in.TemplateErr.Error()
		c.Fix = "correct or remove the model's chat template"
	default:
		c.Status, c.Detail = OK, "tokenizer.json and the chat template load"
	}
	return c
}

func drafterCheck(cfg app.Config, in models.Inspection) Check {
	c := Check{Name: "drafter"}
	switch {
	case in.DrafterErr != nil:
		c.Status, c.Detail = Fail, in.DrafterErr.Error()
		c.Fix = "use the DFlash drafter trained for this target (docs/drafters.md), or serve without one (--no-draft)"
	case in.DrafterDir == "":
		c.Status, c.Detail = OK, "none: plain decoding, no speculation"
		if cfg.Model != "" && cfg.Draft == "" && !cfg.NoDraft {
			c.Detail += " (a named --model gets no drafter unless --draft, or draft= in its spec, names one)"
		}
	default:
		d := in.Drafter
		c.Status = OK
		c.Detail = fmt.Sprintf("%s at %s fits the target: block size %d, tap layers %v, weights %s",
			d.Generation, in.DrafterDir, d.BlockSize, d.TapLayers, human(in.DrafterBytes))
	}
	return c
}

// blockSizeCheck asks generation's own rule whether the configured block size fits: with a drafter any size up to
// the context length (a drafter drafts any size, as its authors run it; its own size is the default).
func blockSizeCheck(cfg app.Config, in models.Inspection) Check {
	c := Check{Name: "block size"}
	bs := cfg.ServeConfig().BlockSize
	maxBlock, drafter := 1, in.Drafter != nil
	if drafter {
		maxBlock = generation.CappedContextLength(in.Info.ContextLength, cfg.ServeConfig().ContextLength)
	}
	if err := generation.BlockSizeProblem(bs, maxBlock, drafter); err != nil {
		c.Status, c.Detail = Fail, "--"+err.Error()
		c.Fix = "pass a --block-size the context holds (0: the drafter's own)"
		if !drafter {
			c.Fix = "pass --block-size 1 (or 0), or give the model a drafter"
		}
		return c
	}
	c.Status = OK
	switch {
	case bs == 0 && drafter:
		c.Detail = fmt.Sprintf("the drafter's, %d", in.Drafter.BlockSize)
	case bs == 0:
		c.Detail = "1 (no drafter)"
	default:
		c.Detail = fmt.Sprintf("%d", bs)
	}
	maxBlock = max(bs, 1)
	if bs == 0 && drafter {
		maxBlock = in.Drafter.BlockSize
	}
	if cfg.Adaptive && maxBlock > 1 {
		c.Detail += "; the adaptive policy picks each round's size up to it"
	}
	return c
}

// asksHelp reports whether args ask for the usage (-h, --help).
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "--h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}
