package mlx

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.Target = (*Target)(nil)

// ErrUnavailable is wrapped by every MLX entry point when libmlxc cannot be loaded or does not match; it
// wraps errors.ErrUnsupported.
var ErrUnavailable = mlxc.ErrUnavailable

// Available loads libmlxc (once per process) and reports why the backend cannot run, or nil.
func Available() error {
	_, err := mlxc.Open()
	return err
}

// LoadOptions tunes Load.
type LoadOptions struct {
	// ContextLength caps the session length below max_position_embeddings (0: the config's value).
	ContextLength int
	// BFloat16 (experimental) keeps float weights and activations in bfloat16: half the memory and
	// bandwidth; the GDN recurrence and its state, float MoE experts (MLX's CPU gather_mm is float32-only)
	// and the returned logits stay float32. Results differ from the float32 CPU reference by bf16 rounding,
	// so parity checks use float32 (the default).
	BFloat16 bool
	// KVBits is the attention KV cache's format: 0 (the compute dtype) or 8 (int8 codes with a float32 scale
	// per position and KV head, ops' kv8.go; not bit-identical to the full cache; greedy speculative output
	// still equals greedy plain output within the mode). A distributed target refuses 8 (its workers load
	// without it). The drafter's context caches keep the compute dtype.
	KVBits int
	// Logger receives load-time information; the zero value logs nothing.
	Logger zerolog.Logger
}

// ErrKVBits is wrapped by Load for a KV format the backend does not have.
var ErrKVBits = errors.New("kv bits must be 0 (the compute dtype) or 8")

// KVBits is the sessions' attention cache format: 0 (the compute dtype) or 8 (int8 codes and scales).
func (t *Target) KVBits() int { return t.kvBits }

// Target is a target model whose weights live in MLX arrays. It is safe for concurrent use (every MLX call
// runs on the backend's one MLX thread); sessions are not.
type Target struct {
	rt *mlxc.Runtime
	m  *model.Target[*ops.Weight]
	// arena owns every weight array; freed on Close. dt is the compute dtype of activations and float
	// weights.
	arena *graph.Graph
	dt    mlxc.Dtype
	// kvBits is LoadOptions.KVBits: 0 or 8.
	kvBits int
	cfg    *hfmodel.TextConfig
	info   ports.ModelInfo
	// closed is read and written only on the MLX thread, so a Close racing a session's Forward turns into
	// an error instead of a use of freed arrays.
	closed bool
	// ring is the target's place in a pipeline when it holds one stage (nil: the whole model is here);
	// weightBytes is the stored size of the weights this process loaded.
	ring        *ring.Peer
	weightBytes int64
}

// errTargetClosed is returned by calls that need the weights after Target.Close.
var errTargetClosed = errors.New("mlx: target is closed")

// Load reads a model directory (config.json, generation_config.json, safetensors) with the same parsers as the
// CPU backend and uploads every weight into MLX (by copy; the checkpoint mapping is closed before returning).
// Missing and unexpected tensors are errors naming them.
func Load(ctx context.Context, dir string, opts LoadOptions) (*Target, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rt, err := mlxc.Open()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return load(rt, dir, opts, nil)
}

// load reads dir's target, or pipe's stage of it.
func load(rt *mlxc.Runtime, dir string, opts LoadOptions, pipe *ring.Peer) (*Target, error) {
	switch {
	case opts.KVBits != 0 && opts.KVBits != 8:
		return nil, fmt.Errorf("mlx: kv bits %d: %w", opts.KVBits, ErrKVBits)
	case opts.KVBits == 8 && pipe != nil:
		return nil, fmt.Errorf("mlx: kv bits 8 with a distributed target: %w", errors.ErrUnsupported)
	}
	f, err := hfmodel.OpenTarget(dir, opts.ContextLength)
	if err != nil {
		return nil, err
	}
	cfg, a := f.Config, f.Arch
	stage := model.Stage{Lo: 0, Hi: a.Layers}
	var weightBytes int64
	if layer, first, last, err := stageBytes(dir, a.Layers); err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	} else if pipe != nil {
		if pipe.Stages, err = model.SplitStages(layer, first, last, pipe.Size); err != nil {
			return nil, fmt.Errorf("load %s: %w", dir, err)
		}
		stage = pipe.Stage()
		for i := stage.Lo; i < stage.Hi; i++ {
			weightBytes += layer[i]
		}
		if stage.Lo == 0 {
			weightBytes += first
		}
		if stage.Hi == a.Layers || stage.Head {
			weightBytes += last
		}
	} else {
		weightBytes = first + last
		for _, b := range layer {
			weightBytes += b
		}
	}
	dt := mlxc.Float32
	if opts.BFloat16 {
		dt = mlxc.BFloat16
	}
	var m *model.Target[*ops.Weight]
	arena, err := ops.Upload(rt, f.Store, "mlx load", cfg.Quantization, dt, func(l *ops.Loader) (err error) {
		if m, err = model.LoadStage(l, l.Checkpoint, cfg, &a, stage); err != nil {
			return err
		}
		if m.Embed != nil && !m.Embed.Quantized() {
			// Rows are looked up in the [V,H] layout: transpose the stored [H,V] view back.
			m.Embed.ByRow = l.G.Transpose(m.Embed.WT, 1, 0)
		}
		return l.G.Err
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	t := &Target{rt: rt, m: m, arena: arena, dt: dt, kvBits: opts.KVBits, cfg: cfg, info: f.Info(dir), ring: pipe, weightBytes: weightBytes}
	opts.Logger.Debug().Str("dir", dir).Str("model_type", cfg.ModelType).Int("layers", a.Layers).
		Int("first_layer", stage.Lo).Int("end_layer", stage.Hi).Int64("weight_bytes", weightBytes).Msg("mlx target loaded")
	return t, nil
}

// Info describes the model (see ports.Target).
func (t *Target) Info() ports.ModelInfo { return t.info }

// Config returns the parsed config (shared; do not modify).
func (t *Target) Config() *hfmodel.TextConfig { return t.cfg }

// NewSession opens an empty session tapping tapLayers (each in [0, layers)).
func (t *Target) NewSession(ctx context.Context, tapLayers []int) (ports.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := t.newSession(tapLayers)
	if err != nil {
		return nil, fmt.Errorf("mlx new session: %w", err)
	}
	return s, nil
}

// Close frees the weights. Sessions of the target must be closed first.
func (t *Target) Close() error {
	return t.rt.Do(func() error {
		if !t.closed {
			t.closed = true
			t.arena.Release()
		}
		return nil
	})
}
