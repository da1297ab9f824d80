package openai

import (
	"time"

	"github.com/higgs-go/higgs/ports"
)

// ModelCertified is a /v1/models entry's "certified" object: the head of `higgs-verify certify`'s report
// found beside the model (docs/higgs-verify.md).
type ModelCertified struct {
	Pass bool `json:"pass"`
	// When is RFC 3339 (UTC); Build the higgs build that certified.
	When      string `json:"when,omitempty"`
	Build     string `json:"build,omitempty"`
	Backend   string `json:"backend,omitempty"`
	Kernels   string `json:"kernels,omitempty"`
	Drafter   string `json:"drafter,omitempty"`
	Tolerance string `json:"tolerance,omitempty"`
	Scope     string `json:"scope,omitempty"`
	// MatchesLoaded: the certificate was made for the weights and the backend served now.
	MatchesLoaded bool `json:"matches_loaded"`
	// Trees is the certificate's tree verification (absent in certificates made before higgs verified trees).
	Trees *ModelCertifiedTrees `json:"trees,omitempty"`
	// Problem says why a certificate present beside the model could not be read.
	Problem string `json:"problem,omitempty"`
}

// ModelCertifiedTrees is "certified.trees": whether tree verification was certified (verified: tree rounds
// ran; a backend without trees verifies chains and says so in note), at which block sizes and node budgets,
// and how many of the tree runs' draft rounds verified a tree.
type ModelCertifiedTrees struct {
	Verified    bool   `json:"verified"`
	Pass        bool   `json:"pass"`
	BlockSizes  []int  `json:"block_sizes"`
	Budgets     []int  `json:"budgets"`
	TreeRounds  int    `json:"tree_rounds"`
	DraftRounds int    `json:"draft_rounds"`
	Note        string `json:"note,omitempty"`
	// DistributionPass is the T > 0 distribution test's verdict with trees (absent when not run).
	DistributionPass *bool `json:"distribution_pass,omitempty"`
}

// certifiedOf translates a card's certification (nil stays nil).
func certifiedOf(c *ports.Certification) *ModelCertified {
	if c == nil {
		return nil
	}
	m := &ModelCertified{Pass: c.Pass, Build: c.Build, Backend: c.Backend, Kernels: c.Kernels, Drafter: c.Drafter,
		Tolerance: c.Tolerance, Scope: c.Scope, MatchesLoaded: c.Matches, Problem: c.Problem}
	if t := c.Trees; t != nil {
		m.Trees = &ModelCertifiedTrees{Verified: t.Verified, Pass: t.Pass, BlockSizes: nonNil(t.BlockSizes),
			Budgets: nonNil(t.Budgets), TreeRounds: t.TreeRounds, DraftRounds: t.DraftRounds, Note: t.Note,
			DistributionPass: t.DistributionPass}
	}
	if !c.When.IsZero() {
		m.When = c.When.UTC().Format(time.RFC3339)
	}
	return m
}

// nonNil keeps a list an array in the JSON ([] rather than null).
func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}
