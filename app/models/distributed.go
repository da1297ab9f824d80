package models

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/mlx/pipeline"
	"github.com/higgs-go/higgs/ports"
)

// One model across several processes (--distributed): MLX distributed's pipeline, every rank running the
// same higgsd with MLX's own conventions (MLX_RANK and MLX_HOSTFILE, as mlx.launch sets them). Rank 0
// loads its stage, the drafter and serves HTTP; the other ranks load theirs and run the worker loop.

// Distributed timings: a join waits for every rank to load and connect; a lost rank is noticed by the
// heartbeats within ModelConfig.RankTimeout (DefaultRankTimeout), in a round or between rounds; a round (one
// chunk's forward on every rank) gets distRoundTimeout, which only a live rank stuck in a round ever
// reaches, so it leaves a long prefill chunk on a slow rank plenty of room; rank 0 pings an idle pipeline
// through MLX's ring every distHeartbeat, and a worker that hears nothing there for distWorkerIdle gives up.
const (
	DefaultRankTimeout = 10 * time.Second
	distJoinTimeout    = 10 * time.Minute
	distRoundTimeout   = 2 * time.Minute
	distHeartbeat      = 10 * time.Second
	distWorkerIdle     = 60 * time.Second
)

func distOptions(drafterHead bool, rankTimeout time.Duration) pipeline.Options {
	return pipeline.Options{JoinTimeout: distJoinTimeout, Timeout: distRoundTimeout, Idle: distWorkerIdle, DrafterHead: drafterHead,
		RankTimeout: cmp.Or(rankTimeout, DefaultRankTimeout)}
}

// IsDistributedWorker reports whether this process is a worker of a --distributed higgsd or higgs-verify
// (MLX_RANK ≠ 0).
func IsDistributedWorker(distributed bool, getenv func(string) string) bool {
	return distributed && getenv(pipeline.EnvRank) != "" && getenv(pipeline.EnvRank) != "0"
}

// RankStats is one rank's stage, weight bytes and forward timings (pipeline.RankStats).
type RankStats = pipeline.RankStats

// StopPipeline stops the workers of m's distributed target and returns every rank's figures (nil when m
// is not distributed). m.Close stops them too; after StopPipeline it only closes.
func StopPipeline(m *Models) ([]RankStats, error) {
	h, ok := m.Target.(healthTarget)
	if !ok {
		return nil, nil
	}
	return h.n.Stop()
}

// RunWorker loads this rank's stage of mc's model and serves rank 0's pipeline until rank 0 stops it, a
// neighbour is lost, or ctx ends.
func RunWorker(ctx context.Context, mc ModelConfig, log zerolog.Logger) error {
	if err := mc.Validate(); err != nil {
		return fmt.Errorf("model config: %w", err)
	}
	dir, _, err := resolveTarget(mc.Model)
	if err != nil {
		return err
	}
	_, draft := mc.drafterName()
	t, err := pipeline.Load(ctx, dir, mlx.LoadOptions{Logger: log}, distOptions(draft, mc.RankTimeout))
	if err != nil {
		return err
	}
	log.Info().Int("rank", t.Rank()).Int("ranks", t.Ranks()).Msg("distributed worker serving")
	if err := t.Serve(ctx); err != nil {
		return err // the MLX thread may be blocked on a lost neighbour: the process exits without Close
	}
	defer t.Close()
	log.Info().Int("rank", t.Rank()).Msg("rank 0 stopped the pipeline")
	return nil
}

// loadDistributed is LoadModels' MLX target on rank 0: its stage of dir as pipeline.Node.Target (batched
// rounds pass the ring once, in micro-batches), a heartbeat keeping the workers and /health informed, and a
// close that stops the workers. The drafter loads on the returned *mlx.Target (the stage's).
func loadDistributed(ctx context.Context, dir string, drafter bool, rankTimeout time.Duration, log zerolog.Logger) (*mlx.Target, ports.Target, func() error, error) {
	t, err := pipeline.Load(ctx, dir, mlx.LoadOptions{Logger: log}, distOptions(drafter, rankTimeout))
	if err != nil {
		return nil, nil, nil, err
	}
	if t.Rank() != 0 {
		return nil, nil, nil, fmt.Errorf("rank %d loaded as rank 0 (run workers with RunWorker)", t.Rank())
	}
	hctx, stop := context.WithCancel(context.Background())
	go func() {
		if err := t.Heartbeat(hctx, distHeartbeat); err != nil {
			log.Error().Err(err).Msg("distributed pipeline lost")
		}
	}()
	closeFn := func() error {
		stop()
		_, err := t.Stop()
		return errors.Join(err, t.Close())
	}
	return t.MLX(), healthTarget{t.Target(), t}, closeFn, nil
}

// healthTarget is a pipelined target that reports a lost rank (Serve.Degraded reads it) and keeps the
// pipeline's batched rounds visible to the scheduler.
type healthTarget struct {
	ports.Target
	n *pipeline.Node
}

var _ ports.BatchForwarder = healthTarget{}

// ForwardBatch is the pipeline's batched round (ports.BatchForwarder).
func (h healthTarget) ForwardBatch(ctx context.Context, items []ports.BatchItem) ([]ports.BatchResult, error) {
	bf, ok := h.Target.(ports.BatchForwarder)
	if !ok {
		return nil, fmt.Errorf("distributed target: batched forward: %w", errors.ErrUnsupported)
	}
	return bf.ForwardBatch(ctx, items)
}

// Health is the error that broke the pipeline, or nil.
func (h healthTarget) Health() error { return h.n.Err() }
