package portfake

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.TreeVerifier = (*Session)(nil)
	_ ports.TopDrafter   = (*DraftSession)(nil)
)

// pendingTree is what ForwardTree leaves for KeepPath: every node's token, parent, and the recurrent hashes
// after it, and its tap row.
type pendingTree struct {
	n0      int
	tokens  []ports.Token
	parents []int
	rec     [][]uint64
	taps    []TapRow
	tapped  bool
}

// ForwardTree runs tokens as a tree hanging from the session's end (ports.TreeVerifier): each node's row is
// computed from its own ancestry — the previous token is its parent's (or the cache's last), the recurrent
// hashes run along its path — exactly what a plain Forward of that path computes.
func (s *Session) ForwardTree(ctx context.Context, tokens []ports.Token, parents []int, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	if err := s.check(); err != nil {
		return ports.ForwardResult{}, err
	}
	if err := s.checkNoTree(); err != nil {
		return ports.ForwardResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return ports.ForwardResult{}, fmt.Errorf("portfake forward tree: %w", err)
	}
	var errs []error
	if len(tokens) == 0 {
		errs = append(errs, errors.New("empty tree"))
	}
	if len(parents) != len(tokens) {
		errs = append(errs, fmt.Errorf("%d parents for %d nodes", len(parents), len(tokens)))
	}
	if opts.Rows != 0 {
		errs = append(errs, fmt.Errorf("rows %d: a tree returns every node's row (Rows 0)", opts.Rows))
	}
	if opts.Sampling != nil {
		if err := opts.Sampling.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	depth := make([]int, len(tokens))
	for i, t := range tokens {
		if t < 0 || int(t) >= s.m.cfg.Vocab {
			errs = append(errs, fmt.Errorf("token %d at node %d outside vocabulary %d", t, i, s.m.cfg.Vocab))
		}
		if i < len(parents) {
			switch p := parents[i]; {
			case p < -1 || p >= i:
				errs = append(errs, fmt.Errorf("node %d: parent %d outside [-1, %d)", i, p, i))
			case p >= 0:
				depth[i] = depth[p] + 1
			}
		}
	}
	for i, r := range s.rec {
		if r.pos != s.n {
			errs = append(errs, fmt.Errorf("recurrent layer %d is at position %d but the attention caches at %d: roll back before ForwardTree", i, r.pos, s.n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ports.ForwardResult{}, fmt.Errorf("portfake forward tree: %w", err)
	}
	if d := slices.Max(depth); s.n+d+1 > s.m.cfg.ContextLength {
		return ports.ForwardResult{}, fmt.Errorf("portfake forward tree of depth %d at %d (context %d): %w",
			d+1, s.n, s.m.cfg.ContextLength, ports.ErrContextFull)
	}
	s.forwards++
	s.calls = append(s.calls, ForwardCall{Pos: s.n, Tokens: slices.Clone(tokens), Opts: opts, Tree: slices.Clone(parents)})
	if s.forwards == s.failAt {
		s.tree = &pendingTree{n0: -1}
		return ports.ForwardResult{}, fmt.Errorf("portfake forward tree %d: %w", s.forwards, s.failErr)
	}
	s.serial++
	pt := &pendingTree{n0: s.n, tokens: slices.Clone(tokens), parents: slices.Clone(parents), rec: make([][]uint64, len(tokens)), tapped: opts.Taps}
	var res ports.ForwardResult
	for i, tok := range tokens {
		pos := s.n + depth[i]
		prev := ports.NoToken
		var from []uint64
		if p := parents[i]; p >= 0 {
			prev, from = tokens[p], pt.rec[p]
		} else {
			if len(s.kv) > 0 && s.n > 0 {
				prev = s.kv[0][s.n-1]
			}
			for _, r := range s.rec {
				from = append(from, r.h)
			}
		}
		hs := make([]uint64, len(s.rec))
		for l := range s.rec {
			hs[l] = s.m.recStep(from[l], l, tok, pos)
		}
		pt.rec[i] = hs
		key := s.m.key(tok, prev, hs)
		logits := s.m.logits(key)
		res.Greedy = append(res.Greedy, transform(logits, ports.SamplingParams{}).Argmax())
		if opts.Sampling != nil {
			res.Dists = append(res.Dists, transform(logits, *opts.Sampling))
		}
		if opts.Logits {
			for _, v := range logits {
				res.Logits = append(res.Logits, float32(v))
			}
		}
		if opts.Taps {
			row := TapRow{Pos: pos, Token: tok, Values: make([]float32, len(s.taps)*s.m.cfg.TapWidth)}
			for j, l := range s.taps {
				s.m.tapRow(l, key, row.Values[j*s.m.cfg.TapWidth:(j+1)*s.m.cfg.TapWidth])
			}
			pt.taps = append(pt.taps, row)
		}
	}
	if opts.Taps {
		res.Taps = &Taps{owner: s, serial: s.serial, rows: slices.Clone(pt.taps)}
	}
	s.tree = pt
	if s.m.cfg.ForwardCost != nil {
		s.m.advance(s.m.cfg.ForwardCost(len(tokens)))
	}
	return res, nil
}

// KeepPath keeps the nodes of path (ports.TreeVerifier): the caches get the path's tokens, the recurrent
// layers its last node's hashes.
func (s *Session) KeepPath(ctx context.Context, path []int) (ports.Taps, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	pt := s.tree
	switch {
	case pt == nil:
		return nil, errors.New("portfake keep path: no tree pending (ForwardTree first)")
	case pt.n0 < 0:
		return nil, errors.New("portfake keep path: the tree's forward failed; close the session")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("portfake keep path: %w", err)
	}
	for k, v := range path {
		want := -1
		if k > 0 {
			want = path[k-1]
		}
		if v < 0 || v >= len(pt.tokens) || pt.parents[v] != want {
			return nil, fmt.Errorf("portfake keep path: node %d at step %d is not a child of %d", v, k, want)
		}
	}
	s.tree = nil
	s.counts.Trims++
	for _, v := range path {
		for l := range s.kv {
			s.kv[l] = append(s.kv[l], pt.tokens[v])
		}
	}
	s.n = pt.n0 + len(path)
	if len(path) > 0 {
		last := pt.rec[path[len(path)-1]]
		for l := range s.rec {
			s.rec[l] = recState{h: last[l], pos: s.n}
		}
	}
	if !pt.tapped {
		return nil, nil
	}
	// The kept rows are a new matrix, valid until the next Forward (the serial is advanced here).
	s.serial++
	taps := &Taps{owner: s, serial: s.serial, rows: []TapRow{}}
	for _, v := range path {
		r := pt.taps[v]
		taps.rows = append(taps.rows, TapRow{Pos: r.Pos, Token: r.Token, Values: slices.Clone(r.Values)})
	}
	return taps, nil
}

// checkNoTree refuses a call while a tree awaits KeepPath.
func (s *Session) checkNoTree() error {
	if s.tree != nil {
		return errors.New("portfake: a verification tree is pending: KeepPath (or Close) first")
	}
	return nil
}

// DraftTop is Draft that also fills Proposal.Top (ports.TopDrafter): the Proposer's own Top, cut to top.K per
// slot, or, when it gives none, each drafted token alone with probability 1; Tokens and Top cut to the first
// top.Slots slots.
func (s *DraftSession) DraftTop(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, top ports.TopRequest) (ports.Proposal, error) {
	if top.K < 1 {
		return ports.Proposal{}, fmt.Errorf("portfake draft top: k %d must be ≥ 1", top.K)
	}
	prop, err := s.Draft(ctx, anchor, newCtx, bs)
	if len(s.calls) > 0 {
		s.calls[len(s.calls)-1].Top = top
	}
	if err != nil || bs == 1 {
		return prop, err
	}
	if prop.Top != nil && len(prop.Top) != len(prop.Tokens) {
		return ports.Proposal{}, fmt.Errorf("portfake draft top: %d candidate lists for %d tokens", len(prop.Top), len(prop.Tokens))
	}
	n := min(len(prop.Tokens), top.SlotsOf(bs))
	prop.Tokens = prop.Tokens[:n]
	if len(prop.Dists) > n {
		prop.Dists = prop.Dists[:n]
	}
	if prop.Top == nil {
		prop.Top = make([][]ports.Candidate, len(prop.Tokens))
		for i, t := range prop.Tokens {
			prop.Top[i] = []ports.Candidate{{Token: t, Prob: 1}}
		}
		return prop, nil
	}
	cands := make([][]ports.Candidate, len(prop.Tokens))
	for i := range cands {
		c := prop.Top[i]
		if len(c) == 0 || c[0].Token != prop.Tokens[i] {
			return ports.Proposal{}, fmt.Errorf("portfake draft top: slot %d's candidates do not start with its token %d", i+1, prop.Tokens[i])
		}
		cands[i] = slices.Clone(c[:min(top.K, len(c))])
	}
	prop.Top = cands
	return prop, nil
}

// Ranked proposes, at every slot, width candidates with probabilities halving from 1/2, the target's greedy
// token along the true greedy path being the ranks[i]-th (0-based; ranks shorter than the block repeat its
// last value; a rank ≥ width leaves it out); the other candidates are other tokens. Tokens are each slot's
// first candidate. A chain accepts up to the first slot whose rank is not 0, a tree built from the
// candidates up to the first slot whose rank is past its width.
func Ranked(m *Model, width int, ranks ...int) Proposer {
	return func(history []ports.Token, bs int) (ports.Proposal, error) {
		truth, err := m.GreedyContinuation(history, bs-1)
		if err != nil {
			return ports.Proposal{}, err
		}
		var p ports.Proposal
		for i, g := range truth {
			r := ranks[min(i, len(ranks)-1)]
			cands := make([]ports.Candidate, 0, width)
			other := g
			for j := range width {
				tok := g
				if j != r {
					other = (other + 1) % ports.Token(m.cfg.Vocab)
					tok = other
				}
				cands = append(cands, ports.Candidate{Token: tok, Prob: 1 / float64(int(2)<<j)})
			}
			p.Tokens = append(p.Tokens, cands[0].Token)
			p.Top = append(p.Top, cands)
		}
		return p, nil
	}
}
