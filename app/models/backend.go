// Package models loads what a generation runs on: LoadModels resolves a ModelConfig's target and drafter
// (local directories or the local hub cache), picks the backend (CPU or MLX, or MLX split across processes,
// whose worker ranks run RunWorker), and returns the Models: target, drafter, tokenizer, chat template and EOS
// ids. Serving (app/serve) and the harness (app/verify) both load through it; it knows neither.
package models

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/ports"
)

// Backends understood by ModelConfig.Backend.
const (
	BackendCPU  = "cpu"
	BackendMLX  = "mlx"
	BackendAuto = "auto"
	// BackendCPUFast is reported as Models.Backend for the cpu backend with Kernels "fast", and names that
	// combination in higgs-verify parity's --a/--b.
	BackendCPUFast = "cpu-fast"
)

// NoDraftName as ModelConfig.Draft turns speculation off.
const NoDraftName = "none"

// Bundled model directories. The default (used when ModelConfig.Model is empty) is gocoder, a 47.5M Go-code
// target stored 4-bit as mlx-lm would, with its DFlash drafter; the 7.9M demo is kept for what must be fast
// (tests name it explicitly). Both are resolved relative to the working directory first, then to the
// directory holding the running executable and its parent (so `go run ./cmd/...` from the repository root and
// `bin/higgsd` both find them).
const (
	DefaultTargetDir  = "models/gocoder/target"
	DefaultDrafterDir = "models/gocoder/drafter"
	DemoTargetDir     = "models/demo/target"
	DemoDrafterDir    = "models/demo/drafter"
)

// ErrMLXUnavailable is wrapped by LoadModels when the MLX backend is requested but cannot run here (libmlxc
// not found or not matching; the reason follows, and the chain wraps errors.ErrUnsupported through it).
var ErrMLXUnavailable = errors.New("MLX backend not available")

// ModelConfig names the model and drafter to load and the backend to run them on.
type ModelConfig struct {
	// Model is a target directory or a Hugging Face hub id found in the local hub cache; "" means the bundled
	// default model DefaultTargetDir.
	Model string
	// Draft is a DFlash drafter directory or hub id. "" with Model "" means the bundled default drafter
	// DefaultDrafterDir; "" with a named Model means no drafter; NoDraftName ("none") means no drafter;
	// AutoDraftName ("auto") the target's published drafter (hfmodel.KnownDrafters).
	Draft string
	// Pull lets loading download a hub model (Model, Draft or the drafter "auto" finds) missing from the hub
	// cache, through adapters/hub; without it nothing is ever downloaded.
	Pull bool
	// NoDraft turns speculation off whatever Draft says.
	NoDraft bool
	// Backend is "cpu", "mlx" or "auto" ("" means "cpu"). "mlx" is an error wrapping ErrMLXUnavailable when
	// libmlxc cannot be loaded; "auto" picks MLX on Apple silicon when it can run, else "cpu" with a log line
	// saying why.
	Backend string
	// Threads is the CPU worker count; 0 means GOMAXPROCS.
	Threads int
	// Kernels is the CPU backend's kernel mode: "exact" ("" too; the bit-exact reference), "fast"
	// (kernel.ModeFast: quantized products of every width with int8-quantized inputs, not bit-identical to
	// exact) or "auto" (fast where the CPU runs the fast kernels in assembly, AVX2 or better; exact elsewhere,
	// where the fast kernels' portable form would be slower than the exact mode's assembly). Only the cpu
	// backend has modes ("auto" is allowed with any backend).
	Kernels string
	// KVBits is the attention KV cache's format: 0 the backend's full precision (float32 on the cpu backend,
	// 32 says the same there), or 8 (int8 codes with a float32 scale per position and KV head: about a quarter
	// of the float32 cache's memory, not bit-identical to it; greedy speculative output still equals greedy
	// plain output within the mode), on the cpu and the mlx backend (not distributed). The drafter's context
	// caches stay full precision.
	KVBits int
	// Distributed loads rank 0's stage of the model split across processes by MLX distributed (needs
	// Backend "mlx"; the other ranks run RunWorker). RankTimeout bounds how long a lost rank goes unnoticed
	// (0: DefaultRankTimeout).
	Distributed bool
	RankTimeout time.Duration
}

// MaxThreads bounds ModelConfig.Threads: each worker is a goroutine with its own scratch buffers, and more
// workers than this is a typo, not a machine.
const MaxThreads = 1024

// Kernel modes understood by ModelConfig.Kernels.
const (
	KernelsExact = "exact"
	KernelsFast  = "fast"
	KernelsAuto  = "auto"
)

// Validate reports every problem with the configuration at once.
func (c ModelConfig) Validate() error {
	var errs []error
	switch c.Backend {
	case "", BackendCPU, BackendMLX, BackendAuto:
	default:
		errs = append(errs, fmt.Errorf("unknown backend %q (want cpu, mlx or auto)", c.Backend))
	}
	if c.Threads < 0 || c.Threads > MaxThreads {
		errs = append(errs, fmt.Errorf("threads %d must be in [0, %d]", c.Threads, MaxThreads))
	}
	switch c.Kernels {
	case "", KernelsExact, KernelsAuto:
	case KernelsFast:
		if c.Backend == BackendMLX {
			errs = append(errs, errors.New("kernels fast needs the cpu backend (mlx has no kernel modes)"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown kernels %q (want exact, fast or auto)", c.Kernels))
	}
	switch c.KVBits {
	case 0, 8:
	case 32:
		if c.Backend == BackendMLX {
			errs = append(errs, errors.New("kv bits 32 needs the cpu backend (mlx keeps the KV in the model's compute dtype: leave kv bits 0)"))
		}
	default:
		errs = append(errs, fmt.Errorf("kv bits %d: want 0 (full precision), 32 (cpu) or 8", c.KVBits))
	}
	if c.KVBits == 8 && c.Distributed {
		errs = append(errs, errors.New("kv bits 8 is not available with --distributed (the workers keep full-precision caches)"))
	}
	if c.RankTimeout < 0 {
		errs = append(errs, fmt.Errorf("rank timeout %v must be ≥ 0 (0: %v)", c.RankTimeout, DefaultRankTimeout))
	}
	if c.Distributed && c.Backend != BackendMLX {
		errs = append(errs, fmt.Errorf("--distributed needs --backend mlx (not %q)", c.Backend))
	}
	if strings.TrimSpace(c.Model) != c.Model {
		errs = append(errs, fmt.Errorf("model %q has surrounding spaces", c.Model))
	}
	return errors.Join(errs...)
}

// drafterName reports whether a drafter should be loaded and which name to resolve.
func (c ModelConfig) drafterName() (string, bool) {
	if c.NoDraft || c.Draft == NoDraftName {
		return "", false
	}
	if c.Draft != "" {
		return c.Draft, true
	}
	if c.Model == "" {
		return DefaultDrafterDir, true
	}
	return "", false
}

// Models is a loaded target with its optional drafter, tokenizer and chat template.
type Models struct {
	Target ports.Target
	// Drafter is nil when speculation is off; DrafterInfo then too. DrafterInfo describes the drafter's config
	// (generation, dialect, optional features).
	Drafter     ports.Drafter
	DrafterInfo *hfmodel.DrafterInfo
	// Tokenizer is nil when the model directory has no tokenizer.json (token-id-only use).
	Tokenizer ports.Tokenizer
	// Template is nil when the model has no chat template.
	Template ports.ChatTemplate
	// EOS are the stop ids from generation_config.json, else config.json.
	EOS []ports.Token
	// Name is the served model id (the directory's base name or the hub id).
	Name string
	// TargetDir is the target's model directory (bench --kernel-costs reads its tensor sizes).
	TargetDir string
	// DrafterDir is the drafter's directory ("" without one).
	DrafterDir string
	// MaxNewTokens is generation_config.json's max_new_tokens (0: it sets none).
	MaxNewTokens int
	// Backend is the backend actually used ("cpu" after an "auto" fallback; BackendCPUFast for the cpu
	// backend with Kernels "fast").
	Backend string
	// KVBits is the target's attention KV format: 32 or 8 on the cpu backend, 0 (the model's compute dtype)
	// or 8 on mlx. It is part of the model's identity for anything that keeps its states (a prefix state of one
	// format cannot be imported into the other).
	KVBits int
	// DeviceMemory reads the accelerator's allocator (MLX's active, peak and cache bytes, for the whole
	// process); nil on the CPU backend, whose memory is the process's own.
	DeviceMemory func() (ports.DeviceMemory, error)
	// Close releases the models' memory (memory-mapped weights). It is safe to call more than once.
	Close func() error
}

// ProvideModels is the wire provider of LoadModels: the returned cleanup closes the models.
func ProvideModels(ctx context.Context, cfg ModelConfig, log zerolog.Logger) (*Models, func(), error) {
	m, err := LoadModels(ctx, cfg, log, nil)
	if err != nil {
		return nil, nil, err
	}
	return m, func() { _ = m.Close() }, nil
}

// WeightBytes is the memory the loaded weights hold, measured as the size of the checkpoint files in the
// target's and the drafter's directories (*.safetensors, *.gguf): the backends map or copy them whole. 0 when
// neither directory can be read.
func (m *Models) WeightBytes() int64 {
	var n int64
	for _, dir := range []string{m.TargetDir, m.DrafterDir} {
		if dir != "" {
			n += checkpointBytes(dir)
		}
	}
	return n
}

// checkpointBytes sums the sizes of dir's checkpoint files (following links, as the hub cache's snapshots are).
func checkpointBytes(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".safetensors") && !strings.HasSuffix(name, ".gguf") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}
