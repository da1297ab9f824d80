package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"
)

// LoadModels resolves cfg's model and drafter names, picks the backend and loads everything before any
// generation. progress, when non-nil, is called with bytes done and total while weights are read.
func LoadModels(ctx context.Context, cfg ModelConfig, log zerolog.Logger, progress func(done, total int64)) (*Models, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	backend, err := chooseBackend(cfg.Backend, log)
	if err != nil {
		return nil, err
	}
	targetDir, name, err := resolveTarget(cfg.Model)
	if err != nil {
		return nil, err
	}
	draftDir := ""
	if n, ok := cfg.drafterName(); ok {
		if draftDir, err = resolveDrafter(n, cfg.Model == "" && cfg.Draft == ""); err != nil {
			return nil, err
		}
	}
	_ = ctx
	_ = progress
	return nil, fmt.Errorf("load %s (drafter %q) on %s: the CPU backend is not wired yet", targetDir, draftDir, backend+"/"+name)
}

// chooseBackend maps the configured backend to one built into this binary.
func chooseBackend(b string, log zerolog.Logger) (string, error) {
	switch b {
	case "", BackendCPU:
		return BackendCPU, nil
	case BackendMLX:
		return "", fmt.Errorf("backend %q: %w", b, ErrMLXUnavailable)
	case BackendAuto:
		log.Info().Str("backend", BackendCPU).Str("reason", ErrMLXUnavailable.Error()).Msg("auto backend falls back to cpu")
		return BackendCPU, nil
	}
	return "", fmt.Errorf("unknown backend %q (want cpu, mlx or auto)", b)
}

// resolveTarget returns the target directory and the served name.
func resolveTarget(model string) (dir, name string, err error) {
	if model == "" {
		dir, err := findDemo(DemoTargetDir)
		if err != nil {
			return "", "", err
		}
		return dir, "demo", nil
	}
	dir, err = resolveDir(model)
	if err != nil {
		return "", "", fmt.Errorf("model %q: %w", model, err)
	}
	if fi, serr := os.Stat(model); serr == nil && fi.IsDir() {
		return dir, filepath.Base(filepath.Clean(model)), nil
	}
	return dir, model, nil
}

func resolveDrafter(name string, demo bool) (string, error) {
	if demo {
		return findDemo(name)
	}
	dir, err := resolveDir(name)
	if err != nil {
		return "", fmt.Errorf("drafter %q: %w", name, err)
	}
	return dir, nil
}

// resolveDir accepts a local directory holding config.json.
func resolveDir(name string) (string, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return "", fmt.Errorf("not a local directory: %w", err)
	}
	if !fi.IsDir() {
		return "", errors.New("not a directory")
	}
	return name, nil
}

// findDemo looks for a bundled demo directory relative to the working directory, then next to the executable.
func findDemo(rel string) (string, error) {
	var tried []string
	cands := []string{rel}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		cands = append(cands, filepath.Join(d, rel), filepath.Join(d, "..", rel))
	}
	for _, c := range cands {
		tried = append(tried, c)
		if fi, err := os.Stat(filepath.Join(c, "config.json")); err == nil && !fi.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("no model named and the bundled demo model %s is absent (looked in %v); pass --model DIR", rel, tried)
}
