package verify

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/domain/speculative"
)

// TestBenchArms: a figure's rounds are counted by arm (plain steps, chains by rows, trees by node budget), plain
// first and then by size, each with its probing rounds (probes and exploring rounds), the tokens it committed
// and its time.
func TestBenchArms(t *testing.T) {
	ms := time.Millisecond
	var a benchAcc
	for _, rs := range []speculative.RoundStats{
		{BlockSize: 1, Committed: 1, VerifyTime: ms, Policy: "fallback-ar"},
		{BlockSize: 1, Committed: 1, VerifyTime: ms, Policy: "fallback-ar"},
		{BlockSize: 1, Committed: 1, VerifyTime: ms, Policy: "probe"},
		{BlockSize: 16, Accepted: 3, Committed: 4, DraftTime: ms, VerifyTime: 4 * ms, Policy: "explore"},
		{BlockSize: 4, Accepted: 2, Committed: 3, DraftTime: ms / 2, VerifyTime: 2 * ms, RollbackTime: ms / 2, Policy: "best",
			Tree: &speculative.TreeRound{Parents: []int{-1, 0, 1, 0}}, Decision: speculative.Decision{Tree: 4}},
		{BlockSize: 3, Accepted: 0, Committed: 1, DraftTime: ms / 2, VerifyTime: 2 * ms, Policy: "probe",
			Tree: &speculative.TreeRound{Parents: []int{-1, 0, 0}}, Decision: speculative.Decision{Tree: 4}},
		{BlockSize: 2, Accepted: 1, Committed: 2, DraftTime: ms / 2, VerifyTime: ms + ms/2, Policy: "probe"},
		// The last round of a generation, cut by its token budget: it counts the tokens it kept.
		{BlockSize: 2, Accepted: 1, Committed: 1, DraftTime: ms / 2, VerifyTime: ms / 2, Policy: "length"},
	} {
		a.addRound(rs)
	}
	arms := a.armsOf()
	require.Len(t, arms, 4)
	assert.Equal(t, []string{"plain", "chain 2", "chain 16", "tree 4"}, []string{arms[0].Arm, arms[1].Arm, arms[2].Arm, arms[3].Arm})
	assert.Equal(t, BenchArm{Arm: "plain", Rounds: 3, Probes: 1, Tau: 1, MsPerRound: 1, MsPerToken: 1, TimeShare: 3 / 16.5}, arms[0])
	assert.Equal(t, BenchArm{Arm: "chain 2", Rounds: 2, Probes: 1, Tau: 1.5, MsPerRound: 1.5, MsPerToken: 1, TimeShare: 3 / 16.5}, arms[1])
	assert.Equal(t, BenchArm{Arm: "chain 16", Rounds: 1, Probes: 1, Tau: 4, MsPerRound: 5, MsPerToken: 1.25, TimeShare: 5 / 16.5}, arms[2])
	assert.Equal(t, BenchArm{Arm: "tree 4", Rounds: 2, Probes: 1, Tau: 2, MsPerRound: 2.75, MsPerToken: 1.375, TimeShare: 5.5 / 16.5}, arms[3])
}
