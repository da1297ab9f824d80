package speculative

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

func TestAcceptGreedy(t *testing.T) {
	tests := []struct {
		name     string
		drafts   []ports.Token
		greedy   []ports.Token
		accepted int
		next     ports.Token
		wantErr  bool
	}{
		{name: "full match", drafts: []ports.Token{5, 6, 7}, greedy: []ports.Token{5, 6, 7, 8}, accepted: 3, next: 8},
		{name: "first token rejected", drafts: []ports.Token{5, 6, 7}, greedy: []ports.Token{4, 6, 7, 8}, accepted: 0, next: 4},
		{name: "partial match", drafts: []ports.Token{5, 6, 7}, greedy: []ports.Token{5, 6, 9, 8}, accepted: 2, next: 9},
		{name: "later match after a miss does not count", drafts: []ports.Token{5, 6, 7}, greedy: []ports.Token{5, 1, 7, 8}, accepted: 1, next: 1},
		{name: "empty draft", drafts: nil, greedy: []ports.Token{3}, accepted: 0, next: 3},
		{name: "too few target tokens", drafts: []ports.Token{5, 6}, greedy: []ports.Token{5, 6}, wantErr: true},
		{name: "too many target tokens", drafts: []ports.Token{5}, greedy: []ports.Token{5, 6, 7}, wantErr: true},
		{name: "no target tokens", drafts: nil, greedy: nil, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, next, err := acceptGreedy(tt.drafts, tt.greedy)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.accepted, a)
			assert.Equal(t, tt.next, next)
		})
	}
}

// scriptRand returns fixed uniforms in order.
type scriptRand struct {
	us []float64
	i  int
}

func (r *scriptRand) Float64() float64 {
	u := r.us[r.i%len(r.us)]
	r.i++
	return u
}

func mustDist(t *testing.T, p ...float64) *portfake.Dist {
	t.Helper()
	d, err := portfake.NewDist(p)
	require.NoError(t, err)
	return d
}

func TestAcceptSampledScripted(t *testing.T) {
	p := mustDist(t, 0.5, 0.3, 0.2)
	tests := []struct {
		name     string
		drafts   []ports.Token
		qs       []ports.Distribution
		ps       []ports.Distribution
		us       []float64
		accepted int
		next     ports.Token
		wantErr  bool
	}{
		// Point mass on 1: accepted iff u < p(1) = 0.3.
		{name: "point mass accepted then bonus", drafts: []ports.Token{1}, ps: []ports.Distribution{p, p}, us: []float64{0.29, 0.6}, accepted: 1, next: 1},
		// Rejected (u=0.31 ≥ 0.3); residual = p without token 1 = {0: 5/7, 2: 2/7}; u=0.9 → token 2.
		{name: "point mass rejected residual excludes draft", drafts: []ports.Token{1}, ps: []ports.Distribution{p, p}, us: []float64{0.31, 0.9}, accepted: 0, next: 2},
		{name: "empty draft samples the target", drafts: nil, ps: []ports.Distribution{p}, us: []float64{0.1}, accepted: 0, next: 0},
		// q(0) = 0.9 > p(0) = 0.5: accept with 0.5/0.9 ≈ 0.556.
		{name: "general q accepted", drafts: []ports.Token{0}, qs: []ports.Distribution{mustDist(t, 0.9, 0.05, 0.05)}, ps: []ports.Distribution{p, p}, us: []float64{0.55, 0.0}, accepted: 1, next: 0},
		// Rejected (0.56 ≥ 0.556). Residual max(0, p−q) = {0: 0, 1: 0.25, 2: 0.15}: propose y ~ p with u=0.1 →
		// token 0, kept with probability 1−0.9/0.5 < 0 (never); then u=0.6 → token 1, kept if u < 1−0.05/0.3.
		{name: "general q rejected residual", drafts: []ports.Token{0}, qs: []ports.Distribution{mustDist(t, 0.9, 0.05, 0.05)}, ps: []ports.Distribution{p, p}, us: []float64{0.56, 0.1, 0.0, 0.6, 0.5}, accepted: 0, next: 1},
		// q(0) = 0.6 > p(0) = 0.5 while q ≥ p everywhere (q's stored probabilities sum past 1): rejected
		// (0.9 ≥ 0.5/0.6), and the residual max(0, p−q) is empty once tokens 0, 1 and 2 are proposed (u 0.1,
		// 0.6, 0.9, each kept with probability < 0); the correction is then drawn from p itself: u=0.6 → token 1.
		{name: "empty residual falls back to the target", drafts: []ports.Token{0}, qs: []ports.Distribution{overshoot{p, 1.2}}, ps: []ports.Distribution{p, p}, us: []float64{0.9, 0.1, 0.5, 0.6, 0.5, 0.9, 0.5, 0.6}, accepted: 0, next: 1},
		{name: "distribution count mismatch", drafts: []ports.Token{1, 2}, ps: []ports.Distribution{p, p}, us: []float64{0}, wantErr: true},
		{name: "draft distribution count mismatch", drafts: []ports.Token{1}, qs: []ports.Distribution{p, p}, ps: []ports.Distribution{p, p}, us: []float64{0}, wantErr: true},
		{name: "draft outside its own distribution", drafts: []ports.Token{1}, qs: []ports.Distribution{mustDist(t, 1, 0, 0)}, ps: []ports.Distribution{p, p}, us: []float64{0}, wantErr: true},
		{name: "nil target distribution", drafts: []ports.Token{1}, ps: []ports.Distribution{nil, p}, us: []float64{0}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, next, err := acceptSampled(tt.drafts, tt.qs, tt.ps, &scriptRand{us: tt.us})
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.accepted, a)
			assert.Equal(t, tt.next, next)
		})
	}
}

// overshoot is a proposal whose stored probabilities are c ≥ 1 times p's (they sum to c, as rounded
// probabilities may sum a hair past 1, here magnified) while it draws like p: every rejection of its drafts
// has an empty residual max(0, p − c·p).
type overshoot struct {
	p ports.Distribution
	c float64
}

func (o overshoot) Prob(tok ports.Token) float64                 { return o.c * o.p.Prob(tok) }
func (o overshoot) Sample(u float64, ex ports.Token) ports.Token { return o.p.Sample(u, ex) }

// TestAcceptSampledFirstTokenDistribution checks losslessness of one slot in isolation: whatever the draft
// and its q, the first emitted token (accepted draft or correction) is distributed as p.
func TestAcceptSampledFirstTokenDistribution(t *testing.T) {
	p := mustDist(t, 0.05, 0.5, 0.25, 0.2)
	bonus := mustDist(t, 1, 0, 0, 0)
	cases := []struct {
		name  string
		draft func(u float64) (ports.Token, []ports.Distribution)
	}{
		{"point mass on likely token", func(float64) (ports.Token, []ports.Distribution) { return 1, nil }},
		{"point mass on unlikely token", func(float64) (ports.Token, []ports.Distribution) { return 0, nil }},
		{"sampled from a different q", func(u float64) (ports.Token, []ports.Distribution) {
			q := mustDist(t, 0.4, 0.1, 0.1, 0.4)
			return q.Sample(u, ports.NoToken), []ports.Distribution{q}
		}},
		// Every rejection (a third of the drafts) meets an empty residual and falls back to p, as the
		// authors' _rejection_sample does: the output is still p, P(y) = p(y)/c + (1 − 1/c)·p(y).
		{"empty residual: q overshoots p", func(u float64) (ports.Token, []ports.Distribution) {
			q := overshoot{p, 1.5}
			return q.Sample(u, ports.NoToken), []ports.Distribution{q}
		}},
	}
	const n = 40000
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rnd := portfake.NewRand(7)
			draftRnd := portfake.NewRand(8)
			counts := make([]float64, 4)
			for range n {
				d, qs := c.draft(draftRnd.Float64())
				a, next, err := acceptSampled([]ports.Token{d}, qs, []ports.Distribution{p, bonus}, rnd)
				require.NoError(t, err)
				first := next
				if a == 1 {
					first = d
				}
				counts[first]++
			}
			expected := make([]float64, 4)
			for i := range expected {
				expected[i] = n * p.Prob(ports.Token(i))
			}
			stat, df := chiSquare(counts, expected)
			assert.Less(t, stat, chiSquareCritical(df), "counts %v expected %v", counts, expected)
		})
	}
}

// chiSquare returns Pearson's statistic and degrees of freedom, pooling cells whose expected count is below
// 5 into one cell (the usual validity condition).
func chiSquare(observed, expected []float64) (float64, int) {
	var stat, poolO, poolE float64
	cells := 0
	for i := range observed {
		if expected[i] < 5 {
			poolO += observed[i]
			poolE += expected[i]
			continue
		}
		stat += (observed[i] - expected[i]) * (observed[i] - expected[i]) / expected[i]
		cells++
	}
	if poolE > 0 {
		stat += (poolO - poolE) * (poolO - poolE) / math.Max(poolE, 1e-12)
		cells++
	}
	return stat, cells - 1
}

// chiSquareCritical is the 0.999 quantile of χ²(df) by the Wilson–Hilferty approximation: with the fixed
// seeds the tests are deterministic, and a correct sampler fails this threshold with probability 0.1 %
// per seed choice while a biased one (a few percent off on a likely token) exceeds it by far.
func chiSquareCritical(df int) float64 {
	const z = 3.0902 // standard normal 0.999 quantile
	k := float64(df)
	c := 1 - 2/(9*k) + z*math.Sqrt(2/(9*k))
	return k * c * c * c
}
