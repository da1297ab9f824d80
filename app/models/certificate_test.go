package models

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// TestCertificationTrees: the head's tree summary reaches the model card as written; a certificate made
// before higgs verified trees has none, and its card none either.
func TestCertificationTrees(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644))
	fp, err := Fingerprint(dir)
	require.NoError(t, err)
	write := func(body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, CertificateFile), []byte(body), 0o644))
	}

	write(`{"format":1,"certified":true,"backend":"cpu","fingerprint":"` + fp + `","scope":"chain; tree",
		"trees":{"verified":true,"pass":true,"block_sizes":[3,4],"budgets":[4,8,16],"tree_rounds":40,"draft_rounds":52,
		"distribution_pass":true},"tree":{"verified":true}}`)
	head, err := ReadCertificate(dir)
	require.NoError(t, err)
	require.NotNil(t, head.Trees)
	card := Certification(dir, "cpu")
	require.NotNil(t, card)
	assert.True(t, card.Matches)
	pass := true
	assert.Equal(t, &ports.CertifiedTrees{Verified: true, Pass: true, BlockSizes: []int{3, 4}, Budgets: []int{4, 8, 16},
		TreeRounds: 40, DraftRounds: 52, DistributionPass: &pass}, card.Trees)

	write(`{"format":1,"certified":true,"backend":"mlx","fingerprint":"` + fp + `",
		"trees":{"verified":false,"pass":false,"block_sizes":[],"budgets":[4,8,16],"tree_rounds":0,"draft_rounds":0,
		"note":"not verified: this backend does not verify trees"}}`)
	card = Certification(dir, "mlx")
	require.NotNil(t, card.Trees)
	assert.False(t, card.Trees.Verified)
	assert.Equal(t, "not verified: this backend does not verify trees", card.Trees.Note)
	assert.Nil(t, card.Trees.DistributionPass)

	write(`{"format":1,"certified":true,"backend":"cpu","fingerprint":"` + fp + `","scope":"chain; trees not verified"}`)
	card = Certification(dir, "cpu")
	require.NotNil(t, card)
	assert.True(t, card.Pass)
	assert.Nil(t, card.Trees, "a certificate from before trees")
}
