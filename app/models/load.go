package models

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/chattemplate"
	"github.com/higgs-go/higgs/adapters/cpu"
	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/ports"
)

// LoadModels resolves cfg's model and drafter names (local directories or Hugging Face ids in the local hub
// cache; nothing is downloaded unless cfg.Pull asks; "auto" finds the target's known drafter), picks the backend and loads the target, the drafter (checked against the
// target), the tokenizer and chat template when the model directory has them, and the EOS ids — everything
// before any generation. progress, when non-nil, is called with (done, total) loading steps.
// It is one function because its steps are one ordered sequence whose early results (the resolved backend,
// the target) every later step reads; each step is a few lines that call into the adapters.
func LoadModels(ctx context.Context, cfg ModelConfig, log zerolog.Logger, progress func(done, total int64)) (*Models, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	backend, err := chooseBackend(cfg.Backend, log)
	if err != nil {
		return nil, err
	}
	if backend == BackendMLX && cfg.Kernels == KernelsFast {
		return nil, fmt.Errorf("kernels fast needs the cpu backend (backend %q picked mlx)", cfg.Backend)
	}
	if backend == BackendMLX && cfg.KVBits == 32 {
		return nil, fmt.Errorf("kv bits 32 needs the cpu backend (backend %q picked mlx, which keeps the KV in the model's compute dtype: leave kv bits 0)", cfg.Backend)
	}
	targetDir, name, err := findTarget(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	draftDir := ""
	if n, ok := cfg.drafterName(); ok {
		if draftDir, err = findDrafter(ctx, cfg, n, log); err != nil {
			return nil, err
		}
	}
	const steps = 3
	progress(0, steps)
	kvBits := 0
	var (
		target      ports.Target
		closeTarget func() error
		loadDrafter func(dir string) (ports.Drafter, func() error, error)
		deviceMem   func() (ports.DeviceMemory, error)
	)
	switch backend {
	case BackendMLX:
		var t *mlx.Target
		if cfg.Distributed {
			t, target, closeTarget, err = loadDistributed(ctx, targetDir, draftDir != "", cfg.RankTimeout, log)
		} else if t, err = mlx.Load(ctx, targetDir, mlx.LoadOptions{KVBits: cfg.KVBits, Logger: log}); err == nil {
			target, closeTarget = t, t.Close
		}
		if err != nil {
			return nil, err
		}
		kvBits = t.KVBits()
		deviceMem = t.DeviceMemory
		loadDrafter = func(dir string) (ports.Drafter, func() error, error) {
			d, err := mlx.LoadDrafter(ctx, dir, t, mlx.DrafterOptions{})
			if err != nil {
				return nil, nil, err
			}
			return d, d.Close, nil
		}
	default:
		mode := cpuKernels(cfg.Kernels, log)
		t, err := cpu.Load(ctx, targetDir, cpu.LoadOptions{Threads: cfg.Threads, Kernels: mode, KVBits: cfg.KVBits, Logger: log})
		if err != nil {
			return nil, err
		}
		kvBits = t.KVBits()
		target, closeTarget = t, t.Close
		loadDrafter = func(dir string) (ports.Drafter, func() error, error) {
			d, err := cpu.LoadDrafter(ctx, dir, t, cpu.DrafterOptions{})
			if err != nil {
				return nil, nil, err
			}
			return d, d.Close, nil
		}
	}
	progress(1, steps)
	if backend == BackendCPU && cpuKernels(cfg.Kernels, zerolog.Nop()) == kernel.ModeFast {
		backend = BackendCPUFast
	}
	if err := probeFinite(ctx, target); err != nil {
		return nil, errors.Join(fmt.Errorf("load %s: %w", targetDir, err), closeTarget())
	}
	m := &Models{Target: target, Name: name, Backend: backend, EOS: target.Info().EOSTokens, TargetDir: targetDir,
		DeviceMemory: deviceMem, KVBits: kvBits}
	if gc, err := hfmodel.LoadGenerationConfig(targetDir); err == nil && gc.MaxNewTokens != nil {
		// The backend has read the same file; an error here was reported there.
		m.MaxNewTokens = *gc.MaxNewTokens
	}
	closers := []func() error{closeTarget}
	m.Close = func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		closers = nil
		return errors.Join(errs...)
	}
	fail := func(err error) (*Models, error) {
		return nil, errors.Join(err, m.Close())
	}
	if draftDir != "" {
		d, closeDrafter, err := loadDrafter(draftDir)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, closeDrafter)
		m.Drafter, m.DrafterDir = d, draftDir
		// The backend has just parsed the same file, so this cannot fail unless it changed underneath.
		cfg, err := hfmodel.LoadDrafterConfig(draftDir)
		if err != nil {
			return fail(err)
		}
		info := cfg.Info(d.TapLayers())
		m.DrafterInfo = &info
		log.Info().Str("dir", draftDir).Str("generation", info.Generation).Int("block_size", d.BlockSize()).Ints("taps", d.TapLayers()).Msg("drafter loaded")
	}
	progress(2, steps)
	if hasFile(targetDir, "tokenizer.json") || hasFile(targetDir, "tokenizer.json.gz") {
		tok, err := tokenizer.Load(targetDir)
		if err != nil {
			return fail(err)
		}
		m.Tokenizer = tok
		tmpl, err := chattemplate.Load(targetDir)
		switch {
		case errors.Is(err, chattemplate.ErrNoTemplate):
		case err != nil:
			return fail(err)
		default:
			m.Template = tmpl
		}
	}
	progress(3, steps)
	log.Info().Str("model", name).Str("dir", targetDir).Str("backend", backend).Bool("drafter", m.Drafter != nil).
		Bool("tokenizer", m.Tokenizer != nil).Bool("chat_template", m.Template != nil).Msg("models loaded")
	return m, nil
}

func hasFile(dir, name string) bool {
	fi, err := os.Stat(filepath.Join(dir, name))
	return err == nil && !fi.IsDir()
}

// chooseBackend maps the configured backend to one that can run here (pickBackend), logging what "auto"
// picked and why.
func chooseBackend(b string, log zerolog.Logger) (string, error) {
	backend, reason, err := pickBackend(b)
	if err == nil && b == BackendAuto {
		if backend == BackendMLX {
			log.Info().Str("backend", BackendMLX).Msg("auto backend picks mlx")
		} else {
			log.Info().Str("backend", BackendCPU).Str("reason", reason).Msg("auto backend falls back to cpu")
		}
	}
	return backend, err
}

// pickBackend maps the configured backend to one that can run here. "mlx" needs libmlxc (HIGGS_MLX_LIB or
// the platform's library paths); "auto" picks MLX only on Apple silicon, where it is the accelerator, and
// otherwise the deterministic CPU backend, with the reason.
func pickBackend(b string) (backend, reason string, err error) {
	switch b {
	case "", BackendCPU:
		return BackendCPU, "", nil
	case BackendMLX:
		if err := mlxAvailable(); err != nil {
			// err names the reason (and wraps errors.ErrUnsupported); ErrMLXUnavailable marks it for callers.
			return "", "", fmt.Errorf("backend %q: %w: %w", b, ErrMLXUnavailable, err)
		}
		return BackendMLX, "", nil
	case BackendAuto:
		reason := "MLX is only preferred on Apple silicon"
		if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
			err := mlxAvailable()
			if err == nil {
				return BackendMLX, "", nil
			}
			reason = err.Error()
		}
		return BackendCPU, reason, nil
	}
	return "", "", fmt.Errorf("unknown backend %q (want cpu, mlx or auto)", b)
}

// cpuKernels is the CPU backend's kernel mode for ModelConfig.Kernels k (kernelMode); for "auto" it logs
// which mode it picked and why.
func cpuKernels(k string, log zerolog.Logger) kernel.Mode {
	mode, form := kernelMode(k)
	if k == KernelsAuto {
		if mode == kernel.ModeExact {
			log.Info().Str("kernels", "exact").Str("fast_form", form).
				Msg("kernels auto: exact, as this CPU has no AVX2 and the fast kernels would run in portable Go")
		} else {
			log.Info().Str("kernels", "fast").Str("fast_form", form).
				Msg("kernels auto: fast (int8-quantized inputs, not bit-identical to exact; --kernels exact for the reference)")
		}
	}
	return mode
}

// kernelMode is the CPU backend's kernel mode for k and the form the fast kernels take on this CPU
// (kernel.FastForm): "auto" is fast unless that form is the portable Go one.
func kernelMode(k string) (mode kernel.Mode, fastForm string) {
	form := kernel.FastForm()
	switch k {
	case KernelsFast:
		return kernel.ModeFast, form
	case KernelsAuto:
		if form == "portable" {
			return kernel.ModeExact, form
		}
		return kernel.ModeFast, form
	}
	return kernel.ModeExact, form
}

// mlxAvailable reports why the MLX backend cannot run here (nil when it can).
var mlxAvailable = mlx.Available

// resolveTarget returns the target directory and the served name: the bundled model's name ("gocoder") when
// none is named, the hub id for a hub model, and for a directory its base name, or its parent's where the
// directory is a bundled layout's "target" (models/demo/target is served as "demo").
func resolveTarget(model string) (dir, name string, err error) {
	if model == "" {
		dir, err := findBundled(DefaultTargetDir)
		if err != nil {
			return "", "", err
		}
		return dir, servedName(DefaultTargetDir), nil
	}
	dir, err = hfmodel.Resolve(model)
	if err != nil {
		return "", "", fmt.Errorf("model: %w", err)
	}
	if fi, serr := os.Stat(model); serr == nil && fi.IsDir() {
		return dir, servedName(model), nil
	}
	return dir, model, nil
}

// servedName is the model id of a model directory: its base name, or its parent's for a directory named
// "target" (the bundled layout NAME/target beside NAME/drafter).
func servedName(dir string) string {
	clean := filepath.Clean(dir)
	base := filepath.Base(clean)
	if base == "target" {
		if parent := filepath.Base(filepath.Dir(clean)); parent != "." && parent != string(filepath.Separator) {
			return parent
		}
	}
	return base
}

// resolveDrafter returns the drafter's directory: bundled names the bundled default's drafter, found as the
// target is.
func resolveDrafter(name string, bundled bool) (string, error) {
	if bundled {
		dir, err := findBundled(name)
		if err != nil {
			return "", fmt.Errorf("bundled drafter: %w", err)
		}
		return dir, nil
	}
	dir, err := hfmodel.Resolve(name)
	if err != nil {
		return "", fmt.Errorf("drafter: %w", err)
	}
	return dir, nil
}

// findBundled looks for a bundled model directory (holding config.json) relative to the working directory, then
// next to the executable and one level up (bin/ in the repository).
func findBundled(rel string) (string, error) {
	cands := []string{rel}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		cands = append(cands, filepath.Join(d, rel), filepath.Join(d, "..", rel))
	}
	for _, c := range cands {
		if fi, err := os.Stat(filepath.Join(c, "config.json")); err == nil && !fi.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("no model named and the bundled model %s is absent (looked in %v): %w; pass --model DIR",
		rel, cands, fs.ErrNotExist)
}
