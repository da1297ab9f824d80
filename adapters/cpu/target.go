// Package cpu is the deterministic CPU reference backend (Go, with AVX2 assembly kernels on amd64 and a
// portable fallback, see package kernel): it loads Qwen3, Qwen3-Next and Qwen3.5 targets
// (f32, bf16 or MLX affine-quantized safetensors) and runs them with sessions that support KV trimming,
// recurrent snapshots and bit-exact innovation-tape replay (docs/model-math.md#forward-pass, #rollback).
//
// Everything is computed in float32 with kernels whose per-element reduction order depends on no batch size
// and no worker count, so a verified block gives the same bits as token-by-token decoding and results do not
// change with GOMAXPROCS. The Gated DeltaNet recurrence is always sequential (prefill too).
package cpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.Target = (*Target)(nil)

// LoadOptions tunes Load.
type LoadOptions struct {
	// Threads is the number of worker goroutines (≤ 0: GOMAXPROCS). Results do not depend on it.
	Threads int
	// Kernels is the kernel mode: kernel.ModeExact (the zero value, the reference) or kernel.ModeFast
	// (quantized products of every width with int8-quantized inputs; not bit-identical to the reference, still independent of the batch
	// and the thread count). The drafter shares the target's pool, and with it the mode.
	Kernels kernel.Mode
	// ContextLength caps the session length below max_position_embeddings (0: the config's value).
	ContextLength int
	// ForceSeparateGDNProjections is accepted for symmetry with other backends: this backend never fuses the
	// Qwen3.5 in_proj_b / in_proj_a projections, so it changes nothing here.
	ForceSeparateGDNProjections bool
	// KVBits is the attention KV cache's format: 32 (0 too: float32, the reference) or 8 (int8 codes with a
	// float32 scale per position and KV head, vecmath.QuantizeRow8; about a quarter of the memory, not
	// bit-identical to 32; greedy speculative output still equals greedy plain output within the mode). The
	// drafter's context caches stay float32.
	KVBits int
	// Logger receives load-time information; the zero value logs nothing.
	Logger zerolog.Logger
}

// Target is a loaded model. It is safe for concurrent use; sessions are not.
type Target struct {
	m     *model.Target[*weight]
	pool  *kernel.Pool
	cfg   *hfmodel.TextConfig
	info  ports.ModelInfo
	store *safetensors.Store
	batch arenas // the shared rows of batched passes (ForwardBatch, DraftBatch)
	// kvBits is the sessions' attention cache format (LoadOptions.KVBits): 32 or 8.
	kvBits int
}

// Load reads a model directory (config.json, generation_config.json, safetensors) and builds the target. Any
// tensor the model does not use (other than vision-tower and MTP weights) and any missing tensor is an error
// naming it.
func Load(ctx context.Context, dir string, opts LoadOptions) (*Target, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := hfmodel.OpenTarget(dir, opts.ContextLength)
	if err != nil {
		return nil, err
	}
	t, err := build(f.Store, f.Config, f.Arch, opts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("load %s: %w", dir, err), f.Store.Close())
	}
	t.info = f.Info(dir)
	opts.Logger.Debug().Str("dir", dir).Str("model_type", f.Config.ModelType).Int("layers", f.Arch.Layers).
		Int("threads", t.pool.Threads()).Bool("zero_centred_norms", t.m.ZeroCentred).Msg("cpu target loaded")
	return t, nil
}

func build(st *safetensors.Store, cfg *hfmodel.TextConfig, a hfmodel.Arch, opts LoadOptions) (*Target, error) {
	ck, err := hfmodel.NewCheckpoint(st)
	if err != nil {
		return nil, err
	}
	kvBits, err := checkKVBits(opts.KVBits)
	if err != nil {
		return nil, err
	}
	pool := kernel.NewPoolMode(opts.Threads, opts.Kernels)
	m, err := model.LoadTarget(&loader{ck: ck, quant: cfg.Quantization, pool: pool}, ck, cfg, &a)
	if err != nil {
		return nil, err
	}
	if err := ck.Unused(); err != nil {
		return nil, err
	}
	return &Target{m: m, pool: pool, cfg: cfg, store: st, kvBits: kvBits}, nil
}

// ErrKVBits is wrapped by Load for a KV format the backend does not have.
var ErrKVBits = errors.New("kv bits must be 32 or 8")

// checkKVBits resolves LoadOptions.KVBits (0 means 32).
func checkKVBits(b int) (int, error) {
	switch b {
	case 0, 32:
		return 32, nil
	case 8:
		return 8, nil
	}
	return 0, fmt.Errorf("cpu: kv bits %d: %w", b, ErrKVBits)
}

// KVBits is the sessions' attention cache format: 32 (float32) or 8 (int8 codes and scales).
func (t *Target) KVBits() int { return t.kvBits }

// Info describes the model (see ports.Target).
func (t *Target) Info() ports.ModelInfo { return t.info }

// NewSession opens an empty session tapping tapLayers (each in [0, layers)).
func (t *Target) NewSession(ctx context.Context, tapLayers []int) (ports.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := newSession(t, tapLayers)
	if err != nil {
		return nil, fmt.Errorf("cpu new session: %w", err)
	}
	return s, nil
}

// Config returns the parsed config (shared; do not modify).
func (t *Target) Config() *hfmodel.TextConfig { return t.cfg }

// Pool returns the worker pool the target runs on, for a drafter to share.
func (t *Target) Pool() *kernel.Pool { return t.pool }

// Threads returns the number of workers.
func (t *Target) Threads() int { return t.pool.Threads() }

// EmbedTokens writes the embedding rows (H each, dequantized when quantized) of tokens into dst. Ids outside
// the vocabulary are an error.
func (t *Target) EmbedTokens(dst []float32, tokens []ports.Token) error {
	H := t.m.Arch.Hidden
	if len(dst) < len(tokens)*H {
		return fmt.Errorf("embed: destination holds %d values, need %d", len(dst), len(tokens)*H)
	}
	if err := model.CheckTokens(tokens, t.m.Arch.Vocab); err != nil {
		return err
	}
	copy(dst, ops{pool: t.pool}.Embed(t.m.Embed, tokens).v)
	return nil
}

// LMHead computes logits [rows, V] from hidden [rows, H] with the target's output head (the embedding when
// tied). No final norm is applied: the caller applies its own.
func (t *Target) LMHead(dst []float32, hidden []float32, rows int) error {
	a := &t.m.Arch
	if rows < 0 || len(hidden) < rows*a.Hidden || len(dst) < rows*a.Vocab {
		return fmt.Errorf("cpu lm head: %d rows need %d hidden and %d logit values, got %d and %d",
			rows, rows*a.Hidden, rows*a.Vocab, len(hidden), len(dst))
	}
	t.m.LMHead.lin.Forward(dst, hidden, rows)
	return nil
}

// Close releases the checkpoint mapping. Sessions and tensors of the target must not be used afterwards.
func (t *Target) Close() error {
	if t.store == nil {
		return nil
	}
	err := t.store.Close()
	t.store = nil
	return err
}
