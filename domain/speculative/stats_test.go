package speculative

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

func TestStatsTotals(t *testing.T) {
	s := Stats{MaxBlockSize: 5, Rounds: []RoundStats{
		{BlockSize: 4, Accepted: 3, Committed: 4},
		{BlockSize: 4, Accepted: 1, Committed: 2},
		{BlockSize: 1, Accepted: 0, Committed: 1},
		{BlockSize: 3, Accepted: 0, Committed: 1},
	}}
	assert.Equal(t, 4, s.NumRounds())
	assert.Equal(t, 3, s.DraftRounds(), "a plain step is not a draft–verify round")
	assert.Equal(t, 1, s.PlainSteps())
	assert.Equal(t, 3+3+0+2, s.Drafted())
	assert.Equal(t, 4, s.Accepted())
	assert.InDelta(t, 4.0/3, s.MeanAccepted(), 1e-12)
	assert.InDelta(t, 1+4.0/3, s.Tau(), 1e-12)
	assert.Equal(t, []int{2, 1, 1, 0}, s.AcceptedPerPosition(), "MaxBlockSize−1 entries")
	u := s.SpecUsage()
	assert.Equal(t, ports.SpecUsage{Rounds: 3, PlainSteps: 1, Drafted: 8, Accepted: 4, Tau: s.Tau(),
		AcceptedPerPosition: []int{2, 1, 1, 0}, BlockSize: 5,
		BlockSizes: []ports.BlockSizeUse{{BlockSize: 3, Rounds: 1}, {BlockSize: 4, Rounds: 2}},
		Policy:     &ports.PolicyUsage{Mode: "plain", Reason: s.Decision.Reason()}}, u)

	var empty Stats
	assert.InDelta(t, 1.0, empty.Tau(), 1e-12, "no round: τ is what a plain step commits")
	assert.Zero(t, empty.MeanAccepted())
	assert.Empty(t, empty.AcceptedPerPosition())
	eu := Stats{MaxBlockSize: 16}.SpecUsage()
	assert.Equal(t, make([]int, 15), eu.AcceptedPerPosition, "present, with its documented length, when nothing was drafted")
	assert.Equal(t, []ports.BlockSizeUse{}, eu.BlockSizes)
	assert.NotEmpty(t, eu.Policy.Reason)
}

func TestDecisionReasons(t *testing.T) {
	cases := []struct {
		d    Decision
		mode string
		want string
	}{
		{Decision{Code: reasonFixed, BlockSize: 8}, "speculative", "fixed block size 8: the adaptive policy is off"},
		{Decision{Code: reasonFixed, BlockSize: 1}, "plain", "speculation is off for this request (block size 1, or no drafter loaded)"},
		{Decision{Code: reasonLength, BlockSize: 3, Left: 3}, "speculative", "block shortened to 3: only 3 tokens were left of the request's budget"},
		{Decision{Code: reasonExplore, BlockSize: 1}, "plain", "exploring: measuring what a plain decoding step costs before any speculative block"},
		{Decision{Code: reasonExplore, BlockSize: 4}, "speculative", "exploring: measuring a first speculative block of 4 (plain decoding measured)"},
		{Decision{Code: reasonProbe, BlockSize: 16, ProbeEvery: 16, ProbeBudget: 0.02}, "speculative",
			"probe: re-measuring block 16 (at most one probe per 16 rounds, probes losing at most 2% of decode time)"},
		{Decision{Code: reasonFallbackAR, BlockSize: 1, Candidate: 16, ExpectedTau: 2.7, CostSteps: 5.6}, "plain",
			"plain decoding: the best speculative choice, a block of 16 expects τ 2.7 tokens per round and costs 5.6 plain decoding steps (0.48× plain decoding's rate), is below break-even"},
		{Decision{Code: reasonBest, BlockSize: 8, Candidate: 8, ExpectedTau: 4, CostSteps: 2}, "speculative",
			"speculating: a block of 8 expects τ 4 tokens per round and costs 2 plain decoding steps (2× plain decoding's rate), the highest expected rate measured"},
		{Decision{}, "plain", "no decoding step ran: the first token, sampled after the prefill, ended the request"},
	}
	for _, c := range cases {
		assert.Equal(t, c.mode, c.d.Mode(), "%+v", c.d)
		assert.Equal(t, c.want, c.d.Reason())
	}
}

// The policy's decisions carry the measurements they were made from: a fallback names the speculative block
// it rejected, with a cost above its expected τ.
func TestPolicyDecisionMeasurements(t *testing.T) {
	p := newDepthPolicy(16, PolicyConfig{})
	// Verifying costs a plain step per row and nothing is ever accepted: speculation cannot pay.
	rs := simulate(p, 200, func(bs int) time.Duration { return time.Duration(bs) * time.Millisecond },
		func(int, int) float64 { return 0 })
	require.NotEmpty(t, rs)
	d := p.choose(16)
	require.Equal(t, reasonFallbackAR, d.Code, "%v", countReasons(rs))
	assert.Equal(t, 1, d.BlockSize)
	assert.Greater(t, d.Candidate, 1)
	assert.Greater(t, d.CostSteps, d.ExpectedTau, "below break-even: the round costs more steps than it commits")
	assert.Contains(t, d.Reason(), "below break-even")
	assert.Equal(t, "plain", d.Mode())
}

func TestStatsFromGeneration(t *testing.T) {
	prompt := testPrompt(6, 32)
	m := portfake.MustNew(hybrid)
	r := newRig(t, hybrid, portfake.MatchThenDiverge(m, 2), portfake.DrafterConfig{})
	res, err := r.generate(t, t.Context(), Config{BlockSize: 5, MaxTokens: 31}, nil, prompt)
	require.NoError(t, err)
	// Every round accepts exactly 2 drafts and commits 3 tokens: 30 tokens after the first in 10 rounds; the
	// last one has only 3 tokens left, so its block shrinks to 4.
	require.Len(t, res.Stats.Rounds, 10)
	assert.InDelta(t, 3.0, res.Stats.Tau(), 1e-12)
	assert.Equal(t, []int{10, 10, 0, 0}, res.Stats.AcceptedPerPosition())
	assert.Equal(t, 9*4+3, res.Stats.Drafted())
	assert.Equal(t, len(prompt), res.Stats.PromptTokens)
	assert.Positive(t, res.Stats.PrefillTime)
	assert.Positive(t, res.Stats.DecodeTime)
	assert.Equal(t, reasonLength, res.Stats.Rounds[9].Policy)
	for _, rs := range res.Stats.Rounds[:9] {
		assert.Equal(t, reasonFixed, rs.Policy)
		assert.Positive(t, rs.DraftTime)
		assert.Positive(t, rs.VerifyTime)
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{BlockSize: 1, MaxTokens: 1}.Validate())
	require.NoError(t, Config{BlockSize: 16, ContextLength: 10, Adaptive: true, Sampling: ports.SamplingParams{Temperature: 0.7, TopP: 0.9}}.Validate())
	err := Config{
		BlockSize: 0, MaxTokens: -1, ContextLength: -2, StopTokens: []ports.Token{-3},
		Sampling: ports.SamplingParams{Temperature: -1}, Rollback: RollbackMode(9), Verify: Verification(4),
		Policy: PolicyConfig{ProbeEvery: -1, Decay: 2}, LayerKinds: []ports.LayerKind{7},
	}.Validate()
	require.Error(t, err)
	for _, want := range []string{"block size 0", "max tokens -1", "context length -2", "stop token 0", "temperature",
		"rollback mode 9", "verification 4", "probe interval -1", "decay 2", "layer 0"} {
		assert.ErrorContains(t, err, want)
	}
	assert.ErrorContains(t, Config{BlockSize: 2}.Validate(), "max tokens is required")

	_, err = New(Config{BlockSize: 2, MaxTokens: 3, Sampling: ports.SamplingParams{Temperature: 1}}, portfake.NewClock(1), nil)
	assert.ErrorContains(t, err, "random source")
	_, err = New(Config{BlockSize: 2, MaxTokens: 3}, nil, nil)
	assert.ErrorContains(t, err, "nil clock")
}

// TestTokenBudget: the one check of a generation's length, whose messages Validate and callers share.
func TestTokenBudget(t *testing.T) {
	tests := []struct {
		name                     string
		prompt, maxTokens, ctxLn int
		want                     int
		err                      string
		full                     bool
	}{
		{"max tokens within the room", 10, 5, 20, 5, "", false},
		{"max tokens exactly the room", 10, 10, 20, 10, "", false},
		{"zero: all the room", 10, 0, 20, 10, "", false},
		{"no context length: max tokens", 500, 7, 0, 7, "", false},
		{"max tokens past the room", 10, 11, 20, 0, "max tokens 11 is too large: this model's maximum context length is 20 tokens and the prompt has 10 tokens (at most 10 can be generated)", true},
		{"prompt fills the context", 20, 0, 20, 0, "this model's maximum context length is 20 tokens, and the prompt has 20 tokens", true},
		{"prompt past the context", 25, 3, 20, 0, "the prompt has 25 tokens", true},
		{"negative max tokens", 1, -1, 20, 0, "max tokens -1 must be ≥ 1", false},
		{"negative context length", 1, 3, -2, 0, "context length -2 must be ≥ 0", false},
		{"unbounded", 1, 0, 0, 0, "max tokens is required: the model does not state its context length", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TokenBudget(tt.prompt, tt.maxTokens, tt.ctxLn)
			if tt.err == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.ErrorContains(t, err, tt.err)
			assert.Equal(t, tt.full, errors.Is(err, ports.ErrContextFull), "wraps ErrContextFull")
		})
	}
}

func TestRollbackModeString(t *testing.T) {
	assert.Equal(t, "auto", RollbackAuto.String())
	assert.Equal(t, "replay", RollbackReplay.String())
	assert.Equal(t, "recompute", RollbackRecompute.String())
	assert.Equal(t, "RollbackMode(7)", RollbackMode(7).String())
}
