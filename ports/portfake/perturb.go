package portfake

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// Perturbed wraps a target so that speculative verification goes wrong at one place, the defect a
// losslessness check must report: in its sessions' verify blocks (a Forward of two tokens or more that is not
// the first, the prefill from an empty session) the greedy token of the row at absolute position pos is
// replaced by the next id; a plain step or the prefill is left alone. With trees, its sessions also verify
// trees (ports.TreeVerifier, which the wrapped target's sessions must have) and every tree node at position
// pos is perturbed the same way.
func Perturbed(t ports.Target, pos int, trees bool) ports.Target {
	return perturbed{Target: t, pos: pos, trees: trees}
}

type perturbed struct {
	ports.Target
	pos   int
	trees bool
}

func (t perturbed) NewSession(ctx context.Context, taps []int) (ports.Session, error) {
	s, err := t.Target.NewSession(ctx, taps)
	if err != nil {
		return nil, err
	}
	ps := perturbedSession{Session: s, pos: t.pos, vocab: t.Info().VocabSize}
	if !t.trees {
		return ps, nil
	}
	tv, ok := s.(ports.TreeVerifier)
	if !ok {
		_ = s.Close()
		return nil, fmt.Errorf("portfake perturbed: session %T verifies no trees", s)
	}
	return perturbedTreeSession{perturbedSession: ps, tree: tv}, nil
}

type perturbedSession struct {
	ports.Session
	pos, vocab int
}

func (s perturbedSession) Forward(ctx context.Context, toks []ports.Token, o ports.ForwardOptions) (ports.ForwardResult, error) {
	fr, err := s.Session.Forward(ctx, toks, o)
	if err != nil || len(toks) < 2 || s.Len() == len(toks) {
		return fr, err
	}
	first := s.Len() - len(fr.Greedy)
	if i := s.pos - first; i >= 0 && i < len(fr.Greedy) {
		fr.Greedy[i] = (fr.Greedy[i] + 1) % ports.Token(s.vocab)
	}
	return fr, err
}

type perturbedTreeSession struct {
	perturbedSession
	tree ports.TreeVerifier
}

func (s perturbedTreeSession) ForwardTree(ctx context.Context, toks []ports.Token, parents []int, o ports.ForwardOptions) (ports.ForwardResult, error) {
	n := s.Len()
	fr, err := s.tree.ForwardTree(ctx, toks, parents, o)
	if err != nil {
		return fr, err
	}
	depth := make([]int, len(parents))
	for i, p := range parents {
		if p >= 0 {
			depth[i] = depth[p] + 1
		}
		if n+depth[i] == s.pos && i < len(fr.Greedy) {
			fr.Greedy[i] = (fr.Greedy[i] + 1) % ports.Token(s.vocab)
		}
	}
	return fr, nil
}

func (s perturbedTreeSession) KeepPath(ctx context.Context, path []int) (ports.Taps, error) {
	return s.tree.KeepPath(ctx, path)
}
