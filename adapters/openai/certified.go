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
	// Problem says why a certificate present beside the model could not be read.
	Problem string `json:"problem,omitempty"`
}

// certifiedOf translates a card's certification (nil stays nil).
func certifiedOf(c *ports.Certification) *ModelCertified {
	if c == nil {
		return nil
	}
	m := &ModelCertified{Pass: c.Pass, Build: c.Build, Backend: c.Backend, Kernels: c.Kernels, Drafter: c.Drafter,
		Tolerance: c.Tolerance, Scope: c.Scope, MatchesLoaded: c.Matches, Problem: c.Problem}
	if !c.When.IsZero() {
		m.When = c.When.UTC().Format(time.RFC3339)
	}
	return m
}
