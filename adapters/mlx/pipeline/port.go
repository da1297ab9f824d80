package pipeline

import (
	"context"

	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/ports"
)

// pipelineTarget is rank 0's view of a distributed target: an ordinary ports.Target whose sessions keep
// every ability a pipeline offers (Forward with taps, tapes and raw logits, KV trim, snapshots, tape
// replay, prefix export and import, tree verification: every rank keeps its own layers' share under one
// id), and batched rounds (ports.BatchForwarder: one pass of the ring per round, cut into micro-batches;
// see adapters/mlx's stagebatch.go), and nothing of the MLX target's other methods.
type pipelineTarget struct{ t *mlx.Target }

var _ ports.BatchForwarder = pipelineTarget{}

func (p pipelineTarget) Info() ports.ModelInfo { return p.t.Info() }

func (p pipelineTarget) NewSession(ctx context.Context, tapLayers []int) (ports.Session, error) {
	s, err := p.t.NewSession(ctx, tapLayers)
	if err != nil {
		return nil, err
	}
	return pipelineSession{s.(*mlx.Session)}, nil
}

// ForwardBatch is mlx.Target.ForwardBatch on the pipeline's sessions (ports.BatchForwarder).
func (p pipelineTarget) ForwardBatch(ctx context.Context, items []ports.BatchItem) ([]ports.BatchResult, error) {
	in := make([]ports.BatchItem, len(items))
	for i, it := range items {
		if ps, ok := it.Session.(pipelineSession); ok {
			it.Session = ps.Session
		}
		in[i] = it
	}
	return p.t.ForwardBatch(ctx, in)
}

// pipelineSession is the Session behind the wrapper, with all its abilities.
type pipelineSession struct{ *mlx.Session }

var _ interface {
	ports.Session
	ports.TapeReplayer
	ports.PrefixExporter
	ports.TreeVerifier
} = pipelineSession{}
