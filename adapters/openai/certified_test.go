package openai

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// TestCertifiedOf: a card's certification becomes /v1/models' "certified" object, its tree summary as
// "trees" (lists as arrays, never null; absent for a certificate from before trees).
func TestCertifiedOf(t *testing.T) {
	assert.Nil(t, certifiedOf(nil))
	pass := true
	when := time.Date(2026, 12, 6, 4, 30, 0, 0, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		name string
		in   *ports.Certification
		want string
	}{
		{"trees", &ports.Certification{Pass: true, When: when, Backend: "cpu", Scope: "chain; tree", Matches: true,
			Trees: &ports.CertifiedTrees{Verified: true, Pass: true, BlockSizes: []int{3}, Budgets: []int{4, 8}, TreeRounds: 9,
				DraftRounds: 11, DistributionPass: &pass}},
			`{"pass":true,"when":"2026-12-06T03:30:00Z","backend":"cpu","scope":"chain; tree","matches_loaded":true,
			"trees":{"verified":true,"pass":true,"block_sizes":[3],"budgets":[4,8],"tree_rounds":9,"draft_rounds":11,"distribution_pass":true}}`},
		{"trees not verified", &ports.Certification{Pass: true, Backend: "mlx",
			Trees: &ports.CertifiedTrees{Note: "not verified: this backend does not verify trees"}},
			`{"pass":true,"backend":"mlx","matches_loaded":false,
			"trees":{"verified":false,"pass":false,"block_sizes":[],"budgets":[],"tree_rounds":0,"draft_rounds":0,"note":"not verified: this backend does not verify trees"}}`},
		{"before trees", &ports.Certification{Pass: true, Backend: "cpu"}, `{"pass":true,"backend":"cpu","matches_loaded":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(certifiedOf(tc.in))
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(data))
		})
	}
}
