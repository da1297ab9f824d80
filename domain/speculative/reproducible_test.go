package speculative

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// decoding is one way of splitting a seeded generation into rounds: a block size, a drafter, the adaptive
// policy under some simulated costs, a rollback strategy.
type decoding struct {
	name     string
	bs       int
	adaptive bool
	rollback RollbackMode
	propose  func(m *portfake.Model) portfake.Proposer
	// verify and draft are the simulated costs the manual clock advances by (nil: none), which is what the
	// adaptive policy decides from.
	verify func(n int) time.Duration
	draft  time.Duration
	tree   TreeConfig
}

func seededDecodings() []decoding {
	cheap := func(n int) time.Duration { return time.Duration(1000+n) * time.Microsecond }
	dear := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	perfect := func(m *portfake.Model) portfake.Proposer { return portfake.Perfect(m) }
	ranked := func(m *portfake.Model) portfake.Proposer { return portfake.Ranked(m, 3, 0, 1, 0, 2, 1, 3) }
	return []decoding{
		{name: "plain", bs: 1},
		{name: "block 2 greedy drafts", bs: 2, propose: perfect},
		{name: "block 3 diverging drafts", bs: 3, propose: func(m *portfake.Model) portfake.Proposer { return portfake.MatchThenDiverge(m, 1) }},
		{name: "block 8 greedy drafts replay", bs: 8, rollback: RollbackReplay, propose: perfect},
		{name: "block 8 greedy drafts recompute", bs: 8, rollback: RollbackRecompute, propose: perfect},
		{name: "block 5 random drafts", bs: 5, propose: func(*portfake.Model) portfake.Proposer { return portfake.RandomTokens(32, 3) }},
		{name: "block 4 sampled drafts", bs: 4, propose: func(m *portfake.Model) portfake.Proposer {
			return portfake.Sampled(m, ports.SamplingParams{Temperature: 1.3}, 8)
		}},
		{name: "adaptive, cheap verify", bs: 8, adaptive: true, propose: perfect, verify: cheap, draft: 100 * time.Microsecond},
		{name: "adaptive, dear verify", bs: 8, adaptive: true, propose: perfect, verify: dear, draft: 100 * time.Microsecond},
		{name: "adaptive, dear draft", bs: 8, adaptive: true, propose: perfect, verify: cheap, draft: 20 * time.Millisecond},
		{name: "tree of 12, truth at mixed ranks", bs: 8, tree: TreeConfig{Budget: 12, Width: 3}, propose: ranked},
		{name: "tree of 4, random drafts", bs: 6, tree: TreeConfig{Budget: 4, Width: 2}, propose: func(*portfake.Model) portfake.Proposer { return portfake.RandomTokens(32, 5) }},
		{name: "adaptive with trees", bs: 8, adaptive: true, tree: TreeConfig{Budget: 16, Width: 3}, propose: ranked, verify: cheap, draft: 100 * time.Microsecond},
	}
}

// runSeeded decodes prompt with one seed under dc and returns the tokens and the block sizes of its rounds;
// it checks the rollback property (the session holds exactly the committed tokens) after every emit.
func runSeeded(t *testing.T, dc decoding, verify Verification, params ports.SamplingParams, seed uint64,
	prompt []ports.Token, n int) ([]ports.Token, []int) {
	t.Helper()
	clock := portfake.NewClock(0)
	mcfg := portfake.Config{Tape: true, Clock: clock, ForwardCost: dc.verify}
	m := portfake.MustNew(mcfg)
	var propose portfake.Proposer
	if dc.propose != nil {
		propose = dc.propose(m)
	}
	r := newRig(t, mcfg, propose, portfake.DrafterConfig{BlockSize: 8, Clock: clock,
		DraftCost: func(int) time.Duration { return dc.draft }})
	dec, err := New(Config{BlockSize: dc.bs, Adaptive: dc.adaptive, MaxTokens: n, Sampling: params, Verify: verify,
		Rollback: dc.rollback, Tree: dc.tree}, clock, portfake.NewRand(seed))
	require.NoError(t, err)
	seq := slices.Clone(prompt)
	res, err := dec.Generate(t.Context(), r.sess, r.draftSession(), prompt, func(c []ports.Token) error {
		seq = append(seq, c...)
		r.requireCommitted(t, seq)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, res.Tokens, n)
	var sizes []int
	for _, rs := range res.Stats.Rounds {
		sizes = append(sizes, rs.BlockSize)
	}
	return res.Tokens, sizes
}

// TestMatchOutputIsAFunctionOfTheSeed: under VerifyMatch a seeded generation gives the same tokens whatever
// the block size, the drafts, the rollback strategy and the adaptive policy's choices (driven here by
// simulated costs on a manual clock) — the tokens plain sampling gives with the same seed. Under
// VerifyResidual the same decodings disagree, which shows the test can tell (and is the defect the match
// rule fixes).
func TestMatchOutputIsAFunctionOfTheSeed(t *testing.T) {
	prompt := testPrompt(6, 32)
	const n = 60
	params := []ports.SamplingParams{{Temperature: 0.7}, {Temperature: 1, TopK: 5, TopP: 0.9}}
	decodings := seededDecodings()
	for _, p := range params {
		for seed := range uint64(4) {
			want, _ := runSeeded(t, decodings[0], VerifyMatch, p, seed, prompt, n)
			schedules := map[string]bool{}
			residualDiffers := false
			for _, dc := range decodings[1:] {
				got, sizes := runSeeded(t, dc, VerifyMatch, p, seed, prompt, n)
				assert.Equal(t, want, got, "T %v seed %d, %s (block sizes %v)", p.Temperature, seed, dc.name, sizes)
				schedules[sizesKey(sizes)] = true
				res, _ := runSeeded(t, dc, VerifyResidual, p, seed, prompt, n)
				residualDiffers = residualDiffers || !slices.Equal(want, res)
			}
			assert.Greater(t, len(schedules), 5, "the decodings must split the generation differently")
			assert.True(t, residualDiffers, "residual sampling consumes numbers by block; some decoding should differ")
		}
	}
}

func sizesKey(sizes []int) string {
	b := make([]byte, len(sizes))
	for i, s := range sizes {
		b[i] = byte(s)
	}
	return string(b)
}

// TestMatchAcceptance checks acceptMatch's rule on explicit distributions: the target's token at each slot is
// the inverse-CDF sample with that slot's position number, drafts are accepted while they equal it, and the
// returned token is the target's sample at the first mismatch (or after the last draft).
func TestMatchAcceptance(t *testing.T) {
	d := func(p ...float64) ports.Distribution {
		dist, err := portfake.NewDist(p)
		require.NoError(t, err)
		return dist
	}
	// noise gives position pos the number u[pos-10].
	u := []float64{0.1, 0.6, 0.95, 0.3}
	noise := fixedNoise{base: 10, u: u}
	// Under these distributions the samples at positions 10..13 are tokens 0, 1, 2, 0.
	ps := []ports.Distribution{d(0.5, 0.5, 0), d(0.2, 0.5, 0.3), d(0.3, 0.3, 0.4), d(0.9, 0.1, 0)}
	tests := []struct {
		name   string
		drafts []ports.Token
		a      int
		next   ports.Token
	}{
		{"plain round", nil, 0, 0},
		{"all accepted, bonus from the last slot", []ports.Token{0, 1, 2}, 3, 0},
		{"first rejected", []ports.Token{1, 1, 2}, 0, 0},
		{"second rejected: the target's sample replaces it", []ports.Token{0, 2, 2}, 1, 1},
		{"third rejected", []ports.Token{0, 1, 0}, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, next, err := acceptMatch(tt.drafts, ps[:len(tt.drafts)+1], noise, 10)
			require.NoError(t, err)
			assert.Equal(t, tt.a, a)
			assert.Equal(t, tt.next, next)
		})
	}
	_, _, err := acceptMatch([]ports.Token{0}, ps[:1], noise, 10)
	require.Error(t, err, "one distribution per draft plus one")
	_, _, err = acceptMatch([]ports.Token{0}, []ports.Distribution{ps[0], nil}, noise, 10)
	require.Error(t, err, "nil distribution")
}

type fixedNoise struct {
	base int
	u    []float64
}

func (f fixedNoise) Float64() float64        { panic("match verification must not draw from the stream") }
func (f fixedNoise) Uniform(pos int) float64 { return f.u[pos-f.base] }

// streamOnly is a Rand without the position-keyed ability.
type streamOnly struct{}

func (streamOnly) Float64() float64 { return 0.5 }

func TestMatchNeedsAPositionRand(t *testing.T) {
	cfg := Config{BlockSize: 2, MaxTokens: 4, Sampling: ports.SamplingParams{Temperature: 1}, Verify: VerifyMatch}
	_, err := New(cfg, portfake.NewClock(0), streamOnly{})
	require.ErrorContains(t, err, "ports.PositionRand")
	_, err = New(cfg, portfake.NewClock(0), portfake.NewRand(1))
	require.NoError(t, err)
	cfg.Sampling = ports.SamplingParams{}
	_, err = New(cfg, portfake.NewClock(0), nil)
	require.NoError(t, err, "greedy decoding draws nothing, whatever the verification")
	cfg.Verify = Verification(7)
	_, err = New(cfg, portfake.NewClock(0), nil)
	require.ErrorContains(t, err, "unknown verification 7")
}
