package models

import (
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/adapters/chattemplate"
	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/ports"
)

// BackendChoice is the backend LoadModels would run a ModelConfig on.
type BackendChoice struct {
	// Backend is BackendCPU or BackendMLX.
	Backend string
	// Kernels is the CPU backend's kernel mode (KernelsExact or KernelsFast; "" on MLX), and FastForm the
	// form the fast kernels take on this CPU (kernel.FastForm: "avx512", "avx2", "portable").
	Kernels  string
	FastForm string
	// Reason says why "auto" fell back to the CPU ("" otherwise).
	Reason string
}

// ChooseBackend is the backend LoadModels would pick for cfg, without loading a model: libmlxc is opened for
// "mlx" (and "auto" on Apple silicon), and an error says why it cannot run.
func ChooseBackend(cfg ModelConfig) (BackendChoice, error) {
	backend, reason, err := pickBackend(cfg.Backend)
	if err != nil {
		return BackendChoice{}, err
	}
	c := BackendChoice{Backend: backend, Reason: reason}
	if backend == BackendMLX {
		if cfg.Kernels == KernelsFast {
			return c, fmt.Errorf("kernels fast needs the cpu backend (backend %q picked mlx)", cfg.Backend)
		}
		return c, nil
	}
	mode, form := kernelMode(cfg.Kernels)
	c.Kernels, c.FastForm = KernelsExact, form
	if mode == kernel.ModeFast {
		c.Kernels = KernelsFast
	}
	return c, nil
}

// Inspection is what LoadModels would load for a ModelConfig, read from the files without loading a weight
// (higgsd doctor): each part's error is the one LoadModels would stop at, from the same parsers and checks.
type Inspection struct {
	// Name is the served name, TargetDir the target's directory; TargetErr stops everything after it.
	Name      string
	TargetDir string
	TargetErr error
	// Info describes the target as its backend would (vocabulary, hidden size, layers, context length);
	// ModelType is config.json's model_type; WeightBytes the target's safetensors files' size.
	Info        ports.ModelInfo
	ModelType   string
	WeightBytes int64
	// TokenizerErr is nil when tokenizer.json loads; NoTokenizer is set when there is none (higgsd cannot
	// serve text then). TemplateErr is chattemplate.ErrNoTemplate without a chat template.
	NoTokenizer  bool
	TokenizerErr error
	TemplateErr  error
	// DrafterDir is "" without a drafter. DrafterErr is the drafter's config, its compatibility with the
	// target (hidden size, vocabulary, tap layers, mask token) or its weights' problem.
	DrafterDir string
	DrafterErr error
	// Drafter describes a compatible drafter (generation, block size, tap layers); DrafterBytes is its
	// weights' size.
	Drafter      *hfmodel.DrafterInfo
	DrafterBytes int64
}

// Inspect resolves cfg's target and drafter as LoadModels does and checks their files: the target's config
// and weights' headers, the tokenizer and chat template, and the drafter's config against the target with
// hfmodel's checks (ResolveDrafter, the same the backends run) and its weights' headers. The weights are
// memory-mapped to read their headers, never read.
func Inspect(cfg ModelConfig) Inspection {
	var in Inspection
	dir, name, err := resolveTarget(cfg.Model)
	if err != nil {
		in.TargetErr = err
		return in
	}
	in.Name, in.TargetDir = name, dir
	f, err := hfmodel.OpenTarget(dir, 0)
	if err != nil {
		in.TargetErr = err
		return in
	}
	in.Info, in.ModelType, in.WeightBytes = f.Info(dir), f.Config.ModelType, f.Store.Bytes()
	_ = f.Store.Close() // read-only mapping: nothing to flush
	if hasFile(dir, "tokenizer.json") || hasFile(dir, "tokenizer.json.gz") {
		if _, err := tokenizer.Load(dir); err != nil {
			in.TokenizerErr = err
		} else if _, err := chattemplate.Load(dir); err != nil {
			in.TemplateErr = err
		}
	} else {
		in.NoTokenizer = true
		in.TokenizerErr = fmt.Errorf("%s has no tokenizer.json", dir)
	}
	n, ok := cfg.drafterName()
	if !ok {
		return in
	}
	if in.DrafterDir, err = resolveDrafter(n, cfg.Model == "" && cfg.Draft == ""); err != nil {
		in.DrafterErr = err
		return in
	}
	a, dcfg, err := hfmodel.ResolveDrafter(in.DrafterDir, in.Info, nil, false)
	if err != nil {
		in.DrafterErr = err
		return in
	}
	st, err := safetensors.OpenDir(in.DrafterDir)
	if err != nil {
		in.DrafterErr = fmt.Errorf("drafter %s: %w", in.DrafterDir, err)
		return in
	}
	in.DrafterBytes = st.Bytes()
	_ = st.Close()
	info := dcfg.Info(a.TapLayers)
	in.Drafter = &info
	return in
}

// IsNoTemplate reports whether err says the model has no chat template (chat requests are then refused).
func IsNoTemplate(err error) bool { return errors.Is(err, chattemplate.ErrNoTemplate) }
