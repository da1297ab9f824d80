package mlx

import (
	"context"

	"github.com/higgs-go/higgs/ports"
)

// Pipeline is rank 0's view of a distributed target as the rest of higgs sees it: an ordinary ports.Target
// whose sessions keep the abilities a pipeline offers (Forward with taps and tapes, KV trim, snapshots, tape
// replay, raw logits) and hide those it does not yet (batched rounds, prefix export), so the server falls
// back to serving one sequence at a time without a prefix cache. The drafter is loaded on t itself.
func Pipeline(t *Target) ports.Target { return pipelineTarget{t} }

type pipelineTarget struct{ t *Target }

func (p pipelineTarget) Info() ports.ModelInfo { return p.t.Info() }

func (p pipelineTarget) NewSession(ctx context.Context, tapLayers []int) (ports.Session, error) {
	s, err := p.t.NewSession(ctx, tapLayers)
	if err != nil {
		return nil, err
	}
	return pipelineSession{s.(*Session)}, nil
}

// pipelineSession is a Session without PrefixExporter.
type pipelineSession struct{ *Session }

var _ interface {
	ports.Session
	ports.TapeReplayer
	ports.LogitsForwarder
} = pipelineSession{}

// ExportPrefix and ImportPrefix are shadowed so that the type assertion for ports.PrefixExporter fails.
func (pipelineSession) ExportPrefix() {}

func (pipelineSession) ImportPrefix() {}
